package workflows

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/activity"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/plans"
)

// prepareProgram is the harness's PrepareStep for a program step: the
// request as the worker's builds it, with progTools as the table.
func (h *planHarness) prepareProgram(in api.StepInput) api.StepOutput {
	h.mu.Lock()
	h.programSteps = append(h.programSteps, in)
	h.mu.Unlock()
	req := api.ProgramRequest{ProgramID: api.PlanProgramID(in.Step.ID), Source: in.Step.Program, Tools: progTools(),
		Limits: api.PlanProgramLimits(in.Step.Limits), Atomic: in.Step.Atomic}
	if in.Principal != nil {
		req.Principal = in.Principal.Name
	}
	return api.StepOutput{Program: &req}
}

func programCalls(st api.StepStatus) []string {
	if st.Program == nil {
		return nil
	}
	return callIDs(st.Program.Calls)
}

func TestPlanProgramStepRuns(t *testing.T) {
	h := newPlanHarness(t)
	r := &testenv.ScriptRunner{}
	useRunner(t, r)
	in := planInput(
		plans.Step{ID: "a", Tool: "fs__write", Args: map[string]any{"path": "/a"}},
		plans.Step{ID: "b", Program: "fs.read(path=\"/a\")\nfs.write(path=\"/b\")\n", Limits: &plans.ProgramLimits{MaxCalls: 5, MemoryMB: 16}},
		plans.Step{ID: "c", Tool: "fs__read", When: `steps.b.outcome == "ok" && size(steps.b.result) == 2`},
	)
	in.Identity = &api.Identity{Name: "alice", Roles: []string{"dev"}, AllowTools: []string{"fs__*"}}
	out, st := h.runPlan(in)

	if out.State != api.StateCompleted || out.Calls != 4 {
		t.Fatalf("result %+v, want completed after 4 calls", out)
	}
	if diff := cmp.Diff([]string{"a=ok", "b=ok", "c=ok"}, stepStates(st)); diff != "" {
		t.Errorf("step states (-want +got):\n%s", diff)
	}
	b := st.Plan.Steps[1]
	if b.Program == nil || b.Program.Outcome != api.ProgramOK || b.Program.ProgramID != "step-b" {
		t.Fatalf("step b's program result %+v", b.Program)
	}
	if diff := cmp.Diff([]string{"step-b/1 fs__read line 1 ok", "step-b/2 fs__write line 2 ok"}, programCalls(b)); diff != "" {
		t.Errorf("program calls (-want +got):\n%s", diff)
	}
	// Every call was judged under its own ID, the program's too.
	var judged []string
	for _, d := range h.policy.seen {
		judged = append(judged, d.CallID)
	}
	if diff := cmp.Diff([]string{"step-a", "step-b/1", "step-b/2", "step-c"}, judged); diff != "" {
		t.Errorf("policy judged (-want +got):\n%s", diff)
	}
	// PrepareStep was asked for the plan principal's table, and the runner
	// got the step's limits over the defaults.
	h.mu.Lock()
	prepared := slices.Clone(h.programSteps)
	h.mu.Unlock()
	if len(prepared) != 1 || prepared[0].Principal == nil || prepared[0].Principal.Name != "alice" ||
		!slices.Equal(prepared[0].Principal.Roles, []string{"dev"}) || !slices.Equal(prepared[0].AllowTools, []string{"fs__*"}) {
		t.Errorf("PrepareStep got %+v", prepared)
	}
	reqs, memory := r.Requests()
	if len(reqs) != 1 || memory[0] != 16<<20 || reqs[0].ProgramID != "step-b" || len(reqs[0].Tools) != 3 ||
		reqs[0].Limits.MaxSteps != api.DefaultProgramLimits.MaxSteps {
		t.Errorf("runner got %+v, memory %v", reqs, memory)
	}
	// The writes of step a and of the program are on the task's stack.
	if diff := cmp.Diff([]string{"step-a=pending", "step-b/2=pending"}, compensationCallIDs(st.Compensations)); diff != "" {
		t.Errorf("compensations (-want +got):\n%s", diff)
	}
}

