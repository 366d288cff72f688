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
	"github.com/airlock-run/airlock/manifests"
)

// recentKept is how many finished calls the task remembers with their
// results, to answer a retried call ID with its first result across
// continue-as-new (the ledger remembers every call, without results).
const recentKept = 32

// defaultContinueAsNewAfter: see Limits.ContinueAsNewAfter.
const defaultContinueAsNewAfter = 500

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

// task is the in-memory state of one AgentTask run.
type task struct {
	in            api.TaskInput
	startedAt     time.Time
	lastActivity  time.Time
	calls         int // over the whole task
	runCalls      int // in this run
	runs          int
	toolsUsed     []string
	recent        []api.CallRecord
	inFlight      []string
	finish        bool
	draining      bool // continue-as-new pending: new calls go to the next run
	state         string
	approvals     []*api.ApprovalRequest
	approvalAttr  string
	compensations []api.CompensationEntry // compensable calls, oldest first
	undone        []api.CompensationEntry // recent compensations that ran
	rollbacks     int
	rolling       *rollbackRun
	canceled      bool // the task was cancelled (its context is done)
	plan          *api.PlanStatus
	ended         bool

	// ledger records every call the task has run, in all its runs, so a
	// retried call ID is never run again (nil in runs from before
	// changeCallLedger, and in plans); seen finds a call in it by key
	// (lookup only, never iterated). runID is this run's ID.
	ledger *api.CallLedger
	seen   map[api.LedgerKey]int
	runID  string

	// fast: this run may take the fast path (changeFastPath);
	// fastUncounted: only with calls nothing counts (changeFastUncounted).
	fast, fastUncounted bool
	// Call cancellation (changeCancelCall, cancel.go): cancelled holds
	// the calls SignalCancelCall named and why, callCancels the running
	// calls' cancel functions.
	cancelOn    bool
	cancelled   map[string]string
	callCancels map[string]workflow.CancelFunc

	// Resource locks (issue 16 §4, locks.go): what the task's calls hold
	// and wait for.
	locks taskLocks
	// Task-scoped state (task-state, state.go).
	st taskState
	// Approve with edits (changeApproveEdits, edits.go): editsOn says this
	// run takes edited arguments; edited holds the edits of calls not yet
	// recorded; nextEdit is the edit the next approval request asks about.
	editsOn bool
	// redeliveries cancel the retried deliveries of each open request
	// (changeDeliveries, approval.go).
	redeliveries map[string][]workflow.CancelFunc
	edited       map[string]*api.ArgsEdit
	nextEdit     *pendingEdit
	// exactOn (changeExactNumbers, edits.go): this run digests, edits and
	// binds grants to arguments in jsoncanon's form, numbers exact.
	exactOn bool
	// Approval grants (changeGrants, grants.go): whether this run takes
	// them, and the task's grants, oldest first.
	grantsOn bool
	grants   []*api.Grant
	// Rate limits and budget (changeLimits, limits.go): the budget spent
	// and the task's own windows, and the cost charged to each running
	// call (looked up by call ID, never iterated).
	quota   api.QuotaState
	charged map[string]int
	// Sampling and elicitation across processes (changeMRTR, mrtr.go):
	// inputs holds the last clients' sealed answers for their calls'
	// activities.
	mrtrOn bool
	inputs []api.CallInput
}

// AgentTask is the durable workflow behind one agent session. Each tool call
// arrives as an Update (UpdateCallTool) and runs through the call pipeline;
// the task ends when asked to finish, at its deadline, after its idle
// timeout, or when cancelled. It continues as new before its history grows
// large, carrying its state.
func AgentTask(ctx workflow.Context, in api.TaskInput) (api.TaskResult, error) {
	t := newTask(ctx, in)
	if err := t.startRun(ctx); err != nil {
		return api.TaskResult{}, err
	}
	canAfter := in.Limits.ContinueAsNewAfter
	if canAfter <= 0 {
		canAfter = defaultContinueAsNewAfter
	}
	needCAN := func() bool {
		return (t.runCalls >= canAfter || workflow.GetInfo(ctx).GetContinueAsNewSuggested()) && t.carriable()
	}
	for {
		var end *runEnd
		if t.state == api.StateRollbackFailed {
			ctx, end = t.awaitOperator(ctx)
		} else {
			ctx, end = t.awaitTurn(ctx, needCAN)
		}
		if end != nil {
			return end.res, end.err
		}
	}
}

