package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/activities"
)

// changeSaga versions capture, compensation and rollback.
const changeSaga = "saga"

// undoneKept is how many finished compensations the task remembers.
const undoneKept = 32

// sagaOn reports whether this run records captures and compensations
// (histories from before sagas replay without them).
func sagaOn(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, changeSaga, workflow.DefaultVersion, 1) >= 1
}

// capture reads the pre-image the manifest asks for, right before the
// call. It returns the capture's result (nil when the capture tool
// reported an error: before is then null), or a CallResult when the call
// must not run because nothing could be captured.
func (t *task) capture(ctx workflow.Context, req CallRequest, c *activities.ToolCall) (json.RawMessage, string, *CallResult) {
	res := t.execute(ctx, requestFor(req.CallID+"/capture", c))
	switch res.Outcome {
	case OutcomeOK:
		return res.Result, res.ResultRef, nil
	case OutcomeToolError:
		return nil, "", nil
	}
	o := OutcomeFailed
	if res.Outcome == OutcomeUnavailable {
		o = OutcomeUnavailable
	}
	return nil, "", &CallResult{Outcome: o, Attempts: res.Attempts,
		Reason: fmt.Sprintf("%s did not run: its pre-image could not be captured with %s (%s), so it could not be undone. %s", req.Tool, c.Tool, res.Outcome, res.Reason)}
}

// pushUndo computes the compensation of a call that ran (or may have) and
// pushes it on the saga stack. A compensation that cannot be computed is
// pushed all the same, with its error: a rollback then stops there and
// reports it rather than silently skipping it.
func (t *task) pushUndo(ctx workflow.Context, req CallRequest, res CallResult, before json.RawMessage, beforeRef string) {
	// Disconnected: a call that ran must get its entry even when the task
	// is being cancelled (the cancel's rollback needs it).
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	lctx := workflow.WithLocalActivityOptions(dctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{activities.ErrTypeInternal}},
	})
	in := activities.CompensationInput{TaskID: t.in.TaskID, CallID: req.CallID, Tool: req.Tool,
		Arguments: req.Arguments, Before: before, BeforeRef: beforeRef}
	if res.Outcome == OutcomeOK {
		in.Result = res.Result
	}
	var out activities.CompensationOutput
	err := workflow.ExecuteLocalActivity(lctx, activities.PlanCompensationName, in).Get(dctx, &out)
	e := SagaEntry{CallID: req.CallID, Tool: req.Tool, At: workflow.Now(ctx), State: UndoPending}
	switch {
	case err != nil:
		e.Error = fmt.Sprintf("the compensation could not be computed: %v", err)
	case out.Skipped != "":
		return
	case out.Error != "":
		e.Error = "the compensation could not be computed: " + out.Error
	default:
		e.Undo = out.Undo
	}
	if res.Outcome != OutcomeOK && e.Undo == nil {
		e.Error += fmt.Sprintf(" (the call's outcome is %s, so there was no result to compute it from)", res.Outcome)
	}
	t.saga = append(t.saga, e)
}

// requestFor is the call request that runs a call the worker computed (a
// capture, a compensation, a plan step) under call ID id.
func requestFor(id string, c *activities.ToolCall) CallRequest {
	return CallRequest{CallID: id, Tool: c.Tool, Server: c.Server, UpstreamTool: c.UpstreamTool,
		Arguments: c.Arguments, ArgumentsRef: c.ArgumentsRef, Spec: c.Spec}
}

// rollbackRun is a rollback in progress; a second request joins it.
type rollbackRun struct {
	done   bool
	result RollbackResult
}

// validateRollback refuses requests that cannot be served before they enter
// history.
func (t *task) validateRollback(req RollbackRequest) error {
	switch {
	case len(req.Reason) > MaxReasonBytes || len(req.By) > MaxReasonBytes:
		return fmt.Errorf("rollback: reason is %d bytes; keep it under %d", len(req.Reason), MaxReasonBytes)
	case req.Principal != "" && req.Principal != t.in.Principal:
		return fmt.Errorf("task %s belongs to another principal; you can roll back only your own tasks", t.in.TaskID)
	case t.ended:
		return fmt.Errorf("task %s has ended (%s); it can no longer be rolled back", t.in.TaskID, t.state)
	}
	return nil
}

func (t *task) rollbackUpdate(ctx workflow.Context, req RollbackRequest) (RollbackResult, error) {
	return t.rollback(ctx, req, ""), nil
}

