package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// Lock wait metrics, recorded through the workflow's metrics handler
// (which records nothing while replaying): a counter by result (granted,
// timeout, cancelled, failed) and the wait in seconds.
const (
	metricLockWaits    = "airlock_lock_waits_total"
	metricLockWaitTime = "airlock_lock_wait_seconds"
)

// taskLocks is the lock state of a task (fields of task).
type taskLocks struct {
	listening bool
	// grants holds the last answer of each lock workflow, by call and key.
	grants map[string]api.LockGrant
	// list is what the task holds and waits for, in request order.
	list []api.TaskLock
}

func grantKey(callID, key string) string { return callID + "\x00" + key }

// listenLocks starts, once per run, the goroutine that takes lock
// workflows' answers.
func (t *task) listenLocks(ctx workflow.Context) {
	if t.locks.listening {
		return
	}
	t.locks.listening = true
	t.locks.grants = map[string]api.LockGrant{}
	ch := workflow.GetSignalChannel(ctx, api.SignalLockGrant)
	// Started by the first locked call's handler; it must outlive that
	// call, and the task's cancellation (whose rollback may take locks).
	lctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(lctx, func(ctx workflow.Context) {
		for {
			var g api.LockGrant
			if !ch.Receive(ctx, &g) {
				return
			}
			k := grantKey(g.CallID, g.Key)
			i := slices.IndexFunc(t.locks.list, func(l api.TaskLock) bool { return l.CallID == g.CallID && l.Key == g.Key })
			if i < 0 {
				continue // an answer to a request given up
			}
			if prev, ok := t.locks.grants[k]; ok && prev.Granted && !g.Granted {
				continue // granted already: a late "queued" changes nothing
			}
			t.locks.grants[k] = g
			if !g.Granted {
				t.locks.list[i].Holders = g.Holders
			}
		}
	})
}

// acquireLocks takes the call's locks before it runs. It returns the
// function that releases them (call it when the call ends, whatever its
// outcome), or the call's result when it must not run: a lock not granted
// within the tool's lock timeout (OutcomeLocked, naming the lock and its
// holder), or the task cancelled while waiting. A compensable call's
// compensation entry keeps its locks, so that its compensation takes them too.
func (t *task) acquireLocks(ctx workflow.Context, req api.CallRequest, out api.DecideOutput) (func(), *api.CallResult) {
	if len(out.Locks) == 0 || workflow.GetVersion(ctx, changeLocks, workflow.DefaultVersion, 1) < 1 {
		return func() {}, nil
	}
	// The wait ends early if the client cancels the call (cancel.go).
	wctx, done := t.callContext(ctx, req.CallID)
	release, stop := t.acquire(ctx, wctx, req.CallID, req.Tool, out.Locks, out.LockTimeout)
	if stop != nil {
		done()
		return nil, stop
	}
	// Not cancelled: the wait's timer stays as it is (cancelling it would
	// be a command of its own); execute gets a context of its own.
	delete(t.callCancels, req.CallID)
	return func() {
		for i := range t.compensations {
			if e := &t.compensations[i]; e.CallID == req.CallID {
				e.Locks, e.LockTimeout = out.Locks, out.LockTimeout
			}
		}
		release()
	}, nil
}

// lockUndo takes the locks of the call a compensation entry undoes, for
// its compensation (call api.CompensationID(CallID), "undo-<CallID>"). It returns why the compensation
// must not run now ("" when it may).
func (t *task) lockUndo(ctx workflow.Context, e *api.CompensationEntry) (func(), string) {
	if len(e.Locks) == 0 || workflow.GetVersion(ctx, changeLocks, workflow.DefaultVersion, 1) < 1 {
		return func() {}, ""
	}
	tool := e.Tool
	if e.Compensation != nil {
		tool = e.Compensation.Tool
	}
	release, stop := t.acquire(ctx, ctx, api.CompensationID(e.CallID), tool, e.Locks, e.LockTimeout)
	if stop != nil {
		return nil, stop.Reason
	}
	return release, ""
}

// acquire takes locks (sorted by key) for call callID of tool, waiting at
// most timeout for all of them, or until wctx is cancelled; ctx is the
// call's, for the release.
func (t *task) acquire(ctx, wctx workflow.Context, callID, tool string, locks []api.LockKey, timeout time.Duration) (func(), *api.CallResult) {
	req := api.CallRequest{CallID: callID, Tool: tool}
	t.listenLocks(ctx)
	info := workflow.GetInfo(ctx)
	owner := api.LockOwner{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		TaskID: t.in.TaskID, CallID: req.CallID, Tool: req.Tool}
	var asked []string
	release := func() {
		// Also after the task was cancelled: a disconnected context.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		for _, key := range asked {
			err := workflow.SignalExternalWorkflow(dctx, api.LockWorkflowID(key), "", api.SignalLockRelease,
				api.LockRelease{Key: key, Owner: owner}).Get(dctx, nil)
			if err != nil {
				// The lock workflow is gone (terminated): nothing to release.
				workflow.GetLogger(ctx).Warn("lock: release not delivered", "key", key, "call", req.CallID, "error", err)
			}
			delete(t.locks.grants, grantKey(req.CallID, key))
		}
		t.locks.list = slices.DeleteFunc(t.locks.list, func(l api.TaskLock) bool { return l.CallID == req.CallID })
	}
	if timeout <= 0 {
		timeout = api.DefaultLockTimeout
	}
	deadline := workflow.Now(ctx).Add(timeout)
	for _, lk := range locks {
		since := workflow.Now(ctx)
		t.locks.list = append(t.locks.list, api.TaskLock{Key: lk.Key, Mode: lk.Mode, CallID: req.CallID, Tool: req.Tool,
			State: api.LockWaiting, Since: since})
		asked = append(asked, lk.Key)
		if stop := t.waitLock(ctx, wctx, owner, req, lk, since, deadline, timeout); stop != nil {
			release()
			return nil, stop
		}
	}
	return release, nil
}

