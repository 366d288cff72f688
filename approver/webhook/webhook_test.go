package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
	"github.com/airlock-run/airlock/internal/auditstream"
)

// postDecision signs body for ch and serves it with h.
func postDecision(t *testing.T, h http.Handler, ch Channel, body string) (int, map[string]any) {
	t.Helper()
	r := httptestRequest(body)
	for k, v := range Sign(ch.Secret, time.Now(), []byte(body)) {
		r.Header[k] = v
	}
	r.Header.Set(ChannelHeader, ch.Name)
	w := newRecorder()
	h.ServeHTTP(w, r)
	var out map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	return w.Code, out
}

// TestWebhookChannelServesItsGroups (issue 25 §6): channel teams serves
// ops; a signed decision of it on a request of group sec is refused and
// never delivered, while the same channel decides a request escalated to
// ops.
func TestWebhookChannelServesItsGroups(t *testing.T) {
	now := time.Now()
	sec := approvertest.Request("task-1", now)
	sec.Group, sec.Approvers = "sec", []string{"carol"}
	esc := approvertest.Request("task-2", now)
	esc.Group, esc.Escalated, esc.EscalateTo = "sec", true, "ops"
	ft := &approvertest.FakeTemporal{Reqs: []api.ApprovalRequest{sec, esc}}
	var audit bytes.Buffer
	ch := Channel{Name: "teams", Secret: "s3cret", Groups: []string{"ops"}}
	h := Decisions(DecisionOptions{Channels: []Channel{ch}, Local: approver.Local{Temporal: ft, Namespace: "default", Audit: auditstream.New(&audit)}})

	code, out := postDecision(t, h, ch, `{"request":"task-1~call-1","digest":"`+sec.Digest+`","approver":"carol","decision":"approve"}`)
	if code != http.StatusConflict || out["recorded"] != false || !strings.Contains(out["refused"].(string), `for group "sec"`) {
		t.Fatalf("decision on a sec request through teams: %d %v, want 409 refused", code, out)
	}
	if n := len(ft.Sent()); n != 0 {
		t.Fatalf("%d decisions delivered to the task; the channel does not serve its group", n)
	}
	if !strings.Contains(audit.String(), "refused") {
		t.Errorf("the refusal is not audited: %s", audit.String())
	}
	if code, out := postDecision(t, h, ch, `{"request":"task-2~call-1","digest":"`+esc.Digest+`","approver":"bob","decision":"approve"}`); code != http.StatusOK || out["recorded"] != true {
		t.Fatalf("decision on a request escalated to ops: %d %v", code, out)
	}
}

// TestWebhookShortDigest (issue 25, low): a digest too short to bind to a
// request is the bridge's mistake, a 400 that says so (503 before).
func TestWebhookShortDigest(t *testing.T) {
	ft := &approvertest.FakeTemporal{Reqs: []api.ApprovalRequest{approvertest.Request("task-1", time.Now())}}
	ch := Channel{Name: "teams", Secret: "s3cret"}
	h := Decisions(DecisionOptions{Channels: []Channel{ch}, Local: approver.Local{Temporal: ft, Namespace: "default"}})
	for _, digest := range []string{"0123", "zzzzzzzzzzzz"} {
		code, out := postDecision(t, h, ch, `{"request":"task-1~call-1","digest":"`+digest+`","approver":"bob","decision":"approve"}`)
		if msg, _ := out["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "at least 8 hex digits") {
			t.Errorf("digest %q: %d %v, want 400 naming the digest", digest, code, out)
		}
	}
	if n := len(ft.Sent()); n != 0 {
		t.Fatalf("%d decisions delivered", n)
	}
}

// TestRepeatedDecisionRecordedOnce (issue 25 §9): a replayed webhook
// delivery is reported as already decided, by whom, and writes no second
// approval_decided line (approver's test of the name covers the web page,
// the CLI and MCP).
func TestRepeatedDecisionRecordedOnce(t *testing.T) {
	t.Run("webhook", func(t *testing.T) {
		r := approvertest.Request("task-1", time.Now())
		ft := &approvertest.FakeTemporal{Reqs: []api.ApprovalRequest{r}}
		var audit bytes.Buffer
		ch := Channel{Name: "teams", Secret: "s3cret"}
		h := Decisions(DecisionOptions{Channels: []Channel{ch}, Local: approver.Local{Temporal: ft, Namespace: "default", Audit: auditstream.New(&audit)}})
		body := `{"request":"task-1~call-1","digest":"` + r.Digest + `","approver":"bob","decision":"approve"}`
		if code, out := postDecision(t, h, ch, body); code != http.StatusOK || out["recorded"] != true {
			t.Fatalf("first delivery: %d %v", code, out)
		}
		for i := range 2 {
			code, out := postDecision(t, h, ch, body)
			msg, _ := out["message"].(string)
			if code != http.StatusOK || out["recorded"] != false || out["already_decided"] != true || !strings.Contains(msg, "bob already approved") ||
				!strings.Contains(msg, "via webhook:teams") {
				t.Fatalf("replay %d: %d %v, want already decided by bob", i+1, code, out)
			}
		}
		if n := strings.Count(audit.String(), `"approval_decided"`); n != 1 {
			t.Fatalf("%d approval_decided lines for one vote:\n%s", n, audit.String())
		}
	})
}