// rollback runs the saga stack top down, each compensation once. It waits
// for running calls first (except the caller's own call, when a denial
// triggers it) and holds new calls off until it is done. It stops at the
// first compensation that fails for good: what lies below it may depend on
// it, so the rest stays on the stack, the task goes to rollback_failed and
// people are told.
func (t *task) rollback(ctx workflow.Context, req RollbackRequest, except string) RollbackResult {
	// Disconnected: rolling back is what a cancelled task must still do.
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	if r := t.rolling; r != nil {
		_ = workflow.Await(ctx, func() bool { return r.done })
		res := r.result
		res.Joined = true
		return res
	}
	r := &rollbackRun{}
	t.rolling = r
	defer func() {
		r.done, t.rolling = true, nil
		t.lastActivity = workflow.Now(ctx) // the idle timeout counts from here
	}()

	_ = workflow.Await(ctx, func() bool {
		return !slices.ContainsFunc(t.inFlight, func(id string) bool { return id != except })
	})
	res := RollbackResult{TaskID: t.in.TaskID}
	if len(t.saga) == 0 {
		res.State, res.Reason = RollbackNothing, "nothing to roll back: no call of this task has a pending compensation"
		r.result = res
		return res
	}
	workflow.GetLogger(ctx).Info("rolling back", "task", t.in.TaskID, "by", req.By, "entries", len(t.saga))
	t.rollbacks++
	for len(t.saga) > 0 {
		e := &t.saga[len(t.saga)-1]
		if why := t.undoOnce(ctx, e); why != "" {
			res.State, res.Reason = StateRollbackFailed, why
			break
		}
		res.Compensated = append(res.Compensated, *e)
		t.undone = append(t.undone, *e)
		if len(t.undone) > undoneKept {
			t.undone = slices.Delete(t.undone, 0, len(t.undone)-undoneKept)
		}
		t.saga = t.saga[:len(t.saga)-1]
	}
	for i := len(t.saga) - 1; i >= 0; i-- {
		res.Remaining = append(res.Remaining, t.saga[i])
	}
	if res.State == "" {
		res.State = StateRolledBack
		res.Reason = fmt.Sprintf("rolled back %d call(s)", len(res.Compensated))
		if t.state == StateRollbackFailed {
			t.state = StateRunning
			_ = workflow.UpsertTypedSearchAttributes(ctx, SAStatus.ValueSet(StateRunning))
		}
	} else {
		t.state = StateRollbackFailed
		_ = workflow.UpsertTypedSearchAttributes(ctx, SAStatus.ValueSet(StateRollbackFailed))
		t.alertRollbackFailed(ctx, req, res)
	}
	r.result = res
	return res
}

// undoOnce runs one entry's compensation. It returns "" when the entry is
// undone, else why the rollback must stop (the entry records it).
func (t *task) undoOnce(ctx workflow.Context, e *SagaEntry) string {
	switch {
	case e.Undo == nil:
		e.State, e.Reason = UndoFailed, e.Error
		return fmt.Sprintf("the call %s (%s) cannot be undone: %s", e.CallID, e.Tool, e.Error)
	case e.State == UndoUnknown:
		return fmt.Sprintf("the compensation of call %s (%s) may already have run, and %s is not idempotent, so it is not re-run; check by hand whether it took effect", e.CallID, e.Tool, e.Undo.Tool)
	}
	e.Tries++
	u := e.Undo
	res := t.execute(ctx, requestFor("undo-"+e.CallID, u))
	e.Finished = workflow.Now(ctx)
	switch res.Outcome {
	case OutcomeOK:
		e.State, e.Reason = UndoDone, ""
		return ""
	case OutcomeUnknown:
		e.State = UndoUnknown
	default:
		e.State = UndoFailed
	}
	e.Reason = res.Reason
	if res.Outcome == OutcomeToolError {
		e.Reason = u.Tool + " reported an error: " + ResultText(res.Result)
	}
	return fmt.Sprintf("the compensation of call %s (%s) by %s failed: %s", e.CallID, e.Tool, u.Tool, e.Reason)
}

// alertRollbackFailed tells the task's rollback group what remains undone,
// in the background (a Slack outage must not hold the task).
func (t *task) alertRollbackFailed(ctx workflow.Context, req RollbackRequest, res RollbackResult) {
	notice := activities.RollbackNotice{TaskID: t.in.TaskID, Principal: t.in.Principal, Group: t.in.RollbackNotify,
		RequestedBy: req.By, Reason: res.Reason}
	for _, e := range res.Remaining {
		item := activities.RemainingUndo{CallID: e.CallID, Tool: e.Tool, State: e.State, Reason: e.Reason}
		if e.Undo != nil {
			item.Undo, item.Arguments, item.ArgumentsRef = e.Undo.Tool, e.Undo.Arguments, e.Undo.ArgumentsRef
		}
		notice.Remaining = append(notice.Remaining, item)
	}
	workflow.GetLogger(ctx).Error("rollback failed", "task", t.in.TaskID, "reason", res.Reason, "remaining", len(res.Remaining))
	workflow.Go(ctx, func(gctx workflow.Context) {
		actx := workflow.WithActivityOptions(gctx, notifyOptions(24*time.Hour))
		_ = workflow.ExecuteActivity(actx, activities.NotifyRollbackFailedName, notice).Get(gctx, nil)
	})
}

// ResultText is the text of a CallToolResult (its text items joined), for
// reasons and summaries; the raw JSON when it has none.
func ResultText(raw json.RawMessage) string {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return string(raw)
	}
	var parts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		}
	}
	if len(parts) == 0 {
		return string(raw)
	}
	return strings.Join(parts, "\n")
}

// errRollingBack is the validator's refusal of calls during a rollback.
var errRollingBack = errors.New("the task is rolling back; wait for the rollback to finish, then call again")