// runEnd is how a run of AgentTask ends: its result, or its error (a
// continue-as-new among them).
type runEnd struct {
	res api.TaskResult
	err error
}

func ended(res api.TaskResult, err error) *runEnd { return &runEnd{res, err} }

// startRun decides, once per run and at its start, which versioned
// features the run has, and registers its handlers before anything
// blocks.
func (t *task) startRun(ctx workflow.Context) error {
	// Once per run, not per call: a run decides at its start whether it
	// keeps the ledger (runs recorded before it replay without one).
	if workflow.GetVersion(ctx, changeCallLedger, workflow.DefaultVersion, 1) >= 1 {
		t.keepLedger(ctx)
	}
	// Also once per run: whether auto-allowed calls may decide and run in
	// one local activity (runs recorded before it replay without).
	t.fast = workflow.GetVersion(ctx, changeFastPath, workflow.DefaultVersion, 1) >= 1
	// And whether counted calls keep off it (fastpath.go).
	if t.fast {
		t.fastUncounted = workflow.GetVersion(ctx, changeFastUncounted, workflow.DefaultVersion, 1) >= 1
	}
	// And whether a call may be cancelled on its own (cancel.go).
	if workflow.GetVersion(ctx, changeCancelCall, workflow.DefaultVersion, 1) >= 1 {
		t.listenCancels(ctx)
	}
	// And whether approvers may edit a call's arguments (edits.go).
	t.editsOn = workflow.GetVersion(ctx, changeApproveEdits, workflow.DefaultVersion, 1) >= 1
	// And whether digests, edits and grants keep numbers exact (edits.go).
	t.exactOn = workflow.GetVersion(ctx, changeExactNumbers, workflow.DefaultVersion, 1) >= 1

	// And whether approvals may grant later calls (grants.go).
	if err := t.startGrants(ctx); err != nil {
		return err
	}
	// And whether clients' answers reach activities in other processes (mrtr.go).
	if workflow.GetVersion(ctx, changeMRTR, workflow.DefaultVersion, 1) >= 1 {
		if err := t.listenInputs(ctx); err != nil {
			return err
		}
	}

	// Handlers first, before anything blocks.
	if err := t.registerShared(ctx); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateCallTool, t.callTool,
		workflow.UpdateHandlerOptions{Validator: t.validateCall}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryCall, t.callQuery); err != nil {
		return err
	}
	if t.in.Carried == nil {
		return workflow.UpsertTypedSearchAttributes(ctx,
			api.SAPrincipal.ValueSet(t.in.Principal), api.SAStatus.ValueSet(api.StateRunning))
	}
	return nil
}

// awaitOperator is a turn of a task whose rollback failed: a person must
// act, retrying the rollback or finishing the task, which leaves what
// remains undone on record. It returns the context for the next turn, or
// how the run ends.
func (t *task) awaitOperator(ctx workflow.Context) (workflow.Context, *runEnd) {
	err := workflow.Await(ctx, func() bool { return t.finish || t.state != api.StateRollbackFailed })
	switch {
	case err != nil:
		ctx = t.cancel(ctx)
	case t.finish:
		return ctx, ended(t.endWhenIdle(ctx, api.StateRollbackFailed))
	case t.canceled:
		return ctx, ended(t.end(ctx, api.StateCanceled))
	}
	return ctx, nil
}

// awaitTurn is a turn of a running task: it waits for a finish, a
// continue-as-new (needCAN), a failed rollback, or its deadline or idle
// timeout, and acts on it. It returns the context for the next turn, or
// how the run ends.
func (t *task) awaitTurn(ctx workflow.Context, needCAN func() bool) (workflow.Context, *runEnd) {
	wake, why := t.nextWake()
	var d time.Duration
	if !wake.IsZero() {
		d = wake.Sub(workflow.Now(ctx))
	}
	if !wake.IsZero() && d <= 0 {
		if t.idle() {
			return ctx, ended(t.end(ctx, why))
		}
		// Calls still running: wait for them, then look again.
		if err := workflow.Await(ctx, func() bool { return t.idle() }); err != nil {
			ctx = t.cancel(ctx)
		}
		return ctx, nil
	}
	cond := func() bool { return t.finish || needCAN() || t.state == api.StateRollbackFailed }
	var err error
	if wake.IsZero() {
		err = workflow.Await(ctx, cond)
	} else {
		_, err = workflow.AwaitWithTimeout(ctx, d, cond)
	}
	if err != nil {
		if temporal.IsCanceledError(err) {
			ctx = t.cancel(ctx)
			if t.state == api.StateRollbackFailed {
				return ctx, nil
			}
			return ctx, ended(t.end(ctx, api.StateCanceled))
		}
		return ctx, ended(api.TaskResult{}, err)
	}
	switch {
	case t.state == api.StateRollbackFailed:
		return ctx, nil
	case t.finish:
		return ctx, ended(t.endWhenIdle(ctx, api.StateFinished))
	case needCAN():
		return t.continueAsNew(ctx)
	}
	return ctx, nil
}

