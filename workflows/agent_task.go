package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// recentKept is how many finished calls the task remembers with their
// results, to answer a retried call ID with its first result across
// continue-as-new (the ledger remembers every call, without results).
const recentKept = 32

// defaultContinueAsNewAfter: see Limits.ContinueAsNewAfter.
const defaultContinueAsNewAfter = 500

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
	// headroom is fastHeadroom of this run (changeFastHeadroom).
	headroom int
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
	// closedNotices are ready when a closed request's closing update of
	// its messages has finished (tellNotRun waits for it).
	closedNotices map[string]workflow.Future
	edited        map[string]*api.ArgsEdit
	nextEdit      *pendingEdit
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

	// Code mode (program.go): the running programs, in the order they
	// started; the finished ones' results (carried in, and this run's),
	// oldest first; and how many rollbacks of the whole task have begun
	// in this run (one stops the programs running then).
	programs      []*programRun
	programsDone  []api.ProgramResult
	fullRollbacks int
	// partialRollbacks counts the rollbacks counted in rollbacks that
	// undid an atomic program's own calls only.
	partialRollbacks int

	// Information-flow labels (changeLabels, labels.go): whether this
	// run keeps them, and the task's labels.
	labelsOn bool
	labels   api.Labels
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
	t.headroom = fastHeadroomV0
	if t.fastUncounted && workflow.GetVersion(ctx, changeFastHeadroom, workflow.DefaultVersion, 1) >= 1 {
		t.headroom = fastHeadroom
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

	// And whether the task keeps information-flow labels (labels.go).
	if err := t.startLabels(ctx); err != nil {
		return err
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
	if err := t.startPrograms(ctx); err != nil { // code mode
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

// idle reports that no call, no program and no rollback is running. A
// program is counted on its own: between its calls it is in no inFlight
// (and must not be: a rollback waits for what is in flight, and a program
// may wait for the rollback).
func (t *task) idle() bool { return len(t.inFlight) == 0 && t.rolling == nil && len(t.programs) == 0 }

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
		t.programsDone = slices.Clone(c.Programs) // code mode
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
			Edit: r.Edit, Held: r.Held}
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
// records its result. The gateway reads the result from that history and
// answers the client with it (gateway/history.go); this text is what the
// client gets when it cannot.
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
		Programs:       t.carriedPrograms(),
		Labels:         t.labelsFor(), // labels.go
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
		Programs:      t.programStatus(), // code mode
		Labels:        t.labelsFor(),     // labels.go
	}, nil
}
