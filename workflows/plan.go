package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/plans"
)

// PlanName is the wire name of the Plan workflow.
const PlanName = "Plan"

// Plan and step states.
const (
	// StateCompleted: every step ran (or was skipped or continued past).
	StateCompleted = "completed"
	// StateStopped: a step failed or was denied and its on_failure said
	// stop; nothing was rolled back.
	StateStopped = "stopped"

	StepPending = "pending"
	StepRunning = "running"
	StepOK      = "ok"
	StepSkipped = "skipped"
	StepFailed  = "failed"
	StepDenied  = "denied"
)

// PlanInput starts a Plan: a declared sequence of tool calls driven by the
// workflow, each through the same pipeline as an agent's call.
type PlanInput struct {
	TaskID    string
	Principal string
	Identity  *Identity `json:",omitempty"`
	Plan      *plans.Plan
	// Vars are the plan's vars with the command line's overrides applied.
	Vars           map[string]any `json:",omitempty"`
	Limits         Limits
	RollbackNotify string `json:",omitempty"`
}

// PlanStatus is a plan's progress, part of Status.
type PlanStatus struct {
	Name  string
	Steps []StepStatus
}

// StepStatus is one step's progress.
type StepStatus struct {
	ID      string
	Tool    string
	State   string
	Outcome Outcome `json:",omitempty"`
	Reason  string  `json:",omitempty"`
	CallID  string  `json:",omitempty"`
}

// Plan runs a plan's steps in order. A failed step does what its
// on_failure says (rollback by default); a denied one rolls the plan back
// when the plan says rollback_on_deny, else stops it (or is passed over
// with on_failure: continue). Cancelling the plan rolls it back. A plan
// whose rollback fails stays open in rollback_failed for an operator.
func Plan(ctx workflow.Context, in PlanInput) (TaskResult, error) {
	if in.Plan == nil || len(in.Plan.Steps) == 0 {
		return TaskResult{}, temporal.NewNonRetryableApplicationError("the plan has no steps", "InvalidPlan", nil)
	}
	t := newTask(ctx, TaskInput{TaskID: in.TaskID, Principal: in.Principal, Identity: in.Identity, Limits: in.Limits,
		RollbackOnDeny: in.Plan.RollbackOnDeny, RollbackNotify: in.RollbackNotify})
	t.plan = &PlanStatus{Name: in.Plan.Name}
	for _, s := range in.Plan.Steps {
		t.plan.Steps = append(t.plan.Steps, StepStatus{ID: s.ID, Tool: s.Tool, State: StepPending})
	}
	if err := t.registerShared(ctx); err != nil {
		return TaskResult{}, err
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx,
		SAPrincipal.ValueSet(in.Principal), SAStatus.ValueSet(StateRunning)); err != nil {
		return TaskResult{}, err
	}

	results := map[string]activities.StepResult{}
	state := StateCompleted
	for i := range in.Plan.Steps {
		if t.canceled || ctx.Err() != nil || t.rolling != nil || t.rollbacks > 0 || t.finish {
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
		state = StateCanceled
	}
	// An operator's rollback may be under way or done.
	_ = workflow.Await(ctx, func() bool { return t.rolling == nil })
	if t.rollbacks > 0 && state != StateCanceled {
		state = StateRolledBack
	}
	for t.state == StateRollbackFailed {
		err := workflow.Await(ctx, func() bool { return t.finish || t.state != StateRollbackFailed })
		if err != nil {
			ctx = t.cancel(ctx)
			continue
		}
		if t.finish && t.state == StateRollbackFailed {
			return t.end(ctx, StateRollbackFailed)
		}
	}
	if t.finish && state == StateCompleted && t.plan.Steps[len(t.plan.Steps)-1].State == StepPending {
		state = StateStopped
	}
	return t.end(ctx, state)
}

// runStep runs step i and returns the plan's end state when the plan must
// stop after it ("" to go on).
func (t *task) runStep(ctx workflow.Context, in PlanInput, i int, results map[string]activities.StepResult) string {
	step := in.Plan.Steps[i]
	st := &t.plan.Steps[i]
	st.State = StepRunning
	st.CallID = "step-" + step.ID

	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{activities.ErrTypeInternal}},
	})
	var prep activities.StepOutput
	err := workflow.ExecuteLocalActivity(lctx, activities.PrepareStepName, activities.StepInput{
		TaskID: t.in.TaskID, Plan: in.Plan.Name, Step: step, Vars: in.Vars, Results: results,
	}).Get(ctx, &prep)
	if err != nil {
		prep.Error = err.Error()
	}
	var res CallResult
	switch {
	case prep.Skip:
		st.State, st.Reason = StepSkipped, prep.Reason
		results[step.ID] = activities.StepResult{Outcome: "skipped", Reason: prep.Reason}
		return ""
	case prep.Error != "":
		res = CallResult{Outcome: OutcomeFailed, Reason: fmt.Sprintf("step %s could not be prepared: %s", step.ID, prep.Error)}
	default:
		req := requestFor(st.CallID, prep.Call)
		req.Principal = t.in.Principal
		res, _ = t.callTool(ctx, req)
	}
	if res.Outcome == OutcomeToolError && res.Reason == "" {
		res.Reason = step.Tool + " reported an error: " + ResultText(res.Result)
	}
	st.Outcome, st.Reason = res.Outcome, res.Reason
	results[step.ID] = activities.StepResult{Outcome: string(res.Outcome), Reason: res.Reason, Result: res.Result}
	if res.Outcome == OutcomeOK {
		st.State = StepOK
		return ""
	}
	st.State = StepFailed
	onFailure := step.EffectiveOnFailure()
	if res.Outcome == OutcomeDenied {
		st.State = StepDenied
		switch {
		case t.rollbacks > 0: // rollback_on_deny did it (callTool → denied)
			return StateRolledBack
		case onFailure == plans.OnFailureContinue:
			return ""
		}
		return StateStopped
	}
	switch onFailure {
	case plans.OnFailureContinue:
		return ""
	case plans.OnFailureStop:
		return StateStopped
	}
	t.rollback(ctx, RollbackRequest{By: "plan", Reason: fmt.Sprintf("step %s failed: %s", step.ID, res.Reason)}, "")
	return StateRolledBack
}