// continueAsNew drains the run and continues the task as new, carrying
// its state. New calls are rejected from now on (the client retries them
// against the next run); running calls finish in this one.
func (t *task) continueAsNew(ctx workflow.Context) (workflow.Context, *runEnd) {
	t.draining = true
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		ctx = t.cancel(ctx)
		if t.state == api.StateRollbackFailed {
			return ctx, nil
		}
		return ctx, ended(t.end(ctx, api.StateCanceled))
	}
	if t.finish {
		return ctx, ended(t.end(ctx, api.StateFinished))
	}
	next := t.in
	next.Carried = t.carry()
	return ctx, ended(api.TaskResult{}, workflow.NewContinueAsNewError(ctx, api.AgentTaskName, next))
}

// idle reports that no call and no rollback is running.
func (t *task) idle() bool { return len(t.inFlight) == 0 && t.rolling == nil }

// endWhenIdle ends the task once its running calls are done.
func (t *task) endWhenIdle(ctx workflow.Context, state string) (api.TaskResult, error) {
	if err := workflow.Await(ctx, func() bool { return t.idle() }); err != nil {
		ctx = t.cancel(ctx)
		if t.state != api.StateRollbackFailed {
			state = api.StateCanceled
		}
	}
	return t.end(ctx, state)
}

// cancel handles the task's cancellation: it rolls back whatever the task
// changed (once; running calls, cancelled too, finish first) and returns a
// context that is not cancelled, for the rest of the task's life. A task
// whose rollback failed stays open in rollback_failed.
func (t *task) cancel(ctx workflow.Context) workflow.Context {
	if t.canceled {
		return ctx
	}
	t.canceled = true
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if len(t.compensations) > 0 && compensationsOn(dctx) {
		t.rollback(dctx, api.RollbackRequest{By: "cancel", Reason: "the task was cancelled"}, "")
	}
	return dctx
}

// registerShared registers the handlers agent tasks and plans share:
// status and approvals queries, decide and rollback updates, and the
// finish signal.
func (t *task) registerShared(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, api.QueryStatus, t.status); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryApprovals, t.approvalsQuery); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateDecide, t.decide,
		workflow.UpdateHandlerOptions{Validator: t.validateDecide}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRollback, t.rollbackUpdate,
		workflow.UpdateHandlerOptions{Validator: t.validateRollback}); err != nil {
		return err
	}
	finishCh := workflow.GetSignalChannel(ctx, api.SignalFinish)
	workflow.Go(ctx, func(ctx workflow.Context) {
		finishCh.Receive(ctx, nil)
		t.finish = true
	})
	return nil
}

func newTask(ctx workflow.Context, in api.TaskInput) *task {
	now := workflow.Now(ctx)
	t := &task{in: in, startedAt: now, lastActivity: now, state: api.StateRunning, runs: 1}
	if c := in.Carried; c != nil {
		t.startedAt, t.lastActivity = c.StartedAt, c.LastActivity
		t.calls, t.runs = c.Calls, c.Runs+1
		t.toolsUsed = slices.Clone(c.ToolsUsed)
		t.recent = slices.Clone(c.Recent)
		t.compensations, t.undone, t.rollbacks = slices.Clone(c.Compensations), slices.Clone(c.Undone), c.Rollbacks
		if c.RollbackFailed {
			t.state = api.StateRollbackFailed
		}
		t.st.load(c.State)  // task-state
		if c.Quota != nil { // limits.go
			t.quota = api.QuotaState{Spent: c.Quota.Spent, Windows: slices.Clone(c.Quota.Windows)}
		}
	}
	return t
}

