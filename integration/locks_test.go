package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// lockedTools is testupstream with resource locks (issue 16 §4): append
// is a compensable write locking "file:<key>"; put takes the same lock and
// gives up after 1s; wait and content take it shared.
const lockedTools = `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  append:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: false
    timeout: 60s
    capture: {tool: echo, args: {text: args.key}}
    compensation: {tool: put, args: {key: '"undo-" + args.key'}}
    locks: ['"file:" + args.key']
  put:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: true
    timeout: 60s
    locks: ['"file:" + args.key']
    lock_timeout: 1s
  wait:
    side_effects: [none]
    data_access_level: public
    risk: medium
    idempotent: false
    timeout: 60s
    heartbeat_timeout: 4s
    locks: [{key: '"file:" + args.key', mode: shared}]
  content:
    side_effects: [read]
    data_access_level: public
    risk: medium
    idempotent: true
    locks: [{key: '"file:" + args.key', mode: shared}]
`

// lockCall calls name through cs in the background, until ctx ends.
func lockCall(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) <-chan asyncResult {
	ch := make(chan asyncResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		ch <- asyncResult{res, err}
	}()
	return ch
}

func awaitCall(t *testing.T, what string, ch <-chan asyncResult) *mcp.CallToolResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.res
	case <-time.After(90 * time.Second):
		t.Fatalf("%s: no answer in 90s", what)
	}
	return nil
}

func notDone(ch <-chan asyncResult) bool { return len(ch) == 0 }

// taskOf is the task a session's calls run in.
func taskOf(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	res := call(t, cs, "counter__echo", map[string]any{"text": "hello"}, "")
	id, _ := res.Meta[gateway.MetaTask].(string)
	if id == "" {
		t.Fatalf("no task in %v", res.Meta)
	}
	return id
}

func lockStatus(t *testing.T, c client.Client, id string) api.Status {
	t.Helper()
	var st api.Status
	q, err := c.QueryWorkflow(context.Background(), id, "", api.QueryStatus)
	if err == nil {
		err = q.Get(&st)
	}
	if err != nil {
		t.Fatalf("status of %s: %v", id, err)
	}
	return st
}

func hasLock(st api.Status, state, key string) (api.TaskLock, bool) {
	i := slices.IndexFunc(st.Locks, func(l api.TaskLock) bool { return l.State == state && l.Key == key })
	if i < 0 {
		return api.TaskLock{}, false
	}
	return st.Locks[i], true
}

// callSpan is when a call's capture started and when its last activity
// (the write) completed, and when its lock was released, from its task's
// history.
type callSpan struct {
	firstScheduled, lastCompleted, released time.Time
}

