package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/expr"
	"github.com/airlock-run/airlock/plans"
)

// planHarness runs the Plan workflow over the compensation harness (writes are
// compensable by fs__restore) with a PrepareStep that evaluates a step's
// when and args as the worker's does and resolves "server__tool" by
// splitting the name.
type planHarness struct {
	*compensationHarness
	programSteps []api.StepInput // the program steps PrepareStep prepared (h.mu)
}

func newPlanHarness(t *testing.T, script ...func(api.CallToolInput) (api.CallToolOutput, error)) *planHarness {
	h := &planHarness{compensationHarness: newCompensationHarness(t, script...)}
	h.env.RegisterWorkflowWithOptions(Plan, workflow.RegisterOptions{Name: api.PlanName})
	h.env.RegisterActivityWithOptions(h.PrepareStep, activity.RegisterOptions{Name: api.PrepareStepName})
	return h
}

func (h *planHarness) PrepareStep(_ context.Context, in api.StepInput) (api.StepOutput, error) {
	steps := map[string]any{}
	for id, r := range in.Results {
		steps[id] = map[string]any{"outcome": r.Outcome, "reason": r.Reason, "result": expr.ResultValue(r.Result)}
	}
	vars := map[string]any{"steps": steps, "vars": in.Vars, "task": map[string]any{"id": in.TaskID, "plan": in.Plan}}
	if in.Vars == nil {
		vars["vars"] = map[string]any{}
	}
	p := &plans.Plan{Name: in.Plan, Steps: []plans.Step{in.Step}}
	ok, err := p.StepWhen(0, vars)
	if err != nil {
		return api.StepOutput{Error: fmt.Sprintf("when: %v", err)}, nil
	}
	if !ok {
		return api.StepOutput{Skip: true, Reason: fmt.Sprintf("when (%s) is false", in.Step.When)}, nil
	}
	if in.Step.IsProgram() {
		return h.prepareProgram(in), nil // plan_program_test.go
	}
	args, err := p.StepArgs(0, vars)
	if err != nil {
		return api.StepOutput{Error: fmt.Sprintf("args: %v", err)}, nil
	}
	server, tool, ok := strings.Cut(in.Step.Tool, "__")
	if !ok {
		return api.StepOutput{Error: fmt.Sprintf("tool %s is not declared in this worker's manifests", in.Step.Tool)}, nil
	}
	return api.StepOutput{Call: &api.ToolCall{Tool: in.Step.Tool, Server: server, UpstreamTool: tool, Arguments: args,
		Spec: api.ToolSpec{Timeout: time.Minute, Retry: api.RetrySpec{MaxAttempts: 3, InitialInterval: time.Minute}}}}, nil
}

// runPlan runs the plan to its end and returns its result and its last
// status.
func (h *planHarness) runPlan(in api.PlanInput) (api.TaskResult, api.Status) {
	h.t.Helper()
	h.env.ExecuteWorkflow(api.PlanName, in)
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("plan did not complete")
	}
	var out api.TaskResult
	if err := h.env.GetWorkflowResult(&out); err != nil {
		h.t.Fatalf("plan error: %v", err)
	}
	v, err := h.env.QueryWorkflow(api.QueryStatus)
	if err != nil {
		h.t.Fatalf("status query: %v", err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		h.t.Fatal(err)
	}
	if st.Plan == nil {
		h.t.Fatal("the status of a plan has no Plan")
	}
	return out, st
}

func planInput(steps ...plans.Step) api.PlanInput {
	return api.PlanInput{TaskID: "plan-1", Principal: "alice", Limits: api.Limits{MaxCalls: 10},
		Plan: &plans.Plan{Name: "seed", Steps: steps}}
}

// stepStates is each step's ID and state, in order, and its outcome when
// it has one: "a=ok", "c=failed/tool_error".
func stepStates(st api.Status) []string {
	var out []string
	for _, s := range st.Plan.Steps {
		e := s.ID + "=" + s.State
		if s.Outcome != "" && s.Outcome != api.OutcomeOK {
			e += "/" + string(s.Outcome)
		}
		out = append(out, e)
	}
	return out
}

func compensationCallIDs(es []api.CompensationEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.CallID+"="+e.State)
	}
	return out
}