// keepLedger starts this run's ledger from the one carried in; a task
// continued from a run that kept none starts it from the recent calls it
// carried (their run unknown).
func (t *task) keepLedger(ctx workflow.Context) {
	t.runID = workflow.GetInfo(ctx).WorkflowExecution.RunID
	t.ledger = &api.CallLedger{}
	if c := t.in.Carried; c != nil {
		if c.Ledger != nil {
			t.ledger = c.Ledger.Clone()
		} else {
			for _, r := range c.Recent {
				if r.Outcome != api.OutcomeLimit {
					t.ledger.Add(0, "", r.CallID, r.Outcome)
				}
			}
		}
	}
	t.seen = make(map[api.LedgerKey]int, t.ledger.Len())
	for i := range t.ledger.Len() {
		t.seen[t.ledger.Key(i)] = i
	}
}

// ledgerEntryJSON is what one more call adds to the ledger's JSON at most
// (13 bytes in base64), and ledgerRunJSON what one more run adds.
const (
	ledgerEntryJSON = 18
	ledgerRunJSON   = 120
)

// ledgerFull reports that the ledger cannot take one more call (counting
// those running now) within api.MaxTaskCalls and api.MaxLedgerBytes.
func (t *task) ledgerFull() bool {
	n := len(t.inFlight) + 1
	return t.ledger.Len()+n > api.MaxTaskCalls ||
		t.ledger.Size()+n*ledgerEntryJSON+ledgerRunJSON > api.MaxLedgerBytes
}

// known reports whether the task would answer callID as a repeat.
func (t *task) known(callID string) bool {
	if slices.ContainsFunc(t.recent, func(r api.CallRecord) bool { return r.CallID == callID }) {
		return true
	}
	_, ok := t.seen[api.LedgerKeyOf(callID)]
	return ok
}

// repeat answers a call ID the task has already run, without running it
// again: from the recent calls with its first result, else from the
// ledger with its outcome and where its result is recorded.
func (t *task) repeat(callID string) (api.CallResult, bool) {
	for _, r := range t.recent {
		if r.CallID != callID {
			continue
		}
		res := api.CallResult{CallID: r.CallID, Tool: r.Tool, Outcome: r.Outcome, Reason: r.Reason, Result: r.Result, Attempts: r.Attempts, Decision: r.Decision,
			Edit: r.Edit}
		if t.ledger == nil || r.Outcome == api.OutcomeLimit { // a limit: the call never ran
			if r.ResultDropped {
				res.Result = t.droppedResult(r)
			}
			return res, true
		}
		var run api.LedgerRun
		if i, ok := t.seen[api.LedgerKeyOf(callID)]; ok {
			run, _ = t.ledger.Entry(i)
		}
		if r.ResultDropped {
			res = t.ranBefore(callID, r.Tool, r.Outcome, run)
			res.Attempts, res.Decision = r.Attempts, r.Decision
			return res, true
		}
		res.Repeat = &api.Repeat{Run: run.N, RunID: run.ID, Held: true}
		return res, true
	}
	if t.ledger == nil {
		return api.CallResult{}, false
	}
	i, ok := t.seen[api.LedgerKeyOf(callID)]
	if !ok {
		return api.CallResult{}, false
	}
	run, o := t.ledger.Entry(i)
	return t.ranBefore(callID, "", o, run), true
}

// callQuery answers QueryCall: a call that finished in an earlier run is
// no Update of this one, so a client collecting its result (airlock_await)
// asks the task's memory instead.
func (t *task) callQuery(callID string) (api.CallResult, error) {
	if res, ok := t.repeat(callID); ok {
		return res, nil
	}
	return api.CallResult{}, fmt.Errorf("task %s has no record of call %s", t.in.TaskID, callID)
}

// ranBefore answers a repeated call whose result the task no longer
// holds: it says that the call ran, its outcome, and which run's history
// records its result.
func (t *task) ranBefore(callID, tool string, o api.Outcome, run api.LedgerRun) api.CallResult {
	what := "call " + callID
	if tool != "" {
		what += " (" + tool + ")"
	}
	where, show := "in an earlier run", "airlock audit show "+t.in.TaskID
	if run.N > 0 {
		where = fmt.Sprintf("in run %d (%s)", run.N, run.ID)
		show = fmt.Sprintf("airlock audit show --run %s %s", run.ID, t.in.TaskID)
	}
	outcome := string(o)
	if o == "" {
		outcome = "not recorded"
	}
	text := fmt.Sprintf("%s already ran in task %s, %s, with outcome %s, and was not run again. The task no longer holds its result; that run's history records it: %s",
		what, t.in.TaskID, where, outcome, show)
	b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}, "isError": o != api.OutcomeOK})
	return api.CallResult{CallID: callID, Tool: tool, Outcome: o, Reason: text, Result: b,
		Repeat: &api.Repeat{Run: run.N, RunID: run.ID}}
}

