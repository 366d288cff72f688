package approver

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// TestEditRefusedIsNotReportedApproved (issue 25 §8): an approval whose
// edit policy refused closes as "edit refused, nothing ran" in Slack, in
// the webhook's approval_closed and on the page, never as approved.
func TestEditRefusedIsNotReportedApproved(t *testing.T) {
	n := api.ApprovalNotice{RequestID: "task-1~c1", TaskID: "task-1", Tool: "fs__write", Group: "ops", Quorum: 1, State: api.ApprovalApproved,
		Votes: []api.NoticeVote{{Approver: "bob", Approve: true, Via: "web"}},
		ApprovalEdits: api.ApprovalEdits{Edit: &api.ArgsEdit{By: "bob", Digest: "abcdef0123456789", Effect: "deny",
			Refused: "policy denies the edited call (check rule): no env files"}}}
	fallback, blocks := RenderOutcome(n)
	b, _ := json.Marshal(blocks)
	if !strings.Contains(fallback, "Edit refused") || strings.Contains(fallback, "Approved") || !strings.Contains(string(b), "Nothing ran") ||
		strings.Contains(string(b), "white_check_mark") {
		t.Errorf("Slack outcome %q %s, want edit refused and nothing ran", fallback, b)
	}
	wr := webhookRequest(n)
	if wr.Outcome != "edit_refused" || wr.Edit == nil || !strings.Contains(wr.Edit.Refused, "no env files") {
		t.Errorf("webhook request %+v, want outcome edit_refused", wr)
	}
	msg := decidedNotice(true, api.DecideResult{RequestID: n.RequestID, State: api.ApprovalApproved, Message: "approved with edited arguments, but the edit was refused",
		EditDigest: "abcdef0123456789", EditEffect: "deny", EditRefused: "policy denies the edited call (check rule): no env files"}, api.ApprovalRequest{})
	if !strings.Contains(msg, "refused by policy") || !strings.Contains(msg, "Nothing ran") || strings.Contains(msg, "it is what runs") {
		t.Errorf("page notice %q", msg)
	}
}