var toolErrDiskFull = respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[{"type":"text","text":"disk full"}],"isError":true}`), IsError: true}, nil)

func TestPlanRunsEveryStepInOrder(t *testing.T) {
	h := newPlanHarness(t)
	in := planInput(
		plans.Step{ID: "a", Tool: "fs__write", Args: map[string]any{"path": "${{ vars.dir }}/a"}},
		plans.Step{ID: "b", Tool: "fs__read", Args: map[string]any{"path": "${{ vars.dir }}/a"}},
		plans.Step{ID: "c", Tool: "fs__write", When: `steps.a.outcome == "ok"`, Args: map[string]any{"path": "${{ vars.dir }}/c"}},
	)
	in.Vars = map[string]any{"dir": "/srv"}
	out, st := h.runPlan(in)

	if out.State != api.StateCompleted || out.Calls != 3 || out.TaskID != "plan-1" {
		t.Fatalf("result %+v, want completed after 3 calls", out)
	}
	if diff := cmp.Diff([]string{"a=ok", "b=ok", "c=ok"}, stepStates(st)); diff != "" {
		t.Errorf("step states (-want +got):\n%s", diff)
	}
	for i, s := range st.Plan.Steps {
		if want := "step-" + in.Plan.Steps[i].ID; s.CallID != want {
			t.Errorf("step %s ran as call %q, want %q", s.ID, s.CallID, want)
		}
	}
	// Each write is captured first; nothing is undone when all went well.
	if diff := cmp.Diff([]string{"read", "write", "read", "read", "write"}, h.toolSeq()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"step-a=pending", "step-c=pending"}, compensationCallIDs(st.Compensations)); diff != "" {
		t.Errorf("compensations (-want +got):\n%s", diff)
	}
	// The arguments were evaluated from the vars.
	h.tools.mu.Lock()
	defer h.tools.mu.Unlock()
	if got := string(h.tools.seen[1].Arguments); got != `{"path":"/srv/a"}` {
		t.Errorf("step a's arguments %s", got)
	}
}

func TestPlanSkipsAStepWhoseWhenIsFalse(t *testing.T) {
	h := newPlanHarness(t, respond(okOutput(`{"content":[]}`), nil), toolErrDiskFull)
	in := planInput(
		plans.Step{ID: "a", Tool: "fs__read", OnFailure: plans.OnFailureContinue},
		plans.Step{ID: "b", Tool: "fs__write", When: `steps.a.outcome == "ok"`},
		plans.Step{ID: "c", Tool: "fs__write", When: `vars.mode == "full"`},
		plans.Step{ID: "d", Tool: "fs__read", When: `steps.a.outcome == "tool_error"`},
	)
	in.Vars = map[string]any{"mode": "quick"}
	// a's read is ok, so b runs; b's capture reports an error (before is
	// then null) and b's write runs all the same.
	out, st := h.runPlan(in)

	if out.State != api.StateCompleted {
		t.Fatalf("result %+v, want completed", out)
	}
	if diff := cmp.Diff([]string{"a=ok", "b=ok", "c=skipped", "d=skipped"}, stepStates(st)); diff != "" {
		t.Errorf("step states (-want +got):\n%s", diff)
	}
	if got, want := st.Plan.Steps[2].Reason, `when (vars.mode == "full") is false`; got != want {
		t.Errorf("skip reason %q, want %q", got, want)
	}
	// a, then b's capture (a tool error: before is null) and b.
	if diff := cmp.Diff([]string{"read", "read", "write"}, h.toolSeq()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}

func TestPlanStepFailure(t *testing.T) {
	ok := respond(okOutput(`{"content":[]}`), nil)
	deny := func(in api.DecideInput) (api.Verdict, error) {
		if in.Tool == "fs__delete" {
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no-deletes", Reason: "denied by rule no-deletes"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault}, nil
	}
	tests := []struct {
		name string
		// c is the step that fails: a write whose call reports disk full,
		// or a delete the policy denies.
		c                 plans.Step
		rollbackOnDeny    bool
		wantState         string
		wantSteps         []string
		wantTools         []string
		wantUndone        []string // the task's undone compensations, in the order they ran
		wantCompensations []string // what is left on the stack
	}{
		{
			name:       "rollback (the default) undoes the steps before it, newest first",
			c:          plans.Step{ID: "c", Tool: "fs__write"},
			wantState:  api.StateRolledBack,
			wantSteps:  []string{"a=ok", "b=ok", "c=failed/tool_error", "d=pending"},
			wantTools:  []string{"read", "write", "read", "write", "read", "write", `restore{"undo":"step-b"}`, `restore{"undo":"step-a"}`},
			wantUndone: []string{"step-b=done", "step-a=done"},
		},
		{
			name:              "stop keeps what the steps before did",
			c:                 plans.Step{ID: "c", Tool: "fs__write", OnFailure: plans.OnFailureStop},
			wantState:         api.StateStopped,
			wantSteps:         []string{"a=ok", "b=ok", "c=failed/tool_error", "d=pending"},
			wantTools:         []string{"read", "write", "read", "write", "read", "write"},
			wantCompensations: []string{"step-a=pending", "step-b=pending"},
		},
		{
			name:              "continue goes on with the next step",
			c:                 plans.Step{ID: "c", Tool: "fs__write", OnFailure: plans.OnFailureContinue},
			wantState:         api.StateCompleted,
			wantSteps:         []string{"a=ok", "b=ok", "c=failed/tool_error", "d=ok"},
			wantTools:         []string{"read", "write", "read", "write", "read", "write", "read"},
			wantCompensations: []string{"step-a=pending", "step-b=pending"},
		},
		{
			name:              "a denied step stops the plan",
			c:                 plans.Step{ID: "c", Tool: "fs__delete"},
			wantState:         api.StateStopped,
			wantSteps:         []string{"a=ok", "b=ok", "c=denied/denied", "d=pending"},
			wantTools:         []string{"read", "write", "read", "write"},
			wantCompensations: []string{"step-a=pending", "step-b=pending"},
		},
		{
			name:           "a denied step rolls the plan back under rollback_on_deny",
			c:              plans.Step{ID: "c", Tool: "fs__delete", OnFailure: plans.OnFailureContinue},
			rollbackOnDeny: true,
			wantState:      api.StateRolledBack,
			wantSteps:      []string{"a=ok", "b=ok", "c=denied/denied", "d=pending"},
			wantTools:      []string{"read", "write", "read", "write", `restore{"undo":"step-b"}`, `restore{"undo":"step-a"}`},
			wantUndone:     []string{"step-b=done", "step-a=done"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Captures and calls of a and b, then c's capture and call
			// (a denied c runs neither).
			script := []func(api.CallToolInput) (api.CallToolOutput, error){ok, ok, ok, ok}
			if tc.c.Tool == "fs__write" {
				script = append(script, ok, toolErrDiskFull)
			}
			h := newPlanHarness(t, script...)
			h.policy.decide = deny
			in := planInput(
				plans.Step{ID: "a", Tool: "fs__write"},
				plans.Step{ID: "b", Tool: "fs__write"},
				tc.c,
				plans.Step{ID: "d", Tool: "fs__read"},
			)
			in.Plan.RollbackOnDeny = tc.rollbackOnDeny
			out, st := h.runPlan(in)

			if out.State != tc.wantState {
				t.Errorf("plan ended %s, want %s", out.State, tc.wantState)
			}
			if diff := cmp.Diff(tc.wantSteps, stepStates(st)); diff != "" {
				t.Errorf("step states (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTools, h.toolSeq()); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantUndone, compensationCallIDs(st.Undone)); diff != "" {
				t.Errorf("undone (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCompensations, compensationCallIDs(st.Compensations)); diff != "" {
				t.Errorf("compensations left (-want +got):\n%s", diff)
			}
			if c := st.Plan.Steps[2]; c.Tool == "fs__write" && c.Reason != "fs__write reported an error: disk full" {
				t.Errorf("step c's reason %q", c.Reason)
			}
			if len(h.alerts) != 0 {
				t.Errorf("a rollback that succeeded alerted %+v", h.alerts)
			}
		})
	}
}

func TestPlanStepThatCannotBePreparedFails(t *testing.T) {
	h := newPlanHarness(t)
	out, st := h.runPlan(planInput(
		plans.Step{ID: "a", Tool: "fs__write"},
		plans.Step{ID: "b", Tool: "undeclared"},
	))
	if out.State != api.StateRolledBack {
		t.Errorf("plan ended %s, want rolled_back", out.State)
	}
	b := st.Plan.Steps[1]
	if b.State != api.StepFailed || b.Outcome != api.OutcomeFailed || !strings.Contains(b.Reason, "step b could not be prepared: tool undeclared is not declared") {
		t.Errorf("step b = %+v", b)
	}
	if diff := cmp.Diff([]string{"read", "write", `restore{"undo":"step-a"}`}, h.toolSeq()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}

func TestPlanCancelRollsBack(t *testing.T) {
	notSent := respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent))
	ok := respond(okOutput(`{"content":[]}`), nil)
	// a's capture and call; b is not sent, and is cancelled while it waits
	// a minute to retry.
	h := newPlanHarness(t, ok, ok, notSent)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 30*time.Second)
	out, st := h.runPlan(planInput(
		plans.Step{ID: "a", Tool: "fs__write"},
		plans.Step{ID: "b", Tool: "fs__read"},
		plans.Step{ID: "c", Tool: "fs__read"},
	))
	if out.State != api.StateCanceled {
		t.Errorf("plan ended %s, want canceled", out.State)
	}
	if diff := cmp.Diff([]string{"read", "write", "read", `restore{"undo":"step-a"}`}, h.toolSeq()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if got := stepStates(st); got[2] != "c=pending" {
		t.Errorf("step states %q: c must not run after the cancel", got)
	}
}

func TestPlanWithoutStepsIsRefused(t *testing.T) {
	h := newPlanHarness(t)
	h.env.ExecuteWorkflow(api.PlanName, planInput())
	var appErr *temporal.ApplicationError
	if err := h.env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != "InvalidPlan" || !appErr.NonRetryable() {
		t.Fatalf("workflow error %v, want a non-retryable InvalidPlan", err)
	}
	if n := h.tools.calls(); n != 0 {
		t.Errorf("%d tool calls ran", n)
	}
}