// nextWake returns when the task must next check its deadline or idle
// timeout, and which of the two that is. Zero means never.
func (t *task) nextWake() (time.Time, string) {
	if t.state == api.StateRollbackFailed {
		return time.Time{}, "" // waits for a person, whatever the limits say
	}
	var wake time.Time
	why := ""
	if dl := t.in.Limits.Deadline; !dl.IsZero() {
		wake, why = dl, api.StateDeadline
	}
	if it := t.in.Limits.IdleTimeout; it > 0 {
		idle := t.lastActivity.Add(it)
		if wake.IsZero() || idle.Before(wake) {
			wake, why = idle, api.StateIdle
		}
	}
	return wake, why
}

func (t *task) end(ctx workflow.Context, state string) (api.TaskResult, error) {
	t.state, t.ended = state, true
	// Best effort: the status attribute is a derived view.
	_ = workflow.UpsertTypedSearchAttributes(ctx, api.SAStatus.ValueSet(state))
	workflow.GetLogger(ctx).Info("task ended", "task", t.in.TaskID, "state", state, "calls", t.calls)
	res := api.TaskResult{TaskID: t.in.TaskID, State: state, Calls: t.calls}
	if state == api.StateRollbackFailed {
		for i := len(t.compensations) - 1; i >= 0; i-- {
			res.Undone = append(res.Undone, t.compensations[i])
		}
	}
	return res, nil
}

// Carried state goes into the next run's input, one payload, which
// Temporal caps at 2 MB: results are carried only within a budget (newest
// first), and compensations too large to carry keep the task in its current run
// (see carriable).
const (
	carryResultBudget       = 256 << 10
	carryCompensationBudget = 1 << 20
)

// carriable reports whether the task's state fits the next run's input.
// The pending compensations must all be carried (they are what undoes the
// task); when they would not fit, the task does not continue as new and
// its history keeps growing instead, up to Temporal's own limits.
func (t *task) carriable() bool {
	n := 0
	for _, e := range t.compensations {
		n += len(e.Error) + len(e.Reason)
		if e.Compensation != nil {
			n += len(e.Compensation.Arguments)
		}
	}
	return n <= carryCompensationBudget
}

// carriedRecent is the task's recent calls for the next run, their results
// kept newest first within carryResultBudget; a call whose result did not
// fit is still recognised (by ID) and answered without its result.
func (t *task) carriedRecent() []api.CallRecord {
	out := slices.Clone(t.recent)
	budget := carryResultBudget
	for i := len(out) - 1; i >= 0; i-- {
		if len(out[i].Result) > budget {
			out[i].Result, out[i].ResultDropped = nil, len(out[i].Result) > 0
			continue
		}
		budget -= len(out[i].Result)
	}
	return out
}

func (t *task) carry() *api.Carried {
	return &api.Carried{
		StartedAt:      t.startedAt,
		LastActivity:   t.lastActivity,
		Calls:          t.calls,
		ToolsUsed:      slices.Clone(t.toolsUsed),
		Recent:         t.carriedRecent(),
		Runs:           t.runs,
		Compensations:  slices.Clone(t.compensations),
		Undone:         slices.Clone(t.undone),
		Rollbacks:      t.rollbacks,
		RollbackFailed: t.state == api.StateRollbackFailed,
		Ledger:         t.ledger.Clone(),
		State:          t.st.encode(), // task-state
		Grants:         t.grantsCopy(),
		Quota:          t.carriedQuota(), // limits.go
	}
}

