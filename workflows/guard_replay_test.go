package workflows_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/workflows"
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

// TestReplayProgramGuard replays the history of programs whose results
// the worker's content guard inspected (program_guard_v1, integration's
// TestGuardProgramFindingsRecorded; changeProgramGuard) and checks what
// it holds: the program-guard marker, and the two programs' recorded
// results with their findings: one redacted (value and output), one
// withheld (block), its value gone.
func TestReplayProgramGuard(t *testing.T) {
	workflows.UseProgramRunner(&testenv.ScriptRunner{})
	t.Cleanup(func() { workflows.UseProgramRunner(nil) })
	file := "program_guard_v1_run1.json"
	hist := replayedHistory(t, file)
	var marker bool
	var results []api.ProgramResult
	for _, e := range hist.GetEvents() {
		if m := e.GetMarkerRecordedEventAttributes(); m != nil {
			if id := m.GetDetails()["change-id"]; id != nil && string(id.GetPayloads()[0].GetData()) == `"program-guard"` {
				marker = true
			}
		}
		if a := e.GetWorkflowExecutionUpdateCompletedEventAttributes(); a != nil {
			var res api.ProgramResult
			if p := a.GetOutcome().GetSuccess().GetPayloads(); len(p) > 0 && json.Unmarshal(p[0].GetData(), &res) == nil && res.ProgramID != "" {
				results = append(results, res)
			}
		}
	}
	if !marker {
		t.Errorf("%s holds no program-guard marker", file)
	}
	if len(results) != 2 {
		t.Fatalf("%s: %d program results, want 2", file, len(results))
	}
	r := results[0]
	if !r.Guarded || len(r.Findings) != 2 || !strings.Contains(string(r.Result), "[REDACTED:stripe-key]") || !strings.Contains(r.Output, "[REDACTED:stripe-key]") {
		t.Errorf("the first program's recorded result: %+v", r)
	}
	r = results[1]
	if !r.Guarded || r.Withheld == "" || len(r.Result) != 0 || len(r.Findings) != 1 || r.Findings[0].Action != "block" {
		t.Errorf("the blocked program's recorded result: %+v", r)
	}
}
