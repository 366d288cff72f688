package workflows

// The call pipeline of a task (callTool): a request is validated, admitted
// against the task's limits, judged (and, when it must be, approved), run
// on the route it was judged on, with its locks, pre-image and retries,
// and recorded. agent_task.go holds the task's run loop around it.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// timeoutGrace is added to a tool's timeout for its activity.
const timeoutGrace = 2 * time.Second

// heartbeatTimeout is how long a running call may go without a heartbeat
// before Temporal declares its worker dead, in runs from before
// changeHeartbeat.
const heartbeatTimeout = 10 * time.Second

// heartbeatFor is the heartbeat timeout of an activity that may run for d,
// in runs from before changeHeartbeat. A call shorter than the heartbeat
// timeout needs none: its start-to-close timeout notices a dead worker as
// soon.
func heartbeatFor(d time.Duration) time.Duration {
	if d <= heartbeatTimeout {
		return 0
	}
	return heartbeatTimeout
}

// toolHeartbeat is the heartbeat timeout of a call of a tool whose spec
// says hb (zero: the default for its timeout) and whose activity may run
// for d; none when d is as short, for the same reason as heartbeatFor.
func toolHeartbeat(hb, timeout, d time.Duration) time.Duration {
	if hb <= 0 {
		hb = manifests.DefaultHeartbeatTimeout(timeout)
	}
	if d <= hb {
		return 0
	}
	return hb
}

// validateCall rejects malformed requests before they enter history.
func (t *task) validateCall(req api.CallRequest) error {
	switch {
	case req.CallID == "":
		return errors.New("call_tool: CallID is empty; set it to the call's idempotency key")
	case len(req.Arguments) > api.MaxArgumentBytes:
		return fmt.Errorf("call_tool: the arguments are %d bytes, more than the %d a task's history keeps; send less", len(req.Arguments), api.MaxArgumentBytes)
	case req.Tool == "" || req.Server == "" || req.UpstreamTool == "":
		return errors.New("call_tool: Tool, Server and UpstreamTool must be set")
	case req.Principal != "" && req.Principal != t.in.Principal:
		return fmt.Errorf("task %s belongs to another principal; call in your own task", t.in.TaskID)
	case t.ledger != nil && t.known(req.CallID):
		// A repeat is answered at once whatever the task is doing
		// (finishing, rolling back, draining for continue-as-new).
		return nil
	}
	return t.takesNew()
}

// takesNew refuses new work (a call, a program) when the task is not
// running it now: its rollback failed, it is finishing or rolling back,
// or it drains for continue-as-new (the client retries against the next
// run).
func (t *task) takesNew() error {
	switch {
	case t.state == api.StateRollbackFailed:
		return fmt.Errorf("task %s could not be rolled back completely; an operator must retry the rollback (airlock tasks rollback %s) or finish the task before it takes new calls", t.in.TaskID, t.in.TaskID)
	case t.state != api.StateRunning || t.finish || t.canceled:
		return temporal.NewApplicationError(fmt.Sprintf("task %s is finishing; start a new task", t.in.TaskID), api.ErrTypeFinishing)
	case t.rolling != nil:
		return fmt.Errorf("task %s: %w", t.in.TaskID, errRollingBack)
	case t.draining:
		return temporal.NewApplicationError(fmt.Sprintf("%s: task %s", api.ErrContinuingAsNew, t.in.TaskID), api.ErrTypeContinuingAsNew)
	}
	return nil
}

