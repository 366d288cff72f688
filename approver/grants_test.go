package approver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/api"
)

// TestWebGrantForm: the page offers the grant fields a request's
// max_grant allows, and an approval sends what was filled in; a bad value
// is not delivered, and a denial carries no grant.
func TestWebGrantForm(t *testing.T) {
	e := newWebEnvWith(t, nil)
	e.ft.reqs[0].MaxGrant = &api.GrantBound{Calls: 3, Duration: time.Hour}
	e.ft.reqs = append(e.ft.reqs, testRequest("task-2", e.now)) // no max_grant
	bob := e.browser()
	e.login(bob, "bob-key")
	_, body, token := e.page(bob)
	if strings.Count(body, `name="grant_calls"`) != 1 || !strings.Contains(body, `max="3"`) || !strings.Contains(body, `name="grant_for"`) ||
		strings.Contains(body, `name="grant_principal"`) || !strings.Contains(body, "at most 3 calls, 1h0m0s") {
		t.Fatalf("grant fields (only task-1's request allows grants, not across tasks):\n%s", body)
	}
	post := func(id, action string, extra url.Values) {
		t.Helper()
		form := url.Values{"csrf": {token}, "id": {id}, "digest": {"0123456789abcdef"}, "action": {action}}
		for k, v := range extra {
			form[k] = v
		}
		if resp, _ := e.do(bob, "POST", "/approvals/decide", form, nil); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("decide: %d", resp.StatusCode)
		}
	}
	post("task-1~call-1", "approve", url.Values{"grant_calls": {"x"}})
	if _, body, _ := e.page(bob); !strings.Contains(body, `Not recorded: grant calls &#34;x&#34;`) || len(e.ft.sent()) != 0 {
		t.Fatalf("bad grant_calls delivered or not explained (%d sent):\n%s", len(e.ft.sent()), body)
	}
	post("task-1~call-1", "approve", url.Values{"grant_calls": {"2"}, "grant_for": {"30m"}})
	post("task-2~call-1", "deny", url.Values{"grant_calls": {"2"}})
	sent := e.ft.sent()
	if len(sent) != 2 {
		t.Fatalf("%d decisions sent, want 2", len(sent))
	}
	if g := sent[0].Args[0].(api.DecideRequest).Grant; g == nil || *g != (api.GrantAsk{Calls: 2, For: 30 * time.Minute}) ||
		!strings.HasSuffix(sent[0].UpdateID, ":grant:2:30m0s") {
		t.Errorf("approval sent grant %+v update %s", g, sent[0].UpdateID)
	}
	if g := sent[1].Args[0].(api.DecideRequest).Grant; g != nil {
		t.Errorf("a denial sent grant %+v", g)
	}
}

// TestSlackGrantButtons: a request whose tool allows grants has "Approve
// + next N calls" and "Approve + next D" buttons; a signed click on one is
// delivered as an approval with that grant. A forged grant button is
// refused.
func TestSlackGrantButtons(t *testing.T) {
	n := api.ApprovalNotice{RequestID: slackRequest, TaskID: "task-1", Tool: "counter__append", Principal: "alice",
		Arguments: json.RawMessage(`{}`), Digest: slackDigest, Group: "ops", Quorum: 1, ExpiresAt: time.Now().Add(time.Hour),
		MaxGrant: &api.GrantBound{Calls: 10, Duration: time.Hour}}
	_, blocks := RenderRequest(n)
	var ids []string
	for _, b := range blocks {
		if a, ok := b.(*slack.ActionBlock); ok {
			for _, el := range a.Elements.ElementSet {
				if btn, ok := el.(*slack.ButtonBlockElement); ok {
					ids = append(ids, btn.ActionID+"="+btn.Text.Text)
				}
			}
		}
	}
	want := []string{"approve=Approve", "approve_grant:calls=10=Approve + next 10 calls", "approve_grant:for=1h0m0s=Approve + next 1h0m0s", "grant_form=Approve + grant…", "deny=Deny", "edit=Edit & approve"}
	if strings.Join(ids, "|") != strings.Join(want, "|") {
		t.Fatalf("buttons %q, want %q", ids, want)
	}
	n.MaxGrant = nil
	if _, blocks := RenderRequest(n); strings.Contains(blocksJSON(t, blocks), ActionApproveGrant) {
		t.Error("a tool without max_grant offers grant buttons")
	}
	n.State, n.Votes = api.ApprovalApproved, []api.NoticeVote{{Approver: "bob", Approve: true, At: time.Now(), Via: "slack", Grant: "10 calls"}}
	if _, blocks := RenderOutcome(n); !strings.Contains(blocksJSON(t, blocks), "and also 10 calls of this tool") {
		t.Errorf("the outcome does not say what bob granted: %s", blocksJSON(t, blocks))
	}

	f := newSlackFake(t)
	d := &slackDelivery{}
	h := newSlackHandler(t, f, d)
	for i, action := range []string{"approve_grant:calls=10", "approve_grant:for=1h0m0s", "approve_grant:forever=1"} {
		b := slackClickBody("U_BOB", action, slackRequest, slackDigest, "1700000000.00000"+string(rune('1'+i)))
		if w := postSlack(h, b, slackSign(slackSecret, time.Now(), b)); w.Code != http.StatusOK {
			t.Fatalf("status %d", w.Code)
		}
		h.Wait()
	}
	got := d.got()
	if len(got) != 2 {
		t.Fatalf("delivered %+v, want the two readable grant clicks", got)
	}
	if g := got[0].Decision.Grant; !got[0].Decision.Approve || g == nil || *g != (api.GrantAsk{Calls: 10}) {
		t.Errorf("calls click delivered %+v", got[0].Decision)
	}
	if g := got[1].Decision.Grant; !got[1].Decision.Approve || g == nil || *g != (api.GrantAsk{For: time.Hour}) {
		t.Errorf("duration click delivered %+v", got[1].Decision)
	}
	eph := f.waitFor(t, "chat.postEphemeral", 3)
	if !strings.Contains(eph[2].Form.Get("text"), "names no grant airlock understands") {
		t.Errorf("forged grant button answered %q", eph[2].Form.Get("text"))
	}
}