// spanOf reads the span of the call of tool in task id's history: from
// the first activity scheduled after the call's lock was granted to the
// release signal sent when it ended.
func spanOf(t *testing.T, c client.Client, id, tool string) callSpan {
	t.Helper()
	h := fetchHistory(t, c, id, "")
	var sp callSpan
	granted := false
	for _, ev := range h.Events {
		at := ev.GetEventTime().AsTime()
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			if ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == api.SignalLockGrant &&
				strings.Contains(string(ev.GetWorkflowExecutionSignaledEventAttributes().GetInput().GetPayloads()[0].GetData()), `"Granted":true`) {
				granted = true
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := ev.GetActivityTaskScheduledEventAttributes()
			if granted && sp.firstScheduled.IsZero() && a.GetActivityType().GetName() == api.CallToolName {
				sp.firstScheduled = at
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			if granted && sp.released.IsZero() {
				sp.lastCompleted = at
			}
		case enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
			if granted && sp.released.IsZero() && ev.GetSignalExternalWorkflowExecutionInitiatedEventAttributes().GetSignalName() == api.SignalLockRelease {
				sp.released = at
			}
		}
	}
	if sp.firstScheduled.IsZero() || sp.lastCompleted.IsZero() || sp.released.IsZero() {
		t.Fatalf("task %s: no locked call of %s in its history: %+v", id, tool, sp)
	}
	return sp
}

// TestLocksAcrossTasks runs three tasks through the gateway on the real
// embedded Temporal and testupstream: A and B write the same key, C
// another. B waits while A holds the lock (both tasks show it), C runs
// while A holds its lock, and B's capture starts only after A's write
// ended and released it. A call that cannot get its lock within its lock
// timeout is refused naming the lock and the task holding it; shared
// holders run together; a cancelled call releases its lock. A rollback's
// compensation waits for the lock of the call it undoes. Histories of the
// tasks and of a lock workflow are recorded (-record: locks_v1, lock_v1).
func TestLocksAcrossTasks(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, lockedTools)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	ctx := context.Background()
	csA, csB, csC := s.connect(t, nil), s.connect(t, nil), s.connect(t, nil)
	waitTools(t, csA, "counter__append", "counter__put", "counter__wait", "counter__content")
	taskA, taskB, taskC := taskOf(t, csA), taskOf(t, csB), taskOf(t, csC)

	// A holds file:f1 for a while; B asks for it too.
	a := lockCall(ctx, csA, "counter__append", map[string]any{"key": "f1", "sleep_ms": 4000})
	waitFor(t, "A's write to reach the upstream", 30*time.Second, func() bool { return sideEffects(t, effects, "append", "f1") == 1 })
	b := lockCall(ctx, csB, "counter__append", map[string]any{"key": "f1"})
	waitFor(t, "B to wait for file:f1 behind A", 30*time.Second, func() bool {
		l, ok := hasLock(lockStatus(t, s.client, taskB), api.LockWaiting, "file:f1")
		return ok && len(l.Holders) == 1 && l.Holders[0].TaskID == taskA
	})
	if _, ok := hasLock(lockStatus(t, s.client, taskA), api.LockHeld, "file:f1"); !ok {
		t.Fatalf("A's status does not show file:f1 held: %+v", lockStatus(t, s.client, taskA).Locks)
	}
	// C, on another key, is not held up by A: it ends while A still runs.
	if res := call(t, csC, "counter__append", map[string]any{"key": "f2"}, ""); res.IsError {
		t.Fatalf("C: %s", text(res))
	}
	if !notDone(a) || !notDone(b) {
		t.Fatal("A or B ended before C: C's call was not concurrent with A's lock")
	}
	for name, ch := range map[string]<-chan asyncResult{"A": a, "B": b} {
		if res := awaitCall(t, name, ch); res.IsError {
			t.Fatalf("%s: %s", name, text(res))
		}
	}
	spA, spB := spanOf(t, s.client, taskA, "append"), spanOf(t, s.client, taskB, "append")
	if !spA.lastCompleted.After(spA.firstScheduled) || spB.firstScheduled.Before(spA.released) || spB.firstScheduled.Before(spA.lastCompleted) {
		t.Errorf("capture→write of A and B interleave: A %+v, B %+v", spA, spB)
	}
	if got := sideEffectLines(t, effects); !slices.Equal(got, []string{"append f1", "append f2", "append f1"}) {
		t.Errorf("upstream side effects %q, want A's f1, C's f2, then B's f1", got)
	}
	if st := lockStatus(t, s.client, taskA); len(st.Locks) != 0 {
		t.Errorf("A still lists locks after its call: %+v", st.Locks)
	}

	// Shared: two readers at once; a writer gives up after its lock
	// timeout, naming the lock and the holder.
	waitCtx, cancelWait := context.WithCancel(ctx)
	defer cancelWait()
	w := lockCall(waitCtx, csA, "counter__wait", map[string]any{"key": "g"})
	waitFor(t, "A's wait to start", 30*time.Second, func() bool { return sideEffects(t, effects, "wait-started", "g") == 1 })
	if res := call(t, csC, "counter__content", map[string]any{"key": "g"}, ""); res.IsError {
		t.Fatalf("a second shared holder did not run: %s", text(res))
	}
	locked := call(t, csB, "counter__put", map[string]any{"key": "g"}, "")
	if !locked.IsError || !strings.Contains(text(locked), `lock "file:g"`) || !strings.Contains(text(locked), "task "+taskA) {
		t.Fatalf("put while A holds file:g: isError=%v %q, want the lock and task %s named", locked.IsError, text(locked), taskA)
	}
	if sideEffects(t, effects, "put", "g") != 0 {
		t.Fatal("the refused put ran")
	}
	st := lockStatus(t, s.client, taskB)
	if r := st.Recent[len(st.Recent)-1]; r.Outcome != api.OutcomeLocked {
		t.Errorf("B records the refused put as %q, want %q", r.Outcome, api.OutcomeLocked)
	}
	// A client that gives up on a call waiting for its lock cancels the
	// wait: the call ends (cancelled, nothing ran) and its request is
	// withdrawn.
	bctx, cancelB := context.WithCancel(ctx)
	bw := lockCall(bctx, csB, "counter__append", map[string]any{"key": "g"})
	waitFor(t, "B to wait for file:g", 30*time.Second, func() bool {
		_, ok := hasLock(lockStatus(t, s.client, taskB), api.LockWaiting, "file:g")
		return ok
	})
	cancelB()
	<-bw
	waitFor(t, "B's cancelled call to end", 30*time.Second, func() bool {
		st := lockStatus(t, s.client, taskB)
		return len(st.Locks) == 0 && len(st.InFlight) == 0
	})
	if st := lockStatus(t, s.client, taskB); st.Recent[len(st.Recent)-1].Outcome != api.OutcomeCancelled {
		t.Errorf("B's call cancelled while waiting for its lock: %+v", st.Recent[len(st.Recent)-1])
	}
	if sideEffects(t, effects, "append", "g") != 0 {
		t.Fatal("the call cancelled while waiting for its lock ran")
	}

	cancelWait() // the client cancels: the call ends, its lock is released
	<-w
	waitFor(t, "the cancelled wait to release file:g", 30*time.Second, func() bool { return len(lockStatus(t, s.client, taskA).Locks) == 0 })
	if res := call(t, csB, "counter__put", map[string]any{"key": "g"}, ""); res.IsError {
		t.Fatalf("put after the release: %s", text(res))
	}

	// A rollback's compensation (put undo-f1) takes the lock of the call
	// it undoes: it waits while B holds file:f1 again.
	b2 := lockCall(ctx, csB, "counter__append", map[string]any{"key": "f1", "sleep_ms": 3000})
	waitFor(t, "B's second write to reach the upstream", 30*time.Second, func() bool { return sideEffects(t, effects, "append", "f1") == 3 })
	rb := make(chan error, 1)
	go func() {
		h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: taskA, UpdateID: "rb-locks",
			UpdateName: api.UpdateRollback, Args: []any{api.RollbackRequest{By: "tester"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
		var res api.RollbackResult
		if err == nil {
			err = h.Get(ctx, &res)
		}
		if err == nil && res.State != api.StateRolledBack {
			err = fmt.Errorf("rollback: %s (%s)", res.State, res.Reason)
		}
		rb <- err
	}()
	if res := awaitCall(t, "B's second write", b2); res.IsError {
		t.Fatalf("B's second write: %s", text(res))
	}
	if err := <-rb; err != nil {
		t.Fatal(err)
	}
	lines := sideEffectLines(t, effects)
	lastB := -1
	for i, l := range lines {
		if l == "append f1" {
			lastB = i
		}
	}
	if i := slices.Index(lines, "put undo-f1"); i < 0 || i < lastB {
		t.Errorf("A's compensation did not wait for B's write: %q", lines)
	}

	lockQueueOrder(t, s.client, taskA, taskB, taskC)

	for _, id := range []string{taskA, taskB, taskC} {
		if err := s.client.SignalWorkflow(ctx, id, "", api.SignalFinish, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.client.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	for id, name := range map[string]string{taskA: "locks_v1", taskB: "locks_v1_waiter", api.LockWorkflowID("file:f1"): "lock_v1"} {
		d, err := s.client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		replayRuns(t, s, id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), name)
	}
}

// sideEffectLines is the upstream's side-effect log, line by line.
func sideEffectLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestLocksSurviveKill runs `airlock dev` and kills it with SIGKILL while
// task A holds a lock that task B waits for. A worker that dies does not
// close A's workflow: after the restart A's interrupted call is resolved
// (unknown outcome, not re-run: append is not idempotent), it releases
// the lock as any ended call does, and B's call proceeds. Then a holder
// whose task is terminated (it will never release) loses its lock at the
// lock workflow's next check of its holders, and the next waiter runs.
// `airlock tasks show` lists the held and the awaited lock; /metrics
// counts the waits.
func TestLocksSurviveKill(t *testing.T) {
	t.Parallel()
	d := newCounterDev(t, `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  append:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: false
    timeout: 120s
    locks: ['"file:" + args.key']
    lock_timeout: 120s
`)
	writeFile(t, d.dir+"/airlock.yaml", "manifests: [counter.yaml]\n"+identityYAML)
	args, base, temporalAddr := d.devArgs(t)
	p := startDev(t, d.bin, args...)
	p.waitHealthy(t, base)
	csA, csB := connectURL(t, base+"/mcp", nil), connectURL(t, base+"/mcp", nil)
	waitTools(t, csA, "counter__append")
	taskA, taskB := taskOf(t, csA), taskOf(t, csB)
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: quietSDKLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	send := func(cs *mcp.ClientSession, key, idem string, sleepMS int) <-chan asyncResult {
		ch := make(chan asyncResult, 1)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": key, "sleep_ms": sleepMS},
				Meta: mcp.Meta{gateway.MetaIdempotencyKey: idem}})
			ch <- asyncResult{res, err}
		}()
		return ch
	}
	_ = send(csA, "f", "a1", 60000)
	waitFor(t, "A's write to reach the upstream", 30*time.Second, func() bool { return sideEffects(t, d.effects, "append", "f") == 1 })
	_ = send(csB, "f", "b1", 0)
	waitFor(t, "B to wait for file:f", 30*time.Second, func() bool {
		_, ok := hasLock(lockStatus(t, c, taskB), api.LockWaiting, "file:f")
		return ok
	})
	out, code := runAirlock(t, d.bin, "tasks", "show", "--temporal-address", temporalAddr, taskB)
	if code != 0 || !strings.Contains(out, "locks:") || !strings.Contains(out, "waiting") || !strings.Contains(out, "file:f") || !strings.Contains(out, "held by task "+taskA) {
		t.Errorf("airlock tasks show %s (exit %d) does not list the awaited lock and its holder:\n%s", taskB, code, out)
	}

	// kill -9 while A holds file:f.
	killed := time.Now()
	p = restartDev(t, p, d.bin, base, args)
	t.Logf("kill -9 to healthy again: %s", time.Since(killed).Round(time.Millisecond))
	waitFor(t, "B's write to run after the restart", 60*time.Second, func() bool { return sideEffects(t, d.effects, "append", "f") == 2 })
	t.Logf("kill -9 to the waiter's write: %s", time.Since(killed).Round(time.Millisecond))
	if n := sideEffects(t, d.effects, "append", "f"); n != 2 {
		t.Fatalf("append f ran %d times, want 2 (A once, not re-run; B once)", n)
	}
	csA2 := connectURL(t, base+"/mcp", map[string]string{gateway.HeaderTask: taskA})
	csB2 := connectURL(t, base+"/mcp", map[string]string{gateway.HeaderTask: taskB})
	if res := call(t, csA2, "counter__append", map[string]any{"key": "f", "sleep_ms": 60000}, "a1"); !res.IsError {
		t.Errorf("A's interrupted call: %q, want its unknown outcome", text(res))
	}
	if res := call(t, csB2, "counter__append", map[string]any{"key": "f"}, "b1"); res.IsError {
		t.Errorf("B's call after the restart: %s", text(res))
	}
	var ls api.LockState
	if q, err := c.QueryWorkflow(ctx, api.LockWorkflowID("file:f"), "", api.QueryLock); err != nil || q.Get(&ls) != nil || len(ls.Holders)+len(ls.Queue) != 0 {
		t.Errorf("lock file:f after both calls: %+v %v", ls, err)
	}

	// A holder whose task is terminated never releases: the lock workflow
	// notices at its next check (api.DefaultLockCheck) and grants the next.
	_ = send(csA2, "h", "a2", 100000)
	waitFor(t, "A's second write to reach the upstream", 30*time.Second, func() bool { return sideEffects(t, d.effects, "append", "h") == 1 })
	b2 := send(csB2, "h", "b2", 0)
	waitFor(t, "B to wait for file:h", 30*time.Second, func() bool {
		_, ok := hasLock(lockStatus(t, c, taskB), api.LockWaiting, "file:h")
		return ok
	})
	terminated := time.Now()
	if err := c.TerminateWorkflow(ctx, taskA, "", "test: a holder that never releases"); err != nil {
		t.Fatal(err)
	}
	if res := awaitCall(t, "B's call after A was terminated", b2); res.IsError {
		t.Fatalf("B's call after A was terminated: %s", text(res))
	}
	t.Logf("holder terminated to the waiter's result: %s (check every %s)", time.Since(terminated).Round(time.Millisecond), api.DefaultLockCheck)

	// Recorded (-record): the holder killed under its call and then
	// terminated, and the lock workflow that released a closed holder.
	for id, name := range map[string]string{taskA: "locks_v1_killed", api.LockWorkflowID("file:h"): "lock_v1_closed"} {
		desc, err := c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		replayClientRuns(t, c, id, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), name)
	}

	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `airlock_lock_waits_total{`) || !strings.Contains(string(body), `airlock_lock_wait_seconds_bucket{`) {
		t.Errorf("/metrics has no lock wait series:\n%s", grepLines(string(body), "lock"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// lockQueueOrder drives a lock workflow directly, on behalf of three
// running tasks, and checks its queue: a reader holds; a writer waits; a
// second reader queues behind the writer rather than joining the first
// (a writer is not starved by a stream of readers); each release grants
// the head of the queue; a repeated request changes nothing.
func lockQueueOrder(t *testing.T, c client.Client, tasks ...string) {
	t.Helper()
	ctx := context.Background()
	const key = "queue:order"
	owner := func(i int) api.LockOwner {
		d, err := c.DescribeWorkflowExecution(ctx, tasks[i], "")
		if err != nil {
			t.Fatal(err)
		}
		return api.LockOwner{WorkflowID: tasks[i], RunID: d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), TaskID: tasks[i], CallID: fmt.Sprintf("q%d", i)}
	}
	r1, w, r2 := owner(0), owner(1), owner(2)
	request := func(o api.LockOwner, mode string) {
		t.Helper()
		_, err := c.SignalWithStartWorkflow(ctx, api.LockWorkflowID(key), api.SignalLockRequest, api.LockRequest{Key: key, Mode: mode, Owner: o},
			client.StartWorkflowOptions{ID: api.LockWorkflowID(key), TaskQueue: api.DefaultTaskQueue}, api.LockWorkflowName, api.LockInput{Key: key})
		if err != nil {
			t.Fatal(err)
		}
	}
	release := func(o api.LockOwner) {
		t.Helper()
		if err := c.SignalWorkflow(ctx, api.LockWorkflowID(key), "", api.SignalLockRelease, api.LockRelease{Key: key, Owner: o}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(st api.LockState) (holders, queue []string) {
		for _, h := range st.Holders {
			holders = append(holders, h.Owner.CallID)
		}
		for _, q := range st.Queue {
			queue = append(queue, q.Owner.CallID)
		}
		return holders, queue
	}
	expect := func(what string, holders, queue []string) {
		t.Helper()
		waitFor(t, what, 30*time.Second, func() bool {
			var st api.LockState
			q, err := c.QueryWorkflow(ctx, api.LockWorkflowID(key), "", api.QueryLock)
			if err != nil || q.Get(&st) != nil {
				return false
			}
			h, qu := ids(st)
			return slices.Equal(h, holders) && slices.Equal(qu, queue)
		})
	}
	request(r1, api.LockShared)
	expect("the first reader to hold", []string{"q0"}, nil)
	request(w, api.LockExclusive)
	request(r2, api.LockShared)
	request(r1, api.LockShared) // a repeat (an activity retried)
	expect("the writer and then the second reader to queue", []string{"q0"}, []string{"q1", "q2"})
	release(r1)
	expect("the writer to hold", []string{"q1"}, []string{"q2"})
	release(w)
	expect("the second reader to hold", []string{"q2"}, nil)
	release(r2)
	expect("the lock to be free", nil, nil)
}