func TestPlanProgramStepFails(t *testing.T) {
	for _, tt := range []struct {
		name      string
		step      plans.Step
		wantState string
		wantSteps []string
		wantTools []string // the tools that ran, restores included
		wantPend  []string // compensations left pending
		wantUndo  []string // the atomic program's RolledBack
	}{
		{
			name:      "rollback (the default) undoes the program's calls and the steps before",
			step:      plans.Step{ID: "b", Program: "fs.write(path=\"/b\")\nfail(\"boom\")\n"},
			wantState: api.StateRolledBack, wantSteps: []string{"a=ok", "b=failed/failed", "c=pending"},
			wantTools: []string{"read", "write", "read", "write", `restore{"undo":"step-b/1"}`, `restore{"undo":"step-a"}`},
		},
		{
			name:      "stop keeps what ran",
			step:      plans.Step{ID: "b", Program: "fs.write(path=\"/b\")\nfail(\"boom\")\n", OnFailure: plans.OnFailureStop},
			wantState: api.StateStopped, wantSteps: []string{"a=ok", "b=failed/failed", "c=pending"},
			wantTools: []string{"read", "write", "read", "write"},
			wantPend:  []string{"step-a=pending", "step-b/1=pending"},
		},
		{
			name: "atomic undoes its own calls only, and continue goes on",
			step: plans.Step{ID: "b", Program: "fs.write(path=\"/b\")\nfs.read(path=\"/b\")\nfs.write(path=\"/c\")\nfail(\"boom\")\n",
				Atomic: true, OnFailure: plans.OnFailureContinue},
			wantState: api.StateCompleted, wantSteps: []string{"a=ok", "b=failed/failed", "c=ok"},
			wantTools: []string{"read", "write", "read", "write", "read", "read", "write", `restore{"undo":"step-b/3"}`, `restore{"undo":"step-b/1"}`, "read"},
			wantPend:  []string{"step-a=pending"},
			wantUndo:  []string{"step-b/3", "step-b/1"},
		},
		{
			name:      "a program that does not parse fails the step",
			step:      plans.Step{ID: "b", Program: "this is not a script", OnFailure: plans.OnFailureStop},
			wantState: api.StateStopped, wantSteps: []string{"a=ok", "b=failed/failed", "c=pending"},
			wantTools: []string{"read", "write"},
			wantPend:  []string{"step-a=pending"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newPlanHarness(t)
			useRunner(t, &testenv.ScriptRunner{})
			in := planInput(
				plans.Step{ID: "a", Tool: "fs__write", Args: map[string]any{"path": "/a"}},
				tt.step,
				plans.Step{ID: "c", Tool: "fs__read"},
			)
			out, st := h.runPlan(in)
			if out.State != tt.wantState {
				t.Fatalf("result %+v, want %s", out, tt.wantState)
			}
			if diff := cmp.Diff(tt.wantSteps, stepStates(st)); diff != "" {
				t.Errorf("step states (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantTools, h.toolSeq()); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantPend, compensationCallIDs(st.Compensations)); diff != "" {
				t.Errorf("pending compensations (-want +got):\n%s", diff)
			}
			b := st.Plan.Steps[1]
			if b.Program == nil || b.Program.Outcome == api.ProgramOK || !slices.Equal(b.Program.RolledBack, tt.wantUndo) {
				t.Fatalf("program result %+v", b.Program)
			}
			if !strings.HasPrefix(b.Reason, "the program of step b ended ") {
				t.Errorf("step reason %q", b.Reason)
			}
		})
	}
}

// A program's denied call, with rollback_on_deny, rolls the plan back once.
func TestPlanProgramStepDeniedRollsBackOnDeny(t *testing.T) {
	h := newPlanHarness(t)
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.Tool == "fs__delete" {
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no-deletes", Reason: "denied by rule no-deletes"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault}, nil
	}
	useRunner(t, &testenv.ScriptRunner{})
	in := planInput(
		plans.Step{ID: "a", Tool: "fs__write"},
		plans.Step{ID: "b", Program: "fs.write(path=\"/b\")\nfs.delete(path=\"/b\")\n"},
		plans.Step{ID: "c", Tool: "fs__read"},
	)
	in.Plan.RollbackOnDeny = true
	out, st := h.runPlan(in)
	if out.State != api.StateRolledBack {
		t.Fatalf("result %+v, want rolled_back", out)
	}
	if diff := cmp.Diff([]string{"a=ok", "b=failed/failed", "c=pending"}, stepStates(st)); diff != "" {
		t.Errorf("step states (-want +got):\n%s", diff)
	}
	seq := h.toolSeq()
	if got := seq[len(seq)-2:]; !slices.Equal(got, []string{`restore{"undo":"step-b/1"}`, `restore{"undo":"step-a"}`}) {
		t.Errorf("tools %q: want step-b/1 then step-a undone, once", seq)
	}
	if got := callIDs(st.Plan.Steps[1].Program.Calls); !slices.Equal(got, []string{"step-b/1 fs__write line 1 ok", "step-b/2 fs__delete line 2 denied"}) {
		t.Errorf("program calls %q", got)
	}
}

// A worker without code mode fails the step (recorded, so a replay on any
// worker ends it the same way) and runs nothing of it.
func TestPlanProgramStepWithoutCodeMode(t *testing.T) {
	h := newPlanHarness(t)
	UseProgramRunner(nil)
	in := planInput(plans.Step{ID: "b", Program: "fs.write(path=\"/b\")\n", OnFailure: plans.OnFailureStop})
	out, st := h.runPlan(in)
	if out.State != api.StateStopped || out.Calls != 0 {
		t.Fatalf("result %+v, want stopped with no call", out)
	}
	b := st.Plan.Steps[0]
	if b.Program == nil || b.Program.Outcome != api.ProgramInvalid || !strings.Contains(b.Reason, "code mode is not enabled") {
		t.Errorf("step %+v, program %+v", b, b.Program)
	}
}

// A schedule's plan (one input for every run: no task ID, the schedule's
// name, stored as JSON) with a program step read from a program_file
// validates and runs; the run's task ID is its workflow ID.
func TestScheduledPlanWithProgramStep(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sync.star"), []byte("fs.read(path=\"/a\")\nfs.write(path=\"/b\")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "nightly.yaml")
	src := "name: nightly\nsteps:\n  - id: sync\n    program_file: sync.star\n    atomic: true\n    limits: {max_calls: 10, timeout: 10m}\n" +
		"  - id: after\n    tool: fs__read\n    when: steps.sync.outcome == \"ok\"\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := plans.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if probs := p.Validate([]string{"fs__read", "fs__write"}); probs != nil {
		t.Fatalf("problems: %v", probs)
	}
	in := api.PlanInput{Principal: "alice", Plan: p, Limits: api.Limits{MaxCalls: 10}, Schedule: "nightly", DeadlineAfter: time.Hour}
	raw, err := json.Marshal(in) // as the schedule's action stores it
	if err != nil {
		t.Fatal(err)
	}
	var stored api.PlanInput
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}

	h := newPlanHarness(t)
	useRunner(t, &testenv.ScriptRunner{})
	out, st := h.runPlan(stored)
	if out.State != api.StateCompleted || out.Calls != 3 || out.TaskID == "" {
		t.Fatalf("result %+v, want completed after 3 calls", out)
	}
	if diff := cmp.Diff([]string{"sync=ok", "after=ok"}, stepStates(st)); diff != "" {
		t.Errorf("step states (-want +got):\n%s", diff)
	}
	if got := programCalls(st.Plan.Steps[0]); !slices.Equal(got, []string{"step-sync/1 fs__read line 1 ok", "step-sync/2 fs__write line 2 ok"}) {
		t.Errorf("program calls %q", got)
	}
}

