package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/plans"
)

// Plan runs a plan's steps in order. A failed step does what its
// on_failure says (rollback by default); a denied one rolls the plan back
// when the plan says rollback_on_deny, else stops it (or is passed over
// with on_failure: continue). Cancelling the plan rolls it back. A plan
// whose rollback fails stays open in rollback_failed for an operator.
func Plan(ctx workflow.Context, in api.PlanInput) (api.TaskResult, error) {
	if in.Plan == nil || len(in.Plan.Steps) == 0 {
		return api.TaskResult{}, temporal.NewNonRetryableApplicationError("the plan has no steps", "InvalidPlan", nil)
	}
	if in.TaskID == "" {
		// Started by a schedule: one input serves every run, and Temporal
		// gives each run its own workflow ID (the action's ID and the
		// time), which is the task's. Earlier histories always carry a
		// TaskID, so they never take this branch and replay unchanged.
		in.TaskID = workflow.GetInfo(ctx).WorkflowExecution.ID
		if in.DeadlineAfter > 0 && in.Limits.Deadline.IsZero() {
			in.Limits.Deadline = workflow.Now(ctx).Add(in.DeadlineAfter).UTC()
		}
	}
	t := newTask(ctx, api.TaskInput{TaskID: in.TaskID, Principal: in.Principal, Identity: in.Identity, Limits: in.Limits,
		RollbackOnDeny: in.Plan.RollbackOnDeny, RollbackNotify: in.RollbackNotify, State: in.State, Quota: in.Quota})
	t.plan = &api.PlanStatus{Name: in.Plan.Name}
	for _, s := range in.Plan.Steps {
		t.plan.Steps = append(t.plan.Steps, api.StepStatus{ID: s.ID, Tool: s.Tool, State: api.StepPending})
	}
	if err := t.registerShared(ctx); err != nil {
		return api.TaskResult{}, err
	}
	if slices.ContainsFunc(in.Plan.Steps, plans.Step.IsProgram) {
		t.startProgramSteps(ctx) // plan_program.go
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx,
		api.SAPrincipal.ValueSet(in.Principal), api.SAStatus.ValueSet(api.StateRunning)); err != nil {
		return api.TaskResult{}, err
	}

	results := map[string]api.StepResult{}
	state := api.StateCompleted
	for i := range in.Plan.Steps {
		if t.canceled || ctx.Err() != nil || t.rolling != nil || t.wholeRollbacks() > 0 || t.finish {
			break
		}
		stop := t.runStep(ctx, in, i, results)
		if stop != "" {
			state = stop
			break
		}
	}
	if ctx.Err() != nil {
		ctx = t.cancel(ctx)
		state = api.StateCanceled
	}
	// An operator's rollback may be under way or done.
	_ = workflow.Await(ctx, func() bool { return t.rolling == nil })
	if t.wholeRollbacks() > 0 && state != api.StateCanceled {
		state = api.StateRolledBack
	}
	for t.state == api.StateRollbackFailed {
		err := workflow.Await(ctx, func() bool { return t.finish || t.state != api.StateRollbackFailed })
		if err != nil {
			ctx = t.cancel(ctx)
			continue
		}
		if t.finish && t.state == api.StateRollbackFailed {
			return t.end(ctx, api.StateRollbackFailed)
		}
	}
	if t.finish && state == api.StateCompleted && t.plan.Steps[len(t.plan.Steps)-1].State == api.StepPending {
		state = api.StateStopped
	}
	return t.end(ctx, state)
}

// runStep runs step i and returns the plan's end state when the plan must
// stop after it ("" to go on).
func (t *task) runStep(ctx workflow.Context, in api.PlanInput, i int, results map[string]api.StepResult) string {
	step := in.Plan.Steps[i]
	st := &t.plan.Steps[i]
	st.State = api.StepRunning
	st.CallID = "step-" + step.ID

	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{api.ErrTypeInternal}},
	})
	stepIn := api.StepInput{
		TaskID: t.in.TaskID, Plan: in.Plan.Name, Step: step, Vars: in.Vars, Results: results,
		State: t.st.encode(), // task-state
	}
	if step.IsProgram() {
		// Its tool table is what the plan's principal may use.
		pr, allow := t.caller()
		stepIn.Principal, stepIn.AllowTools = &pr, allow
	}
	var prep api.StepOutput
	err := workflow.ExecuteLocalActivity(lctx, api.PrepareStepName, stepIn).Get(ctx, &prep)
	if err != nil {
		prep.Error = err.Error()
	}
	var res api.CallResult
	switch {
	case prep.Skip:
		st.State, st.Reason = api.StepSkipped, prep.Reason
		results[step.ID] = api.StepResult{Outcome: "skipped", Reason: prep.Reason}
		return ""
	case prep.Error != "":
		res = api.CallResult{Outcome: api.OutcomeFailed, Reason: fmt.Sprintf("step %s could not be prepared: %s", step.ID, prep.Error)}
	case prep.Program != nil:
		pr := t.runProgramStep(ctx, *prep.Program) // plan_program.go
		st.Program = &pr
		res = programStepResult(step.ID, pr)
	case prep.Call == nil:
		res = api.CallResult{Outcome: api.OutcomeFailed, Reason: fmt.Sprintf("step %s could not be prepared: the worker returned neither a call nor a program", step.ID)}
	default:
		req := requestFor(st.CallID, prep.Call)
		req.Principal = t.in.Principal
		res, _ = t.callTool(ctx, req)
		countStepRefusal(ctx, res) // limits.go
	}
	if res.Outcome == api.OutcomeToolError && res.Reason == "" {
		res.Reason = step.Tool + " reported an error: " + api.ResultText(res.Result)
	}
	st.Outcome, st.Reason = res.Outcome, res.Reason
	results[step.ID] = api.StepResult{Outcome: string(res.Outcome), Reason: res.Reason, Result: res.Result}
	if res.Outcome == api.OutcomeOK {
		st.State = api.StepOK
		return ""
	}
	st.State = api.StepFailed
	onFailure := step.EffectiveOnFailure()
	if res.Outcome == api.OutcomeDenied {
		st.State = api.StepDenied
		switch {
		case t.wholeRollbacks() > 0: // rollback_on_deny did it (callTool → denied)
			return api.StateRolledBack
		case onFailure == plans.OnFailureContinue:
			return ""
		}
		return api.StateStopped
	}
	if step.IsProgram() && t.wholeRollbacks() > 0 {
		return api.StateRolledBack // a denied call of the program, with rollback_on_deny
	}
	switch onFailure {
	case plans.OnFailureContinue:
		return ""
	case plans.OnFailureStop:
		return api.StateStopped
	}
	t.rollback(ctx, api.RollbackRequest{By: "plan", Reason: fmt.Sprintf("step %s failed: %s", step.ID, res.Reason)}, "")
	return api.StateRolledBack
}