func blocksJSON(t *testing.T, blocks []slack.Block) string {
	b, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWebhookGrant: a signed webhook decision with grant fields is
// delivered as an approval with that grant; a grant on a denial or a bad
// duration is refused (400) without delivering; the event a bridge gets
// carries the request's max_grant.
func TestWebhookGrant(t *testing.T) {
	now := time.Now()
	ft := &fakeTemporal{reqs: []api.ApprovalRequest{testRequest("task-1", now)}}
	ch := WebhookChannel{Name: "bridge", Secret: "s3cret"}
	h := WebhookDecisions(WebhookDecisionOptions{Channels: []WebhookChannel{ch}, Directory: testDirectory(),
		Local: Local{Temporal: ft, Namespace: "default"}})
	post := func(body string) int {
		t.Helper()
		r := httptestRequest(body)
		for k, v := range SignWebhook(ch.Secret, time.Now(), []byte(body)) {
			r.Header[k] = v
		}
		r.Header.Set(WebhookChannelHeader, ch.Name)
		w := newRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := post(`{"request":"task-1~call-1","digest":"0123456789abcdef","approver":"bob","decision":"deny","grant_calls":2}`); code != http.StatusBadRequest {
		t.Errorf("grant on a deny: %d, want 400", code)
	}
	if code := post(`{"request":"task-1~call-1","digest":"0123456789abcdef","approver":"bob","decision":"approve","grant_for":"soon"}`); code != http.StatusBadRequest {
		t.Errorf("bad grant_for: %d, want 400", code)
	}
	if len(ft.sent()) != 0 {
		t.Fatalf("refused decisions were delivered: %+v", ft.sent())
	}
	if code := post(`{"request":"task-1~call-1","digest":"0123456789abcdef","approver":"bob","decision":"approve","grant_calls":2,"grant_for":"15m"}`); code != http.StatusOK {
		t.Fatalf("approve with a grant: %d", code)
	}
	sent := ft.sent()
	if len(sent) != 1 {
		t.Fatalf("%d decisions delivered", len(sent))
	}
	if g := sent[0].Args[0].(api.DecideRequest).Grant; g == nil || *g != (api.GrantAsk{Calls: 2, For: 15 * time.Minute}) || sent[0].Args[0].(api.DecideRequest).Via != "webhook:bridge" {
		t.Errorf("delivered %+v", sent[0].Args[0])
	}
	wr := webhookRequest(api.ApprovalNotice{RequestID: "task-1~call-1", MaxGrant: &api.GrantBound{Calls: 3, Duration: time.Hour}})
	if wr.MaxGrant == nil || *wr.MaxGrant != (WebhookGrantBound{Calls: 3, Duration: "1h0m0s"}) {
		t.Errorf("event max_grant %+v", wr.MaxGrant)
	}
}

func httptestRequest(body string) *http.Request {
	return httptest.NewRequest(http.MethodPost, WebhookDecisionPath, strings.NewReader(body))
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }
