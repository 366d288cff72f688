package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// lockIdle is how long a lock workflow with no holder and no waiter stays
// open for the next request before it ends (a later request starts a new
// one: RequestLock is a SignalWithStart).
const lockIdle = time.Minute

// lockSignalsPerRun bounds the signals one run of a lock workflow handles
// before it continues as new, carrying its holders and queue.
const lockSignalsPerRun = 500

// ResourceLock serialises the calls that take one lock key, across tasks
// and principals (issue 16 §4; the samples-go mutex pattern, extended with
// shared holders, a FIFO queue and a check on dead holders). Requests
// arrive as signals (SignalLockRequest, by the RequestLock activity's
// SignalWithStart); a grant is a signal to the requesting task's run
// (SignalLockGrant); a release, or a waiter giving up, is a signal back
// (SignalLockRelease).
//
// The queue is strictly FIFO: a request is granted when it is at the head
// and compatible with the holders (exclusive: none; shared: all shared),
// so a writer is never starved by a stream of readers.
//
// A task's run that closes while holding the lock (terminated, failed)
// never releases it; every CheckEvery while it has holders, the workflow
// asks which holders' runs have closed (LockOwnersClosed) and releases
// theirs. A worker that dies does not close a run: the task resumes on
// restart and releases when its interrupted call ends.
func ResourceLock(ctx workflow.Context, in api.LockInput) error {
	l := &resourceLock{key: in.Key, holders: slices.Clone(in.Holders), queue: slices.Clone(in.Queue)}
	check := in.CheckEvery
	if check <= 0 {
		check = api.DefaultLockCheck
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryLock, func() (api.LockState, error) {
		return api.LockState{Key: l.key, Holders: slices.Clone(l.holders), Queue: slices.Clone(l.queue)}, nil
	}); err != nil {
		return err
	}
	reqCh := workflow.GetSignalChannel(ctx, api.SignalLockRequest)
	relCh := workflow.GetSignalChannel(ctx, api.SignalLockRelease)

	handled := 0
	var checkTimer workflow.Future
	for {
		l.grant(ctx)
		if len(l.holders) == 0 && len(l.queue) == 0 {
			if !l.awaitIdle(ctx, reqCh, relCh) {
				return nil
			}
			handled++
			continue
		}
		if len(l.holders) > 0 && checkTimer == nil {
			checkTimer = workflow.NewTimer(ctx, check)
		}
		sel := workflow.NewSelector(ctx)
		l.addSignals(ctx, sel, reqCh, relCh)
		if checkTimer != nil {
			sel.AddFuture(checkTimer, func(workflow.Future) {
				checkTimer = nil
				l.dropClosed(ctx)
			})
		}
		sel.Select(ctx)
		handled++
		if handled >= lockSignalsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			l.drain(ctx, reqCh, relCh)
			return workflow.NewContinueAsNewError(ctx, api.LockWorkflowName,
				api.LockInput{Key: l.key, Holders: l.holders, Queue: l.queue, CheckEvery: in.CheckEvery})
		}
	}
}

type resourceLock struct {
	key     string
	holders []api.LockHolder
	queue   []api.LockRequest
}

// awaitIdle waits lockIdle for a signal; it reports false when none came
// (every signal delivered so far handled: the workflow may end).
func (l *resourceLock) awaitIdle(ctx workflow.Context, reqCh, relCh workflow.ReceiveChannel) bool {
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	timedOut := false
	sel := workflow.NewSelector(ctx)
	l.addSignals(ctx, sel, reqCh, relCh)
	sel.AddFuture(workflow.NewTimer(tctx, lockIdle), func(workflow.Future) { timedOut = true })
	sel.Select(ctx)
	if !timedOut {
		return true
	}
	return l.drain(ctx, reqCh, relCh)
}

// addSignals has sel handle a lock request or release, whichever comes.
func (l *resourceLock) addSignals(ctx workflow.Context, sel workflow.Selector, reqCh, relCh workflow.ReceiveChannel) {
	sel.AddReceive(reqCh, func(c workflow.ReceiveChannel, _ bool) {
		var r api.LockRequest
		c.Receive(ctx, &r)
		l.request(ctx, r)
	})
	sel.AddReceive(relCh, func(c workflow.ReceiveChannel, _ bool) {
		var r api.LockRelease
		c.Receive(ctx, &r)
		l.release(r.Owner.ID())
	})
}

