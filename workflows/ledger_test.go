package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// continued runs the harness's task from in until it continues as new and
// returns the next run's input.
func (h *harness) continued(in api.TaskInput) api.TaskInput {
	h.t.Helper()
	h.env.ExecuteWorkflow(api.AgentTaskName, in)
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		h.t.Fatalf("want continue-as-new, got %v", err)
	}
	var next api.TaskInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		h.t.Fatal(err)
	}
	return next
}

// TestLedgerAnswersRepeatsAcrossRuns: three runs. Run 1 makes 40 calls
// (more than the 32 whose results a task carries), run 2 makes 3; in run
// 3, a retry of any of them is answered without running the tool: with
// its first result when the task still holds it, else with its outcome
// and the run that recorded it. A new call still runs.
func TestLedgerAnswersRepeatsAcrossRuns(t *testing.T) {
	toolErr := respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[{"type":"text","text":"disk full"}],"isError":true}`), IsError: true}, nil)
	h1 := newHarness(t, toolErr) // c1 is a tool error, the rest ok
	in := baseInput()
	in.Limits.MaxCalls, in.Limits.ContinueAsNewAfter = 100, 40
	for i := 1; i <= 40; i++ {
		h1.callAt(time.Duration(i)*time.Second, req(fmt.Sprintf("c%d", i), false), nil, nil)
	}
	next := h1.continued(in)
	if n := next.Carried.Ledger.Len(); n != 40 || len(next.Carried.Recent) != recentKept {
		t.Fatalf("run 1 carried %d calls in its ledger, %d recent; want 40 and %d", n, len(next.Carried.Recent), recentKept)
	}

	h2 := newHarness(t)
	next.Limits.ContinueAsNewAfter = 3
	for i := 41; i <= 43; i++ {
		h2.callAt(time.Duration(i)*time.Second, req(fmt.Sprintf("c%d", i), false), nil, nil)
	}
	next = h2.continued(next)
	if n := len(next.Carried.Ledger.Runs); n != 2 || next.Carried.Ledger.Runs[1].N != 2 || next.Carried.Ledger.Runs[1].First != 40 {
		t.Fatalf("ledger runs %+v, want runs 1 and 2, run 2 from call 40", next.Carried.Ledger.Runs)
	}
	run1 := next.Carried.Ledger.Runs[0].ID

	h3 := newHarness(t)
	next.Limits.ContinueAsNewAfter = 100
	got := map[string]*api.CallResult{}
	for i, id := range []string{"c1", "c2", "c40", "c42", "c44"} {
		got[id] = &api.CallResult{}
		h3.callAt(time.Duration(i+1)*time.Second, req(id, false), got[id], nil)
	}
	h3.finishAt(time.Minute)
	out := h3.run(next)

	if h3.tools.calls() != 1 || h3.tools.seen[0].CallID != "c44" {
		t.Fatalf("run 3 ran %d tool calls (%+v); want only the new c44", h3.tools.calls(), h3.tools.seen)
	}
	if out.Calls != 44 {
		t.Errorf("calls over the task: %d, want 44", out.Calls)
	}
	tests := []struct {
		id      string
		outcome api.Outcome
		run     int
		held    bool
		text    string // substring of the answer, for results not held
	}{
		{id: "c1", outcome: api.OutcomeToolError, run: 1, text: "with outcome tool_error"},
		{id: "c2", outcome: api.OutcomeOK, run: 1, text: "airlock audit show --run " + run1 + " task-1"},
		{id: "c40", outcome: api.OutcomeOK, run: 1, held: true},
		{id: "c42", outcome: api.OutcomeOK, run: 2, held: true},
	}
	for _, tc := range tests {
		res := got[tc.id]
		if res.CallID != tc.id || res.Outcome != tc.outcome || res.Repeat == nil || res.Repeat.Run != tc.run || res.Repeat.Held != tc.held {
			t.Errorf("%s: %+v (repeat %+v); want outcome %s, a repeat of run %d, held %v", tc.id, res, res.Repeat, tc.outcome, tc.run, tc.held)
			continue
		}
		text := api.ResultText(res.Result)
		if tc.held {
			if text != "default" || res.Attempts != 1 {
				t.Errorf("%s: result %s attempts %d; want the first result", tc.id, res.Result, res.Attempts)
			}
			continue
		}
		for _, want := range []string{tc.id + " already ran in task task-1, in run 1", "was not run again", tc.text} {
			if !strings.Contains(text, want) || !strings.Contains(res.Reason, want) {
				t.Errorf("%s: answer %q does not say %q", tc.id, text, want)
			}
		}
	}
	if res := got["c44"]; res.Outcome != api.OutcomeOK || res.Repeat != nil {
		t.Errorf("c44, a new call: %+v", res)
	}

	// The call query (airlock_await's way to a call of an earlier run)
	// answers the same way; it fails for a call the task does not know.
	v, err := h3.env.QueryWorkflow(api.QueryCall, "c2")
	var q api.CallResult
	if err == nil {
		err = v.Get(&q)
	}
	if err != nil || q.Repeat == nil || q.Repeat.Run != 1 || !strings.Contains(q.Reason, "c2 already ran") {
		t.Errorf("query call c2: %v %+v", err, q)
	}
	if _, err := h3.env.QueryWorkflow(api.QueryCall, "never-sent"); err == nil {
		t.Error("query call for an unknown call ID answered")
	}
}

// TestRepeatAnsweredWhileDraining: while a run drains for continue-as-new,
// a new call is rejected for the client to retry against the next run,
// but a retry of a call the task ran in an earlier run is answered at once.
func TestRepeatAnsweredWhileDraining(t *testing.T) {
	h1 := newHarness(t)
	in := baseInput()
	in.Limits.ContinueAsNewAfter = 1
	h1.callAt(time.Second, req("c0", false), nil, nil)
	next := h1.continued(in)

	// c1 needs a retry (a 1s durable timer), so the run drains meanwhile.
	h := newHarness(t, respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)), respond(okOutput(`{"content":[]}`), nil))
	var r0, r1 api.CallResult
	var rejected, rejected0 error
	h.callAt(time.Second, req("c1", false), &r1, nil)
	h.callAt(1200*time.Millisecond, req("c0", false), &r0, &rejected0)
	h.callAt(1500*time.Millisecond, req("c2", false), nil, &rejected)
	h.continued(next)
	if rejected0 != nil || r0.Outcome != api.OutcomeOK || r0.Repeat == nil || !r0.Repeat.Held || r0.Repeat.Run != 1 {
		t.Errorf("c0 (a repeat) during the drain: rejected %v, answer %+v", rejected0, r0)
	}
	if rejected == nil || !strings.Contains(rejected.Error(), api.ErrContinuingAsNew) {
		t.Errorf("c2 (new) during the drain: rejection %v", rejected)
	}
	if r1.Outcome != api.OutcomeOK || h.tools.calls() != 2 {
		t.Errorf("c1 %+v; activity ran %d times, want 2 (c1 twice, c0 and c2 never)", r1, h.tools.calls())
	}
}

// TestLedgerStartsFromRecentCalls: a task continued from a run that kept
// no ledger starts its ledger from the recent calls it carried, so they
// stay recognised after they leave the recent calls.
func TestLedgerStartsFromRecentCalls(t *testing.T) {
	in := baseInput()
	in.Limits.MaxCalls = 100
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	in.Carried = &api.Carried{StartedAt: t0, LastActivity: t0, Calls: 1, Runs: 1, Recent: []api.CallRecord{
		{CallID: "old", Tool: "fs__read", Outcome: api.OutcomeDenied, Reason: "no"},
		{CallID: "refused", Tool: "fs__read", Outcome: api.OutcomeLimit, Reason: "limit"},
	}}
	in.Limits.ContinueAsNewAfter = recentKept
	h := newHarness(t)
	h.env.SetStartTime(t0)
	for i := range recentKept {
		h.callAt(time.Duration(i+1)*time.Second, req(fmt.Sprintf("n%d", i), false), nil, nil)
	}
	next := h.continued(in)
	l := next.Carried.Ledger
	if l.Len() != recentKept+1 || l.Runs[0].N != 0 || l.Runs[1].N != 2 {
		t.Fatalf("ledger of %d calls, runs %+v; want the old call (run unknown) and %d of run 2", l.Len(), l.Runs, recentKept)
	}

	h2 := newHarness(t)
	h2.env.SetStartTime(t0)
	var res api.CallResult
	h2.callAt(time.Second, req("old", false), &res, nil)
	h2.finishAt(time.Minute)
	h2.run(next)
	if h2.tools.calls() != 0 || res.Outcome != api.OutcomeDenied || !strings.Contains(res.Reason, "in an earlier run") {
		t.Fatalf("old: %+v after %d tool calls", res, h2.tools.calls())
	}
}

// TestLedgerFullRefusesNewCalls: a task whose ledger is full refuses new
// calls rather than forget old ones; retries are still answered.
func TestLedgerFullRefusesNewCalls(t *testing.T) {
	l := &api.CallLedger{}
	for i := range api.MaxTaskCalls {
		l.Add(1+i/500, fmt.Sprintf("run-%036d", i/500), fmt.Sprintf("k-%d", i), api.OutcomeOK)
	}
	in := baseInput()
	in.Limits.MaxCalls = 0 // unlimited by configuration
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	in.Carried = &api.Carried{StartedAt: t0, LastActivity: t0, Calls: api.MaxTaskCalls, Runs: 50, Ledger: l}
	h := newHarness(t)
	h.env.SetStartTime(t0)
	var fresh, again api.CallResult
	h.callAt(time.Second, req("new", false), &fresh, nil)
	h.callAt(2*time.Second, req("k-7", false), &again, nil)
	h.finishAt(time.Minute)
	h.run(in)
	if fresh.Outcome != api.OutcomeLimit || !strings.Contains(fresh.Reason, "the most one task can remember") || h.tools.calls() != 0 {
		t.Errorf("a call past the ledger's capacity: %+v (%d tool calls)", fresh, h.tools.calls())
	}
	if again.Repeat == nil || again.Repeat.Run != 1 || again.Outcome != api.OutcomeOK {
		t.Errorf("a retry in a full task: %+v", again)
	}
}