// callTool is the call pipeline: limits, policy decision, approval wait,
// locks, capture, execute, record.
func (t *task) callTool(ctx workflow.Context, req api.CallRequest) (api.CallResult, error) {
	// A call ID seen in an earlier run (before continue-as-new) is
	// answered, not run again. (Temporal itself deduplicates Update IDs
	// within a run.)
	if res, ok := t.repeat(req.CallID); ok {
		return res, nil
	}
	started := workflow.Now(ctx)
	t.lastActivity = started
	if stop := t.admit(ctx, req, started); stop != nil {
		return t.record(req, started, workflow.Now(ctx), *stop), nil
	}

	t.calls++
	t.runCalls++
	t.inFlight = append(t.inFlight, req.CallID)
	defer func() { t.inFlight = slices.DeleteFunc(t.inFlight, func(id string) bool { return id == req.CallID }) }()

	if !slices.Contains(t.toolsUsed, req.Tool) {
		t.toolsUsed = append(t.toolsUsed, req.Tool)
		_ = workflow.UpsertTypedSearchAttributes(ctx, api.SATools.ValueSet(slices.Clone(t.toolsUsed)))
	}

	// Built-in state tools are served by the task itself (state.go).
	if isStateCall(req) && workflow.GetVersion(ctx, changeTaskState, workflow.DefaultVersion, 1) >= 1 {
		return t.stateCall(ctx, req, started), nil
	}

	decision, out, done := t.decideCall(ctx, &req, started)
	if done != nil {
		return *done, nil
	}
	return t.runCall(ctx, t.judgedRoute(ctx, req, out), started, decision, out), nil
}

// admit checks the call against the task's limits (max calls, deadline,
// the ledger's room, rate limits and budget) before it counts; non-nil is
// the refusal to record.
func (t *task) admit(ctx workflow.Context, req api.CallRequest, started time.Time) *api.CallResult {
	if lim := t.in.Limits.MaxCalls; lim > 0 && t.calls >= lim {
		return &api.CallResult{Outcome: api.OutcomeLimit,
			Reason: fmt.Sprintf("task %s reached its limit of %d tool calls; finish this task and start a new one, or ask an operator to raise task.max_calls", t.in.TaskID, lim)}
	}
	if dl := t.in.Limits.Deadline; !dl.IsZero() && !started.Before(dl) {
		return &api.CallResult{Outcome: api.OutcomeLimit,
			Reason: fmt.Sprintf("task %s passed its deadline (%s); start a new task", t.in.TaskID, dl.UTC().Format(time.RFC3339))}
	}
	if t.ledger != nil && t.ledgerFull() {
		return &api.CallResult{Outcome: api.OutcomeLimit,
			Reason: fmt.Sprintf("task %s has run %d tool calls, the most one task can remember to keep a retried call from running twice; finish this task and start a new one", t.in.TaskID, t.ledger.Len())}
	}
	// Rate limits and budget (limits.go): a refused call does not count.
	return t.takeQuota(ctx, req)
}

// decideCall is the pipeline's policy decision and approval wait
// (versioned: histories from before the decision replay without it, with
// a nil decision). A grant may allow the call (grants.go), an approver's
// edit replace *req (edits.go). A non-nil result ends the call with it,
// recorded: it ran on the fast path, or was denied or withdrawn.
func (t *task) decideCall(ctx workflow.Context, req *api.CallRequest, started time.Time) (*api.Decision, api.DecideOutput, *api.CallResult) {
	var out api.DecideOutput
	if workflow.GetVersion(ctx, changePolicyDecision, workflow.DefaultVersion, 1) < 1 {
		return nil, out, nil
	}
	var d api.Decision
	if t.fastEligible(*req, started) {
		var done *api.CallResult
		var findings []api.Finding
		if d, out, done, findings = t.decideAndCall(ctx, *req, started); done != nil {
			t.observe(ctx, req.Tool, judgedSpec(*req, out), done, findings) // labels.go
			t.lastActivity = workflow.Now(ctx)
			res := t.record(*req, started, t.lastActivity, *done)
			return &d, out, &res
		}
	} else {
		d, out = t.judge(ctx, *req, started)
	}
	approved := false
	// A grant made with an earlier approval may allow the call
	// instead (grants.go).
	if gd, ok := t.granted(ctx, *req, d, out.Approval); ok {
		d, approved = gd, true
	}
	if d.Effect == api.RequireApproval && out.Approval != nil &&
		workflow.GetVersion(ctx, changeApprovals, workflow.DefaultVersion, 1) >= 1 {
		if stop := t.approve(ctx, req, &d, &out, started); stop != nil {
			return &d, out, stop
		}
		approved = true
	}
	if d.Effect != api.Allow && !approved {
		res := t.denied(ctx, *req, started, api.CallResult{Outcome: api.OutcomeDenied, Reason: deniedReason(*req, d), Decision: &d})
		return &d, out, &res
	}
	return &d, out, nil
}