// TestWebhookApproveWithEdits: a bridge's signed decision may carry
// arguments; they are delivered with the approval (masked values restored).
func TestWebhookApproveWithEdits(t *testing.T) {
	ft := &approvertest.FakeTemporal{Reqs: []api.ApprovalRequest{approvertest.Request("task-1", time.Now())}}
	r := ft.Reqs[0]
	h := Decisions(DecisionOptions{Channels: []Channel{{Name: "teams", Secret: "s3cret-webhook-secret"}},
		Local: approver.Local{Temporal: ft, Namespace: "default"}})
	body := []byte(`{"request":"` + r.ID + `","digest":"` + r.Digest + `","approver":"bob","decision":"approve","arguments":{"key":"k9","auth":{"token":"[redacted]"}}}`)
	req := httptest.NewRequest(http.MethodPost, DecisionPath, bytes.NewReader(body))
	for k, v := range Sign("s3cret-webhook-secret", time.Now(), body) {
		req.Header[k] = v
	}
	req.Header.Set(ChannelHeader, "teams")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("decision: %d %s", w.Code, w.Body)
	}
	sent := ft.Sent()
	if len(sent) != 1 {
		t.Fatalf("delivered %d", len(sent))
	}
	if d := sent[0].Args[0].(api.DecideRequest); d.Arguments != `{"auth":{"token":"s3cret"},"key":"k9"}` || d.Via != "webhook:teams" {
		t.Errorf("delivered %+v", d)
	}
}

// TestWebhookGrant: a signed webhook decision with grant fields is
// delivered as an approval with that grant; a grant on a denial or a bad
// duration is refused (400) without delivering; the event a bridge gets
// carries the request's max_grant.
func TestWebhookGrant(t *testing.T) {
	now := time.Now()
	ft := &approvertest.FakeTemporal{Reqs: []api.ApprovalRequest{approvertest.Request("task-1", now)}}
	ch := Channel{Name: "bridge", Secret: "s3cret"}
	h := Decisions(DecisionOptions{Channels: []Channel{ch}, Directory: approvertest.Directory(),
		Local: approver.Local{Temporal: ft, Namespace: "default"}})
	post := func(body string) int {
		t.Helper()
		r := httptestRequest(body)
		for k, v := range Sign(ch.Secret, time.Now(), []byte(body)) {
			r.Header[k] = v
		}
		r.Header.Set(ChannelHeader, ch.Name)
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
	if len(ft.Sent()) != 0 {
		t.Fatalf("refused decisions were delivered: %+v", ft.Sent())
	}
	if code := post(`{"request":"task-1~call-1","digest":"0123456789abcdef","approver":"bob","decision":"approve","grant_calls":2,"grant_for":"15m"}`); code != http.StatusOK {
		t.Fatalf("approve with a grant: %d", code)
	}
	sent := ft.Sent()
	if len(sent) != 1 {
		t.Fatalf("%d decisions delivered", len(sent))
	}
	if g := sent[0].Args[0].(api.DecideRequest).Grant; g == nil || *g != (api.GrantAsk{Calls: 2, For: 15 * time.Minute}) || sent[0].Args[0].(api.DecideRequest).Via != "webhook:bridge" {
		t.Errorf("delivered %+v", sent[0].Args[0])
	}
	wr := noticeRequest(api.ApprovalNotice{RequestID: "task-1~call-1", MaxGrant: &api.GrantBound{Calls: 3, Duration: time.Hour}})
	if wr.MaxGrant == nil || *wr.MaxGrant != (GrantBound{Calls: 3, Duration: "1h0m0s"}) {
		t.Errorf("event max_grant %+v", wr.MaxGrant)
	}
}

func httptestRequest(body string) *http.Request {
	return httptest.NewRequest(http.MethodPost, DecisionPath, strings.NewReader(body))
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

// TestEditRefusedIsNotReportedApproved (issue 25 §8): an approval whose
// edit policy refused closes as edit_refused in the webhook's
// approval_closed, never as approved (slack's and web's tests of the name
// cover the message and the page).
func TestEditRefusedIsNotReportedApproved(t *testing.T) {
	n := api.ApprovalNotice{RequestID: "task-1~c1", TaskID: "task-1", Tool: "fs__write", Group: "ops", Quorum: 1, State: api.ApprovalApproved,
		Votes: []api.NoticeVote{{Approver: "bob", Approve: true, Via: "web"}},
		ApprovalEdits: api.ApprovalEdits{Edit: &api.ArgsEdit{By: "bob", Digest: "abcdef0123456789", Effect: "deny",
			Refused: "policy denies the edited call (check rule): no env files"}}}
	wr := noticeRequest(n)
	if wr.Outcome != "edit_refused" || wr.Edit == nil || !strings.Contains(wr.Edit.Refused, "no env files") {
		t.Errorf("webhook request %+v, want outcome edit_refused", wr)
	}
}