// drain handles the signals already delivered; it reports whether there
// were any.
func (l *resourceLock) drain(ctx workflow.Context, reqCh, relCh workflow.ReceiveChannel) bool {
	got := false
	for {
		var r api.LockRequest
		var rel api.LockRelease
		switch {
		case reqCh.ReceiveAsync(&r):
			l.request(ctx, r)
		case relCh.ReceiveAsync(&rel):
			l.release(rel.Owner.ID())
		default:
			return got
		}
		got = true
	}
}

// request queues r, or answers a repeated one (the RequestLock activity
// may deliver it twice).
func (l *resourceLock) request(ctx workflow.Context, r api.LockRequest) {
	if r.Mode != api.LockShared {
		r.Mode = api.LockExclusive
	}
	id := r.Owner.ID()
	if slices.ContainsFunc(l.holders, func(h api.LockHolder) bool { return h.Owner.ID() == id }) {
		l.tell(ctx, r.Owner, true)
		return
	}
	if !slices.ContainsFunc(l.queue, func(q api.LockRequest) bool { return q.Owner.ID() == id }) {
		l.queue = append(l.queue, r)
	}
	if !l.grantable(r) || l.queue[0].Owner.ID() != id {
		// Queued: tell the task who holds the lock, for its timeout's
		// message and for airlock tasks show.
		l.tell(ctx, r.Owner, false)
	}
}

func (l *resourceLock) grantable(r api.LockRequest) bool {
	if len(l.holders) == 0 {
		return true
	}
	if r.Mode != api.LockShared {
		return false
	}
	return !slices.ContainsFunc(l.holders, func(h api.LockHolder) bool { return h.Mode != api.LockShared })
}

// grant grants the head of the queue while it is compatible with the
// holders. A holder whose run cannot be signalled has closed: it is
// dropped.
func (l *resourceLock) grant(ctx workflow.Context) {
	for len(l.queue) > 0 && l.grantable(l.queue[0]) {
		r := l.queue[0]
		l.queue = l.queue[1:]
		l.holders = append(l.holders, api.LockHolder{LockRequest: r, Since: workflow.Now(ctx)})
		if !l.tell(ctx, r.Owner, true) {
			l.release(r.Owner.ID())
		}
	}
}

// tell signals owner's run: granted, or queued behind the holders. It
// reports false when the run is gone.
func (l *resourceLock) tell(ctx workflow.Context, owner api.LockOwner, granted bool) bool {
	g := api.LockGrant{Key: l.key, CallID: owner.CallID, Granted: granted}
	if !granted {
		for _, h := range l.holders {
			g.Holders = append(g.Holders, h.Owner)
		}
	}
	err := workflow.SignalExternalWorkflow(ctx, owner.WorkflowID, owner.RunID, api.SignalLockGrant, g).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("lock: the requesting task is gone", "key", l.key, "task", owner.TaskID, "call", owner.CallID, "error", err)
		if !granted {
			l.queue = slices.DeleteFunc(l.queue, func(q api.LockRequest) bool { return q.Owner.ID() == owner.ID() })
		}
		return false
	}
	return true
}

func (l *resourceLock) release(id string) {
	l.holders = slices.DeleteFunc(l.holders, func(h api.LockHolder) bool { return h.Owner.ID() == id })
	l.queue = slices.DeleteFunc(l.queue, func(q api.LockRequest) bool { return q.Owner.ID() == id })
}

// dropClosed releases the holders whose task run has closed.
func (l *resourceLock) dropClosed(ctx workflow.Context) {
	if len(l.holders) == 0 {
		return
	}
	in := api.LockOwnersInput{}
	for _, h := range l.holders {
		in.Owners = append(in.Owners, h.Owner)
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var out api.LockOwnersOutput
	if err := workflow.ExecuteLocalActivity(lctx, api.LockOwnersName, in).Get(ctx, &out); err != nil {
		workflow.GetLogger(ctx).Warn("lock: could not check the holders", "key", l.key, "error", err)
		return // checked again at the next tick
	}
	for _, id := range out.Closed {
		workflow.GetLogger(ctx).Info("lock: released the lock of a task run that closed", "key", l.key)
		l.release(id)
	}
}