// approve waits for the approval *d requires. A withdrawn request
// (SignalCancelCall) ends the wait: its state is no longer pending
// (cancel.go). Once approved, an approver's edit is judged again and
// replaces *req, *d and *out (edits.go), and the approval may grant later
// calls (grants.go). A non-nil result ends the call with it, recorded.
func (t *task) approve(ctx workflow.Context, req *api.CallRequest, d *api.Decision, out *api.DecideOutput, started time.Time) *api.CallResult {
	ended := func(res api.CallResult) *api.CallResult {
		t.lastActivity = workflow.Now(ctx)
		res = t.record(*req, started, t.lastActivity, res)
		return &res
	}
	if res, c := t.cancelledResult(*req, api.CallResult{Decision: d}, true); c {
		return ended(res)
	}
	ok, why := t.awaitApproval(ctx, *req, *d, out.Approval)
	if res, c := t.cancelledResult(*req, api.CallResult{Decision: d}, true); !ok && c {
		return ended(res)
	}
	if !ok {
		res := t.denied(ctx, *req, started, api.CallResult{Outcome: api.OutcomeDenied, Reason: why, Decision: d})
		return &res
	}
	if stop := t.applyEdit(ctx, req, d, out, started); stop != nil {
		return stop
	}
	if stop := t.recheckApproved(ctx, req, d, out, started); stop != nil {
		return stop
	}
	t.grantOnApproval(ctx, *req)
	return nil
}

