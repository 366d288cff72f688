package integration

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/workflows"
)

// TestRecordProgramHistory records an agent task that runs programs
// (code mode, changeRunProgram) with testenv.ScriptRunner, which the
// replay test runs them with too; their source is the Starlark subset it
// plays, which the real interpreter runs with the same calls, so the
// history replays with either: an atomic program whose calls run in
// sequence and in parallel, wait for an approval, are denied (caught, then
// not) and whose own write is rolled back; a plain program; and one
// stopped by SignalStopProgram while its call waits for approval. With
// -record it writes program_v1_run1.json.
//
// The same task run by the real interpreter (wasm.Program on wazero, as
// workers run programs) is program_wasm_v1: its history, approval
// included, replays in the suite with either runner too.
func TestRecordProgramHistory(t *testing.T) {
	t.Run("scripted", func(t *testing.T) { recordProgramHistory(t, &testenv.ScriptRunner{}, "record-program", "program_v1") })
	t.Run("interpreter", func(t *testing.T) {
		recordProgramHistory(t, programRuntime(t), "record-program-wasm", "program_wasm_v1")
	})
}

func recordProgramHistory(t *testing.T, runner workflows.ProgramRunner, taskID, name string) {
	m, effects := counterManifest(t, `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  put:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: true
    approval: {group: ops, timeout: 1h}
    compensation: {tool: put, args: {key: '"undo-" + args.key'}}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, policy: &policy.Config{Rules: []policy.Rule{
		{Name: "no-secrets", When: `args.?text.orValue("") == "secret"`, Effect: api.Deny, Reason: "secrets stay out of tools"},
	}}, groups: map[string][]string{"ops": {"bob"}}})
	waitTools(t, s.connect(t, nil), "counter__echo", "counter__put")
	workflows.UseProgramRunner(runner)
	t.Cleanup(func() { workflows.UseProgramRunner(nil) })
	ctx := context.Background()
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 100, IdleTimeout: time.Hour})

	tools := []api.ProgramTool{
		{Name: "counter__echo", Module: "counter", Function: "echo", Server: "counter", UpstreamTool: "echo", Spec: api.SpecFor(m.Tools["echo"])},
		{Name: "counter__put", Module: "counter", Function: "put", Server: "counter", UpstreamTool: "put", Spec: api.SpecFor(m.Tools["put"])},
	}
	start := func(id, src string, atomic bool) client.WorkflowUpdateHandle {
		t.Helper()
		req := api.ProgramRequest{ProgramID: id, Source: src, Principal: "recorder", Tools: tools, Limits: api.DefaultProgramLimits, Atomic: atomic}
		h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: taskID, UpdateID: id,
			UpdateName: api.UpdateRunProgram, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageAccepted})
		if err != nil {
			t.Fatalf("program %s: %v", id, err)
		}
		return h
	}
	result := func(h client.WorkflowUpdateHandle) api.ProgramResult {
		t.Helper()
		var res api.ProgramResult
		if err := h.Get(ctx, &res); err != nil {
			t.Fatalf("program %s: %v", h.UpdateID(), err)
		}
		return res
	}
	pending := func(callID string) api.ApprovalRequest {
		t.Helper()
		var ar api.ApprovalRequest
		err := testenv.Poll("the approval of "+callID, time.Minute, func() error {
			var err error
			ar, err = approver.Lookup(ctx, s.client, api.RequestID(taskID, callID))
			if err != nil || ar.State != api.ApprovalPending {
				return errors.Join(err, errors.New("not pending"))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ar
	}

	// 1: atomic; its put waits for bob, its last echo is denied and fails
	// it, and the put is undone.
	h1 := start("prog-1", `counter.echo(text="one")
parallel(lambda: counter.echo(text="a"), lambda: counter.echo(text="b"))
counter.put(key="p1")
attempt(counter.echo, text="secret")
counter.echo(text="secret")`, true)
	ar := pending("prog-1/4")
	if ar.Program != "prog-1" || ar.Line != 3 {
		t.Errorf("approval request %+v: want program prog-1, line 3", ar)
	}
	if _, err := approver.Deliver(ctx, s.client, "record:bob:prog-1/4", api.DecideRequest{RequestID: ar.ID, Digest: ar.Digest, Approver: "bob", Approve: true, Via: "cli"}); err != nil {
		t.Fatal(err)
	}
	r1 := result(h1)
	if r1.Outcome != api.ProgramError || r1.Line != 5 || !slices.Equal(r1.RolledBack, []string{"prog-1/4"}) || len(r1.Calls) != 6 {
		t.Fatalf("prog-1: %+v", r1)
	}
	if n := sideEffects(t, effects, "put", "undo-p1"); n != 1 {
		t.Errorf("the undo of prog-1's put ran %d times, want once", n)
	}

	// 2: plain.
	r2 := result(start("prog-2", `counter.echo(text="two")`, false))
	// ScriptRunner returns its calls' values; the interpreter returns
	// None (no main() and no result).
	if r2.Outcome != api.ProgramOK || string(r2.Result) != `["two"]` && string(r2.Result) != "null" && len(r2.Result) != 0 {
		t.Fatalf("prog-2: %+v (%s)", r2, r2.Result)
	}

	// 3: stopped while its put waits for approval.
	h3 := start("prog-3", `counter.put(key="p3")`, false)
	pending("prog-3/1")
	if err := s.client.SignalWorkflow(ctx, taskID, "", api.SignalStopProgram, api.StopProgram{ProgramID: "prog-3", By: "recorder", Reason: "not needed"}); err != nil {
		t.Fatal(err)
	}
	r3 := result(h3)
	if r3.Outcome != api.ProgramStopped || !strings.Contains(r3.Error, "not needed") || r3.Calls[0].Outcome != api.OutcomeCancelled {
		t.Fatalf("prog-3: %+v", r3)
	}
	if n := sideEffects(t, effects, "put", "p3"); n != 0 {
		t.Errorf("prog-3's put ran %d times, want never", n)
	}
	b, _ := json.Marshal(r1)
	t.Logf("prog-1: %s", b)
	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, run.GetRunID(), name)
}

// TestRecordProgramArgsHistory records a program whose calls' arguments
// repeat a key (changeProgramArgs): the host refuses them, unjudged and
// unrun, and the program's next call runs. The interpreter never sends
// such arguments, so it is played by testenv.ScriptRunner, whose raw
// steps pass arguments as written. With -record it writes
// program_args_v1_run1.json.
func TestRecordProgramArgsHistory(t *testing.T) {
	m, effects := counterManifest(t, `  put: {side_effects: [write], data_access_level: internal, risk: low, idempotent: true}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, policy: &policy.Config{Rules: []policy.Rule{
		{Name: "no-secrets", When: `args.?key.orValue("") == "secret"`, Effect: api.Deny, Reason: "secrets stay out of tools"},
	}}})
	waitTools(t, s.connect(t, nil), "counter__put")
	workflows.UseProgramRunner(&testenv.ScriptRunner{})
	t.Cleanup(func() { workflows.UseProgramRunner(nil) })
	ctx := context.Background()
	const taskID = "record-program-args"
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 100, IdleTimeout: time.Hour})
	tools := []api.ProgramTool{{Name: "counter__put", Module: "counter", Function: "put", Server: "counter", UpstreamTool: "put", Spec: api.SpecFor(m.Tools["put"])}}
	req := api.ProgramRequest{ProgramID: "prog-args", Principal: "recorder", Tools: tools, Limits: api.DefaultProgramLimits,
		Source: "try counter__put {\"key\":\"ok\",\"key\":\"secret\"}\ncall counter__put {\"key\":\"after\"}"}
	h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: taskID, UpdateID: req.ProgramID,
		UpdateName: api.UpdateRunProgram, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		t.Fatal(err)
	}
	var res api.ProgramResult
	if err := h.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Outcome != api.ProgramOK || len(res.Calls) != 2 || res.Calls[0].Outcome != api.OutcomeRejected ||
		!strings.Contains(res.Calls[0].Reason, `"key" appears more than once`) || res.Calls[1].Outcome != api.OutcomeOK {
		t.Fatalf("program: %+v", res)
	}
	if n := sideEffects(t, effects, "put", "ok") + sideEffects(t, effects, "put", "secret"); n != 0 {
		t.Errorf("the refused call reached the upstream %d times", n)
	}
	if n := sideEffects(t, effects, "put", "after"); n != 1 {
		t.Errorf("the call after it ran %d times, want once", n)
	}
	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, run.GetRunID(), "program_args_v1")
}
