package workflows_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/worker"
	"github.com/airlock-run/airlock/workflows"
)

// TestReplayRecordedHistories replays every recorded history in testdata
// against the current workflow code. A failure means a change to workflow
// logic is not behind workflow.GetVersion. Re-record (never overwrite old
// files after a change; add new ones) with:
//
//	go test ./integration/ -run TestRecordHistory -record
//
// Programs (code mode) in them were recorded with testenv.ScriptRunner
// and replay with it: the runner is an input of the workflow, like an
// activity's result, and what must replay is the task's side.
func TestReplayRecordedHistories(t *testing.T) {
	workflows.UseProgramRunner(&testenv.ScriptRunner{})
	t.Cleanup(func() { workflows.UseProgramRunner(nil) })
	// A replay observes no program (metrics count where a program ends,
	// not each time its history is read again).
	var observed atomic.Int64
	workflows.ObservePrograms(func(string, int, int64, time.Duration) { observed.Add(1) })
	t.Cleanup(func() { workflows.ObservePrograms(nil) })
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := sdkworker.NewWorkflowReplayer()
			worker.RegisterWorkflows(r)
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("%s does not replay: %v", f, err)
			}
		})
	}
	if n := observed.Load(); n != 0 {
		t.Errorf("replaying the histories observed %d programs, want 0", n)
	}
}

// TestReplayJudgedRoute replays the history of calls whose requests named a
// stale route (judged_route_v1, integration's TestRecordJudgedRouteHistory)
// and checks what it holds: the judged-route marker, and calls that ran
// the worker's route (put, echo), never the request's (put_old, echo_old).
// A replay does not compare activity inputs, so it cannot tell which route
// the code runs; TestCallRunsTheJudgedRoute checks that.
func TestReplayJudgedRoute(t *testing.T) {
	file := "judged_route_v1_run1.json"
	hist := replayedHistory(t, file)
	var marker bool
	var ran []string
	for _, e := range hist.GetEvents() {
		if m := e.GetMarkerRecordedEventAttributes(); m != nil {
			if id := m.GetDetails()["change-id"]; id != nil && string(id.GetPayloads()[0].GetData()) == `"judged-route"` {
				marker = true
			}
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == api.CallToolName {
			var in api.CallToolInput
			if err := json.Unmarshal(a.GetInput().GetPayloads()[0].GetData(), &in); err != nil {
				t.Fatal(err)
			}
			ran = append(ran, in.Tool)
		}
	}
	if !marker {
		t.Errorf("%s holds no judged-route marker", file)
	}
	if !slices.Equal(ran, []string{"put"}) {
		t.Errorf("CallTool ran %q, want [put] (the judged route; echo ran on the fast path)", ran)
	}
}

// replayedHistory reads the recorded history testdata/file, replays it
// against today's workflows (failing the test if it does not replay) and
// returns it, for a test that then checks what it holds.
func replayedHistory(t *testing.T, file string) *historypb.History {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := sdkworker.NewWorkflowReplayer()
	worker.RegisterWorkflows(r)
	if err := r.ReplayWorkflowHistory(nil, hist); err != nil {
		t.Fatalf("%s does not replay: %v", file, err)
	}
	return hist
}

// TestReplayUserGrant replays the history of a task whose calls acted as
// their user with a held grant (user_grant_v1, integration's
// TestRecordUserGrantHistory) and checks what it holds: the user-grant
// marker; every CallTool of the upstream, the compensation (undo-…)
// included, carrying the user's sealed grant (Held, never a token in the
// clear); and the call approved after the token expired recorded as acted
// with the held grant.
func TestReplayUserGrant(t *testing.T) {
	file := "user_grant_v1_run1.json"
	hist := replayedHistory(t, file)
	var marker, heldResult bool
	var calls, undo int
	for _, e := range hist.GetEvents() {
		if m := e.GetMarkerRecordedEventAttributes(); m != nil {
			if id := m.GetDetails()["change-id"]; id != nil && string(id.GetPayloads()[0].GetData()) == `"user-grant"` {
				marker = true
			}
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == api.CallToolName {
			var in api.CallToolInput
			if err := json.Unmarshal(a.GetInput().GetPayloads()[0].GetData(), &in); err != nil {
				t.Fatal(err)
			}
			calls++
			if in.Subject == nil || !in.Subject.Held || in.Subject.Principal != "alice@corp" || len(in.Subject.Sealed) == 0 {
				t.Errorf("call %s carries no held grant of alice: %+v", in.CallID, in.Subject)
			}
			if id, ok := strings.CutPrefix(in.CallID, "undo-"); ok && in.CallID == api.CompensationID(id) {
				undo++
			}
		}
		if c := e.GetActivityTaskCompletedEventAttributes(); c != nil && len(c.GetResult().GetPayloads()) > 0 {
			var out api.CallToolOutput
			if json.Unmarshal(c.GetResult().GetPayloads()[0].GetData(), &out) == nil && out.ActedAs != nil && out.ActedAs.Held && out.ActedAs.Subject == "alice" && out.ActedAs.Actor == "airlock" {
				heldResult = true
			}
		}
	}
	if !marker {
		t.Errorf("%s holds no user-grant marker", file)
	}
	if calls != 4 || undo != 1 {
		t.Errorf("%d CallTool activities (%d compensations); want 4 (capture, update, deploy, its compensation) with 1 compensation", calls, undo)
	}
	if !heldResult {
		t.Errorf("%s records no call acted with the held grant", file)
	}
}

// TestReplayGrantGoneNotice replays the history of an approved call whose
// user's grant was gone when it ran (grant_gone_v1, integration's
// TestTokenExchangeSlackApprover: dave, disabled at the provider after his
// sign-in ended) and checks what it holds: the grant-gone-notice marker,
// the call failed UserGrant, and two updates of the request's messages,
// the closing one (approved) and then one whose notice says the call did
// not run (NotRun).
func TestReplayGrantGoneNotice(t *testing.T) {
	file := "grant_gone_v1_run1.json"
	hist := replayedHistory(t, file)
	var marker, userGrant bool
	var updates []api.ApprovalNotice
	for _, e := range hist.GetEvents() {
		if m := e.GetMarkerRecordedEventAttributes(); m != nil {
			if id := m.GetDetails()["change-id"]; id != nil && string(id.GetPayloads()[0].GetData()) == `"grant-gone-notice"` {
				marker = true
			}
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == api.UpdateApprovalName {
			var n api.ApprovalNotice
			if err := json.Unmarshal(a.GetInput().GetPayloads()[0].GetData(), &n); err != nil {
				t.Fatal(err)
			}
			updates = append(updates, n)
		}
		if f := e.GetActivityTaskFailedEventAttributes(); f != nil && f.GetFailure().GetApplicationFailureInfo().GetType() == api.ErrTypeUserGrant {
			userGrant = true
		}
	}
	if !marker || !userGrant {
		t.Errorf("%s: grant-gone-notice marker %v, a UserGrant failure %v; want both", file, marker, userGrant)
	}
	if len(updates) != 2 || updates[0].NotRun != "" || !strings.Contains(updates[1].NotRun, "did not run") ||
		updates[1].State != api.ApprovalApproved || updates[1].ActsAs != "dave@corp" || !updates[1].ActsHeld {
		t.Fatalf("%s: the message updates %+v; want the closing one, then one saying dave's approved call did not run", file, updates)
	}
}