// recheckApproved judges an approved call again, against the policy and
// catalog in force now, before it runs (changeApprovalRecheck; SEP-2848:
// an approval is an input to a new decision, not a standing grant). A
// deny, or a decision that now needs another group's (or a larger
// quorum's) approval, refuses the call: it does not run, and a new call
// asks afresh. Otherwise the call runs as judged now (*out: its route,
// declaration and capture). An edited call was judged again already
// (applyEdit).
func (t *task) recheckApproved(ctx workflow.Context, req *api.CallRequest, d *api.Decision, out *api.DecideOutput, started time.Time) *api.CallResult {
	if t.edited[req.CallID] != nil || workflow.GetVersion(ctx, changeApprovalRecheck, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	d2, out2 := t.judgeAs(ctx, *req, workflow.Now(ctx), true)
	why := ""
	switch {
	case d2.Effect == api.Allow:
	case d2.Effect == api.RequireApproval && d2.Group == d.Group && max(d2.Quorum, 1) <= max(d.Quorum, 1):
	case d2.Effect == api.RequireApproval:
		why = fmt.Sprintf("it now needs approval by %q (quorum %d) under policy %s; call it again to ask them", d2.Group, max(d2.Quorum, 1), d2.PolicyVersion)
	default:
		why = fmt.Sprintf("policy %s denies it now: %s", d2.PolicyVersion, d2.Reason)
	}
	if why != "" {
		res := t.denied(ctx, *req, started, api.CallResult{Outcome: api.OutcomeDenied, Decision: d,
			Reason: fmt.Sprintf("%s was approved, but judged again before it ran, %s. It did not run", req.Tool, why)})
		return &res
	}
	*out = out2
	return nil
}

// deniedReason is why a call that policy did not allow is denied.
func deniedReason(req api.CallRequest, d api.Decision) string {
	// Only a task started before the approval wait (changeApprovals)
	// gets here needing approval.
	if d.Effect != api.RequireApproval {
		return d.Reason
	}
	reason := fmt.Sprintf("%s needs approval by %q (quorum %d) under policy %s, and this task was started before airlock waited for approvals, so it cannot ask for one; start a new task, or ask an operator to allow the call by a rule", req.Tool, d.Group, max(d.Quorum, 1), d.PolicyVersion)
	if d.Reason != "" {
		reason += ". Policy said: " + d.Reason
	}
	return reason
}

// judgedRoute is req to run with the route and spec the worker's catalog
// judged (out.Route) instead of the gateway's copy, so that a reload
// between the two cannot judge one declaration and run another
// (changeJudgedRoute). A decision without a route (recorded before it, or
// by a catalog that does not know the tool, which denies it) and runs
// recorded before the change keep the request's route.
func (t *task) judgedRoute(ctx workflow.Context, req api.CallRequest, out api.DecideOutput) api.CallRequest {
	r := out.Route
	if r == nil || r.Server == "" || r.UpstreamTool == "" {
		return req
	}
	if workflow.GetVersion(ctx, changeJudgedRoute, workflow.DefaultVersion, 1) < 1 {
		return req
	}
	req.Server, req.UpstreamTool, req.Spec = r.Server, r.UpstreamTool, r.Spec
	return req
}

// runCall runs a call policy let through: its locks, the capture of its
// pre-image, the tool, and the compensation it pushes; it records the
// result.
func (t *task) runCall(ctx workflow.Context, req api.CallRequest, started time.Time, decision *api.Decision, out api.DecideOutput) api.CallResult {
	ended := func(res api.CallResult) api.CallResult {
		res.Decision = decision
		t.lastActivity = workflow.Now(ctx)
		return t.record(req, started, t.lastActivity, res)
	}
	// Resource locks (locks.go): all of them, in sorted order, before
	// the capture and the execution; released when the call ends.
	unlock, stop := t.acquireLocks(ctx, req, out)
	if stop != nil {
		return ended(*stop)
	}
	defer unlock()

	// The pre-image (versioned with compensation: changeCompensation).
	compensate := (out.Capture != nil || out.CaptureError != "" || out.Compensable) && compensationsOn(ctx)
	var before json.RawMessage
	var beforeRef string
	if compensate && out.CaptureError != "" {
		return ended(api.CallResult{Outcome: api.OutcomeFailed,
			Reason: fmt.Sprintf("%s did not run: its pre-image capture could not be computed (%s), so it could not be undone", req.Tool, out.CaptureError)})
	}
	if compensate && out.Capture != nil {
		var stop *api.CallResult
		var failed string
		if before, beforeRef, stop, failed = t.capture(ctx, req, out.Capture); stop != nil {
			if failed == api.ErrTypeUserGrant { // the capture could not act as the user: tell the approver
				t.tellNotRun(ctx, req.CallID, stop.Reason)
			}
			return ended(*stop)
		}
	}

	ectx, release := t.callContext(ctx, req.CallID)
	res, findings, held, failed := t.executeHeld(ectx, req)
	release()
	if failed == api.ErrTypeUserGrant { // the user's grant was gone: nothing ran; tell the approver
		t.tellNotRun(ctx, req.CallID, res.Reason)
	}
	res, _ = t.cancelledResult(req, res, false)
	res.Decision = decision
	t.observe(ctx, req.Tool, req.Spec, &res, findings) // labels.go

	// Remember how to undo it (before a held result waits: the call has
	// run, whether or not its result is delivered).
	if compensate && out.Compensable && (res.Outcome == api.OutcomeOK || res.Outcome == api.OutcomeUnknown) {
		t.pushUndo(ctx, req, res, before, beforeRef)
	}
	if held != nil && (res.Outcome == api.OutcomeOK || res.Outcome == api.OutcomeToolError) && workflow.GetVersion(ctx, changeResultApproval, workflow.DefaultVersion, 1) >= 1 {
		res = t.holdResult(ctx, req, res, findings, held, out.Approval) // guard.go
	}
	return ended(res)
}

// denied records a denied call; when the task says rollback_on_deny, it
// rolls the task back first and says so in the reason.
func (t *task) denied(ctx workflow.Context, req api.CallRequest, started time.Time, res api.CallResult) api.CallResult {
	if t.in.RollbackOnDeny && len(t.compensations) > 0 && compensationsOn(ctx) {
		rb := t.rollback(ctx, api.RollbackRequest{By: "deny", Reason: req.Tool + " was denied"}, req.CallID)
		res.Reason += fmt.Sprintf(". The task says rollback_on_deny, so it was rolled back: %s", rb.Reason)
	}
	t.lastActivity = workflow.Now(ctx)
	return t.record(req, started, t.lastActivity, res)
}

// droppedResult answers a repeated call whose result was too large to
// carry into this run: the call ran once; its result is in the previous
// run's history.
func (t *task) droppedResult(r api.CallRecord) json.RawMessage {
	text := fmt.Sprintf("call %s (%s) already ran (%s); its result was too large to keep in the task's memory and is in the task's history (airlock audit show %s)", r.CallID, r.Tool, r.Outcome, t.in.TaskID)
	b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}, "isError": r.Outcome == api.OutcomeToolError})
	return b
}

