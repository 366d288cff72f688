package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// undoneKept is how many finished compensations the task remembers.
const undoneKept = 32

// compensationsOn reports whether this run records captures and
// compensations (histories from before compensation replay without them).
func compensationsOn(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, changeCompensation, workflow.DefaultVersion, 1) >= 1
}

// capture reads the pre-image the manifest asks for, right before the
// call. It returns the capture's result (nil when the capture tool
// reported an error: before is then null), or a CallResult when the call
// must not run because nothing could be captured.
func (t *task) capture(ctx workflow.Context, req api.CallRequest, c *api.ToolCall) (json.RawMessage, string, *api.CallResult, string) {
	creq := requestFor(api.CaptureID(req.CallID), c)
	creq.Subject = req.Subject // the capture is part of the user's call (token exchange)
	res, _, failed := t.executeKind(ctx, creq)
	switch res.Outcome {
	case api.OutcomeOK:
		return res.Result, res.ResultRef, nil, ""
	case api.OutcomeToolError:
		return nil, "", nil, ""
	}
	o := api.OutcomeFailed
	if res.Outcome == api.OutcomeUnavailable {
		o = api.OutcomeUnavailable
	}
	return nil, "", &api.CallResult{Outcome: o, Attempts: res.Attempts,
		Reason: fmt.Sprintf("%s did not run: its pre-image could not be captured with %s (%s), so it could not be undone. %s", req.Tool, c.Tool, res.Outcome, res.Reason)}, failed
}

// pushUndo computes the compensation of a call that ran (or may have) and
// pushes it on the stack of pending compensations. A compensation that cannot be computed is
// pushed all the same, with its error: a rollback then stops there and
// reports it rather than silently skipping it.
func (t *task) pushUndo(ctx workflow.Context, req api.CallRequest, res api.CallResult, before json.RawMessage, beforeRef string) {
	// Disconnected: a call that ran must get its entry even when the task
	// is being cancelled (the cancel's rollback needs it).
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	lctx := workflow.WithLocalActivityOptions(dctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{api.ErrTypeInternal}},
	})
	in := api.CompensationInput{TaskID: t.in.TaskID, CallID: req.CallID, Tool: req.Tool,
		Arguments: req.Arguments, Before: before, BeforeRef: beforeRef}
	if res.Outcome == api.OutcomeOK {
		in.Result = res.Result
	}
	var out api.CompensationOutput
	err := workflow.ExecuteLocalActivity(lctx, api.PlanCompensationName, in).Get(dctx, &out)
	e := api.CompensationEntry{CallID: req.CallID, Tool: req.Tool, At: workflow.Now(ctx), State: api.CompensationPending}
	if req.Subject != nil && workflow.GetVersion(ctx, changeUserGrant, workflow.DefaultVersion, 1) >= 1 {
		e.Subject = req.Subject // the compensation acts as the call's user
	}
	switch {
	case err != nil:
		e.Error = fmt.Sprintf("the compensation could not be computed: %v", err)
	case out.Skipped != "":
		return
	case out.Error != "":
		e.Error = "the compensation could not be computed: " + out.Error
	default:
		e.Compensation = out.Compensation
	}
	if res.Outcome != api.OutcomeOK && e.Compensation == nil {
		e.Error += fmt.Sprintf(" (the call's outcome is %s, so there was no result to compute it from)", res.Outcome)
	}
	t.compensations = append(t.compensations, e)
}

// requestFor is the call request that runs a call the worker computed (a
// capture, a compensation, a plan step) under call ID id.
func requestFor(id string, c *api.ToolCall) api.CallRequest {
	return api.CallRequest{CallID: id, Tool: c.Tool, Server: c.Server, UpstreamTool: c.UpstreamTool,
		Arguments: c.Arguments, ArgumentsRef: c.ArgumentsRef, Spec: c.Spec}
}

// rollbackRun is a rollback in progress; a second request joins it.
// partial: it undoes one atomic program's calls only (program.go), and
// is neither joined nor a rollback of the task.
type rollbackRun struct {
	done    bool
	partial bool
	result  api.RollbackResult
}