// waitLock asks lk's lock workflow for it, as owner, and waits until it is
// granted, deadline passes or wctx is cancelled. A non-nil result is why
// req does not run; the caller then releases what it asked for.
func (t *task) waitLock(ctx, wctx workflow.Context, owner api.LockOwner, req api.CallRequest, lk api.LockKey, since, deadline time.Time, timeout time.Duration) *api.CallResult {
	actxOpts := workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5, InitialInterval: 200 * time.Millisecond},
		Summary:             "lock",
	}
	metrics := workflow.GetMetricsHandler(ctx)
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(wctx, actxOpts), api.RequestLockName, api.LockRequest{Key: lk.Key, Mode: lk.Mode, Owner: owner, At: since}).Get(ctx, nil)
	if err != nil {
		metrics.WithTags(map[string]string{"result": "failed"}).Counter(metricLockWaits).Inc(1)
		if temporal.IsCanceledError(err) || wctx.Err() != nil {
			return &api.CallResult{Outcome: api.OutcomeCancelled,
				Reason: fmt.Sprintf("%s did not run: it was cancelled while it asked for lock %q; nothing was changed", req.Tool, lk.Key)}
		}
		return &api.CallResult{Outcome: api.OutcomeFailed,
			Reason: fmt.Sprintf("%s did not run: airlock could not ask for lock %q (%v); nothing was changed", req.Tool, lk.Key, err)}
	}
	k := grantKey(req.CallID, lk.Key)
	granted := func() bool { return t.locks.grants[k].Granted }
	var got bool
	if left := deadline.Sub(workflow.Now(ctx)); left > 0 {
		got, err = workflow.AwaitWithTimeout(wctx, left, granted)
	} else {
		// The earlier locks took the whole timeout: no timer; take
		// this one only if it was granted already.
		got = granted()
	}
	waited := workflow.Now(ctx).Sub(since)
	switch {
	case err != nil:
		metrics.WithTags(map[string]string{"result": "cancelled"}).Counter(metricLockWaits).Inc(1)
		return &api.CallResult{Outcome: api.OutcomeCancelled,
			Reason: fmt.Sprintf("%s did not run: it was cancelled while it waited for lock %q; nothing was changed", req.Tool, lk.Key)}
	case !got:
		metrics.WithTags(map[string]string{"result": "timeout"}).Counter(metricLockWaits).Inc(1)
		metrics.WithTags(map[string]string{"result": "timeout"}).Timer(metricLockWaitTime).Record(waited)
		return &api.CallResult{Outcome: api.OutcomeLocked, Reason: lockedReason(req.Tool, lk, timeout, t.locks.grants[k].Holders)}
	}
	metrics.WithTags(map[string]string{"result": "granted"}).Counter(metricLockWaits).Inc(1)
	metrics.WithTags(map[string]string{"result": "granted"}).Timer(metricLockWaitTime).Record(waited)
	for i := range t.locks.list {
		if l := &t.locks.list[i]; l.CallID == req.CallID && l.Key == lk.Key {
			l.State, l.Since, l.Holders = api.LockHeld, workflow.Now(ctx), nil
		}
	}
	return nil
}

// lockedReason says why a call did not get its lock, naming who holds it.
func lockedReason(tool string, lk api.LockKey, timeout time.Duration, holders []api.LockOwner) string {
	who := "another call"
	if len(holders) > 0 {
		var names []string
		for _, h := range holders {
			names = append(names, fmt.Sprintf("task %s (call %s, %s)", h.TaskID, h.CallID, h.Tool))
		}
		who = strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s did not run: lock %q (%s) is held by %s, and was not released within the lock timeout of %s; nothing was changed. Try again later, or look at that task: airlock tasks show %s",
		tool, lk.Key, lk.Mode, who, timeout, firstTask(holders))
}

func firstTask(holders []api.LockOwner) string {
	if len(holders) == 0 {
		return "TASK"
	}
	return holders[0].TaskID
}

// lockList is what Status.Locks shows.
func (t *task) lockList() []api.TaskLock {
	if len(t.locks.list) == 0 {
		return nil
	}
	out := make([]api.TaskLock, len(t.locks.list))
	for i, l := range t.locks.list {
		l.Holders = slices.Clone(l.Holders)
		out[i] = l
	}
	return out
}