// SignalStopProgram stops a plan's program step at its call waiting for
// approval: the call is cancelled, the step fails, and the plan rolls back
// the program's write.
func TestPlanProgramStepStopSignal(t *testing.T) {
	h := newPlanHarness(t)
	n := &fakeNotifier{}
	h.env.RegisterActivityWithOptions(n.Notify, activity.RegisterOptions{Name: api.NotifyApproversName})
	h.env.RegisterActivityWithOptions(n.Update, activity.RegisterOptions{Name: api.UpdateApprovalName})
	spec := ops("bob")
	spec.Timeout = 24 * time.Hour
	h.policy.approval = &spec
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.Tool == "fs__delete" {
			return api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "ops", Quorum: 1, Version: "pv1"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault, Version: "pv1"}, nil
	}
	useRunner(t, &testenv.ScriptRunner{})
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalStopProgram, api.StopProgram{ProgramID: "step-b", By: "carol", Reason: "wrong repo"})
	}, 30*time.Minute)
	in := planInput(plans.Step{ID: "b", Program: "fs.write(path=\"/a\")\nfs.delete(path=\"/a\")\n"})
	out, st := h.runPlan(in)
	if out.State != api.StateRolledBack {
		t.Fatalf("result %+v, want rolled_back", out)
	}
	b := st.Plan.Steps[0]
	if b.Program == nil || b.Program.Outcome != api.ProgramStopped || !strings.Contains(b.Program.Error, "carol stopped the program: wrong repo") {
		t.Fatalf("program %+v", b.Program)
	}
	if got := callIDs(b.Program.Calls); !slices.Equal(got, []string{"step-b/1 fs__write line 1 ok", "step-b/2 fs__delete line 2 cancelled"}) {
		t.Errorf("program calls %q", got)
	}
	if diff := cmp.Diff([]string{"read", "write", `restore{"undo":"step-b/1"}`}, h.toolSeq()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}

