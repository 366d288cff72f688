package slack

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// TestEditRefusedIsNotReportedApproved (issue 25 §8): an approval whose
// edit policy refused closes as "edit refused, nothing ran" in Slack, never
// as approved (webhook's and web's tests of the name cover approval_closed
// and the page).
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
}