// judge runs the policy decision as a local activity. Any failure to
// decide denies.
func (t *task) judge(ctx workflow.Context, req api.CallRequest, now time.Time) (api.Decision, api.DecideOutput) {
	return t.judgeAs(ctx, req, now, false)
}

// judgeAs is judge; recheck says the call was judged before with the same
// arguments (DecideInput.Recheck: its findings are counted once). An
// input of a local activity: a replay does not compare it.
func (t *task) judgeAs(ctx workflow.Context, req api.CallRequest, now time.Time, recheck bool) (api.Decision, api.DecideOutput) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{api.ErrTypeInternal}},
	})
	var d api.DecideOutput
	in := t.decideInput(req, now)
	in.Recheck = recheck
	if err := workflow.ExecuteLocalActivity(lctx, api.DecideName, in).Get(ctx, &d); err != nil {
		return undecided(err), api.DecideOutput{}
	}
	return d.Recorded(), d
}

// undecided is the decision when the policy could not be evaluated.
func undecided(err error) api.Decision {
	return api.Decision{Effect: api.Deny, Check: api.CheckError,
		Reason: fmt.Sprintf("denied: the policy could not be evaluated (%v); nothing ran", err)}
}

// decideInput is what the worker needs to judge req.
func (t *task) decideInput(req api.CallRequest, now time.Time) api.DecideInput {
	in := api.DecideInput{
		TaskID: t.in.TaskID, CallID: req.CallID, Tool: req.Tool, Arguments: req.Arguments,
		Calls: t.calls - 1, Elapsed: now.Sub(t.startedAt),
		Labels: t.labelsFor(), // labels.go
		// The gateway's guard findings (issue 30 §1): an input of a local
		// activity, not a command, so a replay is unchanged.
		Findings: req.Findings,
	}
	in.Principal, in.AllowTools = t.caller() // plan_program.go
	return in
}

func (t *task) record(req api.CallRequest, started, finished time.Time, res api.CallResult) api.CallResult {
	res = t.attachEdit(req.CallID, res) // approve with edits
	res.CallID, res.Tool = req.CallID, req.Tool
	t.settleQuota(req.CallID, res.Outcome) // limits.go
	t.recent = append(t.recent, api.CallRecord{
		CallID: req.CallID, Tool: req.Tool, Outcome: res.Outcome, Reason: res.Reason,
		Started: started, Finished: finished, Attempts: res.Attempts, Result: res.Result, Decision: res.Decision,
		Edit: res.Edit, Held: res.Held,
	})
	if len(t.recent) > recentKept {
		t.recent = slices.Delete(t.recent, 0, len(t.recent)-recentKept)
	}
	// Every call that counted goes in the ledger; a limit outcome is a
	// call refused before it counted, which a retry meets again.
	if t.ledger != nil && res.Outcome != api.OutcomeLimit {
		t.seen[api.LedgerKeyOf(req.CallID)] = t.ledger.Add(t.runs, t.runID, req.CallID, res.Outcome)
	}
	return res
}