func (t *task) status() (api.Status, error) {
	recent := make([]api.CallRecord, len(t.recent))
	for i, r := range t.recent {
		r.Result = nil
		recent[i] = r
	}
	return api.Status{
		TaskID:        t.in.TaskID,
		Principal:     t.in.Principal,
		Client:        t.in.Client,
		State:         t.state,
		StartedAt:     t.startedAt,
		LastActivity:  t.lastActivity,
		Deadline:      t.in.Limits.Deadline,
		Calls:         t.calls,
		MaxCalls:      t.in.Limits.MaxCalls,
		InFlight:      slices.Clone(t.inFlight),
		ToolsUsed:     slices.Clone(t.toolsUsed),
		Recent:        recent,
		Runs:          t.runs,
		Compensations: slices.Clone(t.compensations),
		Undone:        slices.Clone(t.undone),
		Rollbacks:     t.rollbacks,
		RollingBack:   t.rolling != nil,
		Plan:          t.plan,
		Ended:         t.ended,
		Locks:         t.lockList(),
		TaskState:     t.st.encode(), // task-state
		Grants:        t.grantsCopy(),
		Budget:        t.budget(), // limits.go
		Spent:         t.quota.Spent,
	}, nil
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
		if d, out, done = t.decideAndCall(ctx, *req, started); done != nil {
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
	t.grantOnApproval(ctx, *req)
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
		if before, beforeRef, stop = t.capture(ctx, req, out.Capture); stop != nil {
			return ended(*stop)
		}
	}

	ectx, release := t.callContext(ctx, req.CallID)
	res := t.execute(ectx, req)
	release()
	res, _ = t.cancelledResult(req, res, false)
	res.Decision = decision

	// Remember how to undo it.
	if compensate && out.Compensable && (res.Outcome == api.OutcomeOK || res.Outcome == api.OutcomeUnknown) {
		t.pushUndo(ctx, req, res, before, beforeRef)
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
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{api.ErrTypeInternal}},
	})
	var d api.DecideOutput
	if err := workflow.ExecuteLocalActivity(lctx, api.DecideName, t.decideInput(req, now)).Get(ctx, &d); err != nil {
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
		Principal: api.Principal{Name: t.in.Principal},
	}
	if id := t.in.Identity; id != nil {
		in.Principal = api.Principal{Name: id.Name, Roles: id.Roles, Permissions: id.Permissions,
			DataLevel: manifests.DataLevel(id.DataLevel), SlackUserID: id.SlackUserID}
		in.AllowTools = id.AllowTools
	}
	return in
}

func (t *task) record(req api.CallRequest, started, finished time.Time, res api.CallResult) api.CallResult {
	res = t.attachEdit(req.CallID, res) // approve with edits
	res.CallID, res.Tool = req.CallID, req.Tool
	t.settleQuota(req.CallID, res.Outcome) // limits.go
	t.recent = append(t.recent, api.CallRecord{
		CallID: req.CallID, Tool: req.Tool, Outcome: res.Outcome, Reason: res.Reason,
		Started: started, Finished: finished, Attempts: res.Attempts, Result: res.Result, Decision: res.Decision,
		Edit: res.Edit,
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
	for attempt := 1; ; attempt++ {
		var out api.CallToolOutput
		err := workflow.ExecuteActivity(actx, api.CallToolName, api.CallToolInput{
			TaskID: t.in.TaskID, CallID: req.CallID, Attempt: attempt,
			Server: req.Server, Tool: req.UpstreamTool, Arguments: req.Arguments, ArgumentsRef: req.ArgumentsRef,
			Idempotent: spec.Idempotent, ExposedName: req.Tool, ProgressToken: req.ProgressToken,
		}).Get(ctx, &out)
		if err == nil {
			o := api.OutcomeOK
			if out.IsError {
				o = api.OutcomeToolError
			}
			return api.CallResult{Outcome: o, Result: out.Result, ResultRef: out.ResultRef, Attempts: attempt}
		}
		kind, msg := classifyActivityError(err)
		if temporal.IsCanceledError(err) || ctx.Err() != nil {
			return api.CallResult{Outcome: api.OutcomeUnknown, Attempts: attempt,
				Reason: fmt.Sprintf("the task was cancelled while %s was running; it may or may not have taken effect", req.Tool)}
		}
		if !retryable(kind, spec) || attempt >= maxAttempts {
			return api.CallResult{Outcome: outcomeFor(kind, spec.Idempotent), Attempts: attempt,
				Reason: reasonFor(kind, req, attempt, msg)}
		}
		if err := workflow.Sleep(ctx, interval); err != nil {
			return api.CallResult{Outcome: api.OutcomeUnknown, Attempts: attempt, Reason: "the task was cancelled while retrying " + req.Tool}
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
	case api.ErrTypeCancelled:
		return fmt.Sprintf("%s was cancelled by the client while it ran (%s); the upstream was told to stop, and it may have partly taken effect", req.Tool, last)
	}
	return fmt.Sprintf("airlock failed to run %s: %s", req.Tool, last)
}
