package slack

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/api"
)

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
