package workflows_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// TestReplayResultApproval replays the history of a task whose results
// were held for approval (result_approval_v1, integration's
// TestGuardHeldResultOnNPMFilesystem; changeResultApproval) and checks
// what it holds: the result-approval marker; three CallTool results
// held (the redacted copy and the sealed one, with the approval named by
// its findings); three requests to deliver a result; and three call
// results: one approved, carrying the sealed result, and two withheld
// (denied, expired) naming the findings.
func TestReplayResultApproval(t *testing.T) {
	file := "result_approval_v1_run1.json"
	hist := replayedHistory(t, file)
	var marker bool
	var heldOut, sealedRes, withheld, redacted int
	for _, e := range hist.GetEvents() {
		if m := e.GetMarkerRecordedEventAttributes(); m != nil {
			if id := m.GetDetails()["change-id"]; id != nil && string(id.GetPayloads()[0].GetData()) == `"result-approval"` {
				marker = true
			}
		}
		if a := e.GetActivityTaskCompletedEventAttributes(); a != nil {
			var out api.CallToolOutput
			if p := a.GetResult().GetPayloads(); len(p) > 0 && json.Unmarshal(p[0].GetData(), &out) == nil && out.Held != nil {
				heldOut++
				if len(out.Held.Sealed) == 0 || !strings.Contains(out.Held.Reason, "the call ran; approve delivering its result") {
					t.Errorf("a held result without ciphertext or reason: %+v", out.Held)
				}
				if strings.Contains(string(out.Result), "[REDACTED:aws-access-key]") {
					redacted++
				}
			}
		}
		if a := e.GetWorkflowExecutionUpdateCompletedEventAttributes(); a != nil {
			var res api.CallResult
			if p := a.GetOutcome().GetSuccess().GetPayloads(); len(p) > 0 && json.Unmarshal(p[0].GetData(), &res) == nil {
				switch {
				case res.Held != nil:
					sealedRes++
				case strings.Contains(string(res.Result), "airlock withheld the result") && strings.Contains(string(res.Result), "require_approval"):
					withheld++
				}
			}
		}
	}
	if !marker {
		t.Errorf("%s holds no result-approval marker", file)
	}
	if heldOut != 3 || redacted != 3 || sealedRes != 1 || withheld != 2 {
		t.Errorf("%s: %d held CallTool results (%d redacted), %d approved call results with the sealed result, %d withheld; want 3 (3), 1, 2",
			file, heldOut, redacted, sealedRes, withheld)
	}
}