// Cancelling the plan while its program step's call waits for approval
// stops the program, ends the call and rolls the plan back.
func TestPlanProgramStepCancelled(t *testing.T) {
	h := newPlanHarness(t)
	n := &fakeNotifier{}
	h.env.RegisterActivityWithOptions(n.Notify, activity.RegisterOptions{Name: api.NotifyApproversName})
	h.env.RegisterActivityWithOptions(n.Update, activity.RegisterOptions{Name: api.UpdateApprovalName})
	spec := ops("bob")
	spec.Timeout = 24 * time.Hour
	h.policy.approval = &spec
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.Tool == "fs__delete" {
			return api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "ops", Quorum: 1, Version: "pv1"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault, Version: "pv1"}, nil
	}
	useRunner(t, &testenv.ScriptRunner{})
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 30*time.Minute)
	in := planInput(plans.Step{ID: "b", Program: "fs.write(path=\"/a\")\nfs.delete(path=\"/a\")\n"})
	out, st := h.runPlan(in)
	if out.State != api.StateCanceled {
		t.Fatalf("result %+v, want canceled", out)
	}
	b := st.Plan.Steps[0]
	// The pipeline ends a call whose task is cancelled during its
	// approval wait as denied, as for a direct call.
	if b.Program == nil || b.Program.Outcome != api.ProgramStopped || b.Program.Error != "the task was cancelled" ||
		!strings.Contains(b.Program.Calls[1].Reason, "cancelled while waiting for approval") {
		t.Fatalf("program %+v", b.Program)
	}
	if diff := cmp.Diff([]string{"read", "write", `restore{"undo":"step-b/1"}`}, h.toolSeq()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}