// execute runs the tool as an activity, retrying by the manifest's policy.
// Retries live here rather than in the activity's retry policy so that a
// call whose worker died mid-flight (an activity timeout, or the
// OutcomeUnknown failure with which a restarted airlock dev answers the
// calls it was running when it died) is visible to the workflow, which
// re-runs it only for idempotent tools.
func (t *task) execute(ctx workflow.Context, req api.CallRequest) api.CallResult {
	res, _ := t.executeFound(ctx, req)
	return res
}

// executeFound is execute, with the content guard's findings in the
// result of the attempt that answered (labels.go reads them).
func (t *task) executeFound(ctx workflow.Context, req api.CallRequest) (api.CallResult, []api.Finding) {
	res, findings, _, _ := t.executeHeld(ctx, req)
	return res, findings
}

// executeKind is executeFound, with the error type of the activity failure
// that ended the call ("" when it did not fail that way).
func (t *task) executeKind(ctx workflow.Context, req api.CallRequest) (api.CallResult, []api.Finding, string) {
	res, findings, _, kind := t.executeHeld(ctx, req)
	return res, findings, kind
}

// executeHeld is executeKind, with the result the content guard holds for
// an approver (guard.results: require_approval; nil when none).
func (t *task) executeHeld(ctx workflow.Context, req api.CallRequest) (api.CallResult, []api.Finding, *api.HeldResult, string) {
	spec := req.Spec
	rp := spec.Retry
	maxAttempts := max(rp.MaxAttempts, 1)
	interval := rp.InitialInterval
	if interval <= 0 {
		interval = time.Second
	}
	backoff := rp.Backoff
	if backoff < 1 {
		backoff = 2
	}
	actx := workflow.WithActivityOptions(ctx, callOptions(ctx, req))
	caller, _ := t.caller()
	for attempt := 1; ; attempt++ {
		var out api.CallToolOutput
		err := workflow.ExecuteActivity(actx, api.CallToolName, api.CallToolInput{
			TaskID: t.in.TaskID, CallID: req.CallID, Attempt: attempt,
			Server: req.Server, Tool: req.UpstreamTool, Arguments: req.Arguments, ArgumentsRef: req.ArgumentsRef,
			Idempotent: spec.Idempotent, ExposedName: req.Tool, ProgressToken: req.ProgressToken, Subject: req.Subject,
			Roles:     caller.Roles, // a role's guard tightens the result's (an input: a replay does not compare it)
			ResultKey: req.ResultKey,
		}).Get(ctx, &out)
		if err == nil {
			o := api.OutcomeOK
			if out.IsError {
				o = api.OutcomeToolError
			}
			return api.CallResult{Outcome: o, Result: out.Result, ResultRef: out.ResultRef, Attempts: attempt}, out.Findings, out.Held, ""
		}
		kind, msg := classifyActivityError(err)
		if temporal.IsCanceledError(err) || ctx.Err() != nil {
			return api.CallResult{Outcome: api.OutcomeUnknown, Attempts: attempt,
				Reason: fmt.Sprintf("the task was cancelled while %s was running; it may or may not have taken effect", req.Tool)}, nil, nil, ""
		}
		if !retryable(kind, spec) || attempt >= maxAttempts {
			return api.CallResult{Outcome: outcomeFor(kind, spec.Idempotent), Attempts: attempt,
				Reason: reasonFor(kind, req, attempt, msg)}, nil, nil, kind
		}
		if err := workflow.Sleep(ctx, interval); err != nil {
			return api.CallResult{Outcome: api.OutcomeUnknown, Attempts: attempt, Reason: "the task was cancelled while retrying " + req.Tool}, nil, nil, ""
		}
		interval = time.Duration(float64(interval) * backoff)
		if rp.MaxInterval > 0 && interval > rp.MaxInterval {
			interval = rp.MaxInterval
		}
	}
}