// validateRollback refuses requests that cannot be served before they enter
// history.
func (t *task) validateRollback(req api.RollbackRequest) error {
	switch {
	case len(req.Reason) > api.MaxReasonBytes || len(req.By) > api.MaxReasonBytes:
		return fmt.Errorf("rollback: reason is %d bytes; keep it under %d", len(req.Reason), api.MaxReasonBytes)
	case req.Principal != "" && req.Principal != t.in.Principal:
		return fmt.Errorf("task %s belongs to another principal; you can roll back only your own tasks", t.in.TaskID)
	case t.ended:
		return fmt.Errorf("task %s has ended (%s); it can no longer be rolled back", t.in.TaskID, t.state)
	}
	return nil
}

func (t *task) rollbackUpdate(ctx workflow.Context, req api.RollbackRequest) (api.RollbackResult, error) {
	return t.rollback(ctx, req, ""), nil
}

// rollback runs the stack of pending compensations top down, each compensation once. It waits
// for running calls first (except the caller's own call, when a denial
// triggers it) and holds new calls off until it is done. It stops at the
// first compensation that fails for good: what lies below it may depend on
// it, so the rest stays on the stack, the task goes to rollback_failed and
// people are told.
func (t *task) rollback(ctx workflow.Context, req api.RollbackRequest, except string) api.RollbackResult {
	return t.rollbackOf(ctx, req, except, nil)
}

// rollbackOf is rollback; with own set, it undoes only the entries of the
// calls own reports (an atomic program's: their calls have all ended),
// newest first, after any other rollback, and leaves the rest of the
// stack alone.
func (t *task) rollbackOf(ctx workflow.Context, req api.RollbackRequest, except string, own func(callID string) bool) api.RollbackResult {
	// Disconnected: rolling back is what a cancelled task must still do.
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	if own != nil {
		_ = workflow.Await(ctx, func() bool { return t.rolling == nil })
	}
	if r := t.rolling; r != nil {
		_ = workflow.Await(ctx, func() bool { return r.done })
		res := r.result
		res.Joined = true
		return res
	}
	r := &rollbackRun{partial: own != nil}
	t.rolling = r
	defer func() {
		r.done, t.rolling = true, nil
		t.lastActivity = workflow.Now(ctx) // the idle timeout counts from here
	}()
	mine := func(e api.CompensationEntry) bool { return own == nil || own(e.CallID) }
	if own == nil {
		t.fullRollbacks++ // stops the running programs (program.go)
		_ = workflow.Await(ctx, func() bool {
			return !slices.ContainsFunc(t.inFlight, func(id string) bool { return id != except })
		})
	}
	res := api.RollbackResult{TaskID: t.in.TaskID}
	if !slices.ContainsFunc(t.compensations, mine) {
		res.State, res.Reason = api.RollbackNothing, "nothing to roll back: no call of this task has a pending compensation"
		r.result = res
		return res
	}
	workflow.GetLogger(ctx).Info("rolling back", "task", t.in.TaskID, "by", req.By, "entries", len(t.compensations))
	t.rollbacks++
	if own != nil {
		t.partialRollbacks++ // plan_program.go
	}
	newest := func() int { // the top of the stack, of what is ours to undo
		for i := len(t.compensations) - 1; i >= 0; i-- {
			if mine(t.compensations[i]) {
				return i
			}
		}
		return -1
	}
	for i := newest(); i >= 0; i = newest() {
		e := &t.compensations[i]
		if why := t.undoOnce(ctx, e); why != "" {
			res.State, res.Reason = api.StateRollbackFailed, why
			break
		}
		res.Compensated = append(res.Compensated, *e)
		t.undone = append(t.undone, *e)
		if len(t.undone) > undoneKept {
			t.undone = slices.Delete(t.undone, 0, len(t.undone)-undoneKept)
		}
		t.compensations = slices.Delete(t.compensations, i, i+1)
	}
	for i := len(t.compensations) - 1; i >= 0; i-- {
		if mine(t.compensations[i]) {
			res.Remaining = append(res.Remaining, t.compensations[i])
		}
	}
	if res.State == "" {
		res.State = api.StateRolledBack
		res.Reason = fmt.Sprintf("rolled back %d call(s)", len(res.Compensated))
		if t.state == api.StateRollbackFailed {
			t.state = api.StateRunning
			_ = workflow.UpsertTypedSearchAttributes(ctx, api.SAStatus.ValueSet(api.StateRunning))
		}
	} else {
		t.state = api.StateRollbackFailed
		_ = workflow.UpsertTypedSearchAttributes(ctx, api.SAStatus.ValueSet(api.StateRollbackFailed))
		t.alertRollbackFailed(ctx, req, res)
	}
	r.result = res
	return res
}

// undoOnce runs one entry's compensation. It returns "" when the entry is
// undone, else why the rollback must stop (the entry records it).
func (t *task) undoOnce(ctx workflow.Context, e *api.CompensationEntry) string {
	switch {
	case e.Compensation == nil:
		e.State, e.Reason = api.CompensationFailed, e.Error
		return fmt.Sprintf("the call %s (%s) cannot be undone: %s", e.CallID, e.Tool, e.Error)
	case e.State == api.CompensationUnknown:
		return fmt.Sprintf("the compensation of call %s (%s) may already have run, and %s is not idempotent, so it is not re-run; check by hand whether it took effect", e.CallID, e.Tool, e.Compensation.Tool)
	}
	// Under the locks of the call it undoes (locks.go).
	unlock, why := t.lockUndo(ctx, e)
	if why != "" {
		e.State, e.Reason = api.CompensationFailed, why
		return fmt.Sprintf("the compensation of call %s (%s) did not run: %s", e.CallID, e.Tool, why)
	}
	defer unlock()
	e.Tries++
	u := e.Compensation
	var res api.CallResult
	if isStateRestore(u) { // task-state: restored inside the workflow
		res = t.restoreState(u)
	} else {
		creq := requestFor(api.CompensationID(e.CallID), u)
		creq.Subject = e.Subject // nil: the call did not act as a user, or ran before changeUserGrant
		res = t.execute(ctx, creq)
	}
	e.Finished = workflow.Now(ctx)
	switch res.Outcome {
	case api.OutcomeOK:
		e.State, e.Reason = api.CompensationDone, ""
		return ""
	case api.OutcomeUnknown:
		e.State = api.CompensationUnknown
	default:
		e.State = api.CompensationFailed
	}
	e.Reason = res.Reason
	if res.Outcome == api.OutcomeToolError {
		e.Reason = u.Tool + " reported an error: " + api.ResultText(res.Result)
	}
	return fmt.Sprintf("the compensation of call %s (%s) by %s failed: %s", e.CallID, e.Tool, u.Tool, e.Reason)
}

// alertRollbackFailed tells the task's rollback group what remains undone,
// in the background (a Slack outage must not hold the task).
func (t *task) alertRollbackFailed(ctx workflow.Context, req api.RollbackRequest, res api.RollbackResult) {
	notice := api.RollbackNotice{TaskID: t.in.TaskID, Principal: t.in.Principal, Group: t.in.RollbackNotify,
		RequestedBy: req.By, Reason: res.Reason}
	for _, e := range res.Remaining {
		item := api.RemainingCompensation{CallID: e.CallID, Tool: e.Tool, State: e.State, Reason: e.Reason}
		if e.Compensation != nil {
			item.Compensation, item.Arguments, item.ArgumentsRef = e.Compensation.Tool, e.Compensation.Arguments, e.Compensation.ArgumentsRef
		}
		notice.Remaining = append(notice.Remaining, item)
	}
	workflow.GetLogger(ctx).Error("rollback failed", "task", t.in.TaskID, "reason", res.Reason, "remaining", len(res.Remaining))
	workflow.Go(ctx, func(gctx workflow.Context) {
		actx := workflow.WithActivityOptions(gctx, notifyOptions(24*time.Hour))
		_ = workflow.ExecuteActivity(actx, api.NotifyRollbackFailedName, notice).Get(gctx, nil)
	})
}

// errRollingBack is the validator's refusal of calls during a rollback.
var errRollingBack = errors.New("the task is rolling back; wait for the rollback to finish, then call again")