// callOptions are the options of req's CallTool activity, from its spec.
func callOptions(ctx workflow.Context, req api.CallRequest) workflow.ActivityOptions {
	spec := req.Spec
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	// Versioned: a marker once per run, at its first call (GetVersion
	// answers later calls from the first).
	hb := heartbeatFor(timeout + timeoutGrace)
	if workflow.GetVersion(ctx, changeHeartbeat, workflow.DefaultVersion, 1) >= 1 {
		hb = toolHeartbeat(spec.HeartbeatTimeout, timeout, timeout+timeoutGrace)
	}
	return workflow.ActivityOptions{
		// A little past the tool's own timeout, so that a tool that
		// enforces it (a native tool's sandbox) answers why it stopped
		// before the activity gives up on it.
		StartToCloseTimeout: timeout + timeoutGrace,
		// How soon a worker that died mid-call is noticed, when it did
		// not come back to say so (see worker.ResolveOrphans).
		HeartbeatTimeout: hb,
		// Retries are this loop's job (see above).
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:     req.Tool,
	}
}

// retryable reports whether a call that failed with an error of type kind
// may be tried again under spec: a call that was not sent, or one whose
// outcome is unknown when the tool is idempotent, unless the manifest
// lists kind as non-retryable.
func retryable(kind string, spec api.ToolSpec) bool {
	if slices.Contains(spec.Retry.NonRetryable, kind) {
		return false
	}
	switch kind {
	case api.ErrTypeNotSent:
		return true
	case api.ErrTypeOutcomeUnknown:
		return spec.Idempotent
	}
	return false
}

// classifyActivityError maps an activity failure to one of the activity
// error types; a timeout (the worker died or the tool hung) counts as an
// unknown outcome.
func classifyActivityError(err error) (kind, msg string) {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type(), appErr.Message()
	}
	var toErr *temporal.TimeoutError
	if errors.As(err, &toErr) {
		return api.ErrTypeOutcomeUnknown, "no answer within the time limit (" + toErr.TimeoutType().String() + "); the worker may have stopped mid-call"
	}
	return api.ErrTypeInternal, err.Error()
}

func outcomeFor(kind string, idempotent bool) api.Outcome {
	switch kind {
	case api.ErrTypeNotSent:
		return api.OutcomeUnavailable
	case api.ErrTypeOutcomeUnknown:
		return api.OutcomeUnknown
	case api.ErrTypeRejected:
		return api.OutcomeRejected
	case api.ErrTypeUserGrant:
		return api.OutcomeUnavailable
	case api.ErrTypeCancelled:
		// Reported only by workers that relay cancellation (recorded
		// histories from before never hold it).
		return api.OutcomeCancelled
	}
	return api.OutcomeFailed
}

func reasonFor(kind string, req api.CallRequest, attempts int, last string) string {
	switch kind {
	case api.ErrTypeNotSent:
		return fmt.Sprintf("%s did not run: upstream %q is unavailable after %d attempt(s): %s. Try again later; nothing was changed.", req.Tool, req.Server, attempts, last)
	case api.ErrTypeOutcomeUnknown:
		if req.Spec.Idempotent {
			return fmt.Sprintf("%s gave no answer after %d attempt(s): %s. It may have taken effect; check before retrying.", req.Tool, attempts, last)
		}
		return fmt.Sprintf("the outcome of %s is unknown: %s. It was not re-run because the tool is not idempotent; check whether it took effect before calling it again.", req.Tool, last)
	case api.ErrTypeRejected:
		return fmt.Sprintf("upstream %q rejected the call to %s: %s", req.Server, req.UpstreamTool, last)
	case api.ErrTypeUserGrant:
		return fmt.Sprintf("%s did not run: %s", req.Tool, last)
	case api.ErrTypeCancelled:
		return fmt.Sprintf("%s was cancelled by the client while it ran (%s); the upstream was told to stop, and it may have partly taken effect", req.Tool, last)
	}
	return fmt.Sprintf("airlock failed to run %s: %s", req.Tool, last)
}
