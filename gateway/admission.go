package gateway

// Admission of a task's Updates (issue 28 §1). Temporal holds at most
// history.maxInFlightUpdates Updates in flight per workflow (10 by
// default); past it the server refuses the Update, the SDK retries it,
// and a burst of parallel calls in one task turned into a storm of
// refused and aborted Updates (4 calls/s, p99 15 s). So the gateway sends
// a task at most TaskConcurrency Updates at once and queues the rest in
// arrival order; past TaskBacklog waiting, a call is answered at once that
// the task is busy, naming the bound, and nothing ran. RATIONALE.md, "Why
// does the gateway queue a task's calls?".

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/metrics"
)

// The defaults of Options.TaskConcurrency and Options.TaskBacklog. The
// first stays under the embedded server's history.maxInFlightUpdates
// (internal/devserver: 64) with room for what the gateway does not count:
// calls still waiting for approval after their client got a pending
// answer, approvers' decisions, rollbacks, other replicas.
const (
	DefaultTaskConcurrency = 32
	DefaultTaskBacklog     = 256
)

// taskQueues admits each task's Updates: at most limit at once per task,
// then up to queue waiting, first come first served.
type taskQueues struct {
	limit, queue int
	mu           sync.Mutex
	tasks        map[string]*taskQueue
	// queued, when set (tests), is told of each caller that joins a
	// queue, with the queue's new length, before it waits.
	queued func(task string, waiting int)
}

// taskQueue is one task's admission: how many of its Updates are in
// flight, and who waits, oldest first.
type taskQueue struct {
	running int
	waiting []*waiter
}

// waiter is a caller waiting for its turn; ready is closed when it is
// given a slot (granted, under taskQueues.mu).
type waiter struct {
	ready   chan struct{}
	granted bool
}

func newTaskQueues(limit, queue int) *taskQueues {
	return &taskQueues{limit: max(limit, 1), queue: max(queue, 0), tasks: map[string]*taskQueue{}}
}

// BusyError is the answer to a call that the task has no room for: its
// concurrency is used up and its backlog full (Waited false), or the call's wait
// ended while it was queued. Nothing of it ran; it may be sent again.
type BusyError struct {
	Task             string
	Limit, Backlog   int // the bounds: Options.TaskConcurrency, Options.TaskBacklog
	Running, Waiting int // what the task had when the call came
	// Waited: the call was queued and its wait (the inline wait, or the
	// client) ended before its turn; false: the queue was full.
	Waited bool
	// Server, when set, is the Temporal server's refusal: the task had
	// history.maxInFlightUpdates in flight there (serverbusy.go).
	Server string
	// Principal, when set, is the caller whose share was in use while
	// other principals had calls (fairness.go): Share is
	// gateway.principal_share, Backlog DefaultPrincipalBacklog.
	Principal string
	Share     int
}

func (e *BusyError) Error() string {
	if e.Server != "" {
		return e.serverBusyText()
	}
	if e.Principal != "" {
		if e.Waited {
			return fmt.Sprintf("principal %s is busy: while other principals have calls, each runs %d calls at once at this gateway (gateway.principal_share), and this call waited its turn and was not sent; nothing ran. Call again in a moment, or make fewer calls at once.", e.Principal, e.Share)
		}
		return fmt.Sprintf("principal %s is busy: while other principals have calls, each runs %d calls at once at this gateway (gateway.principal_share), and %d of its calls already wait (the most it queues); nothing ran. Call again in a moment, or make fewer calls at once.", e.Principal, e.Share, e.Waiting)
	}
	if e.Waited {
		return fmt.Sprintf("task %s is busy: the call waited its turn behind the task's calls in flight (%d at most at once, gateway.task_concurrency) and was not sent; nothing ran. Call again in a moment, or wait for the calls you have in flight.",
			e.Task, e.Limit)
	}
	return fmt.Sprintf("task %s is busy: %d calls in flight (the most it runs at once, gateway.task_concurrency) and %d waiting (the most it queues, gateway.task_backlog = %d); nothing ran. Call again in a moment, or wait for the calls you have in flight.",
		e.Task, e.Running, e.Waiting, e.Backlog)
}

// enter waits for task's turn to send an Update, in arrival order, and
// returns the function that gives the slot back (call it once the
// Update's answer is in, or abandoned). It does not wait when the task's
// queue is full, and stops waiting when ctx ends: both a *BusyError.
func (q *taskQueues) enter(ctx context.Context, task string) (release func(), _ error) {
	q.mu.Lock()
	tq := q.tasks[task]
	if tq == nil {
		tq = &taskQueue{}
		q.tasks[task] = tq
	}
	if tq.running < q.limit && len(tq.waiting) == 0 {
		tq.running++
		q.mu.Unlock()
		return q.releaser(task), nil
	}
	if len(tq.waiting) >= q.queue {
		err := &BusyError{Task: task, Limit: q.limit, Backlog: q.queue, Running: tq.running, Waiting: len(tq.waiting)}
		q.mu.Unlock()
		metrics.TaskBusy.WithLabelValues(metrics.BusyQueueFull).Inc()
		return nil, err
	}
	w := &waiter{ready: make(chan struct{})}
	tq.waiting = append(tq.waiting, w)
	n := len(tq.waiting)
	q.mu.Unlock()
	metrics.TaskQueued.Inc()
	if q.queued != nil {
		q.queued(task, n)
	}
	select {
	case <-w.ready:
		return q.releaser(task), nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	if w.granted {
		// Its turn came as the wait ended: take it rather than lose a
		// slot; the caller sees ctx ended and answers as it would.
		q.mu.Unlock()
		return q.releaser(task), nil
	}
	if i := indexOf(tq.waiting, w); i >= 0 {
		tq.waiting = append(tq.waiting[:i], tq.waiting[i+1:]...)
	}
	q.forgetLocked(task, tq)
	q.mu.Unlock()
	metrics.TaskBusy.WithLabelValues(metrics.BusyWaited).Inc()
	return nil, &BusyError{Task: task, Limit: q.limit, Backlog: q.queue, Waited: true}
}

// releaser gives task's slot back exactly once: to the oldest waiter, or
// to the pool.
func (q *taskQueues) releaser(task string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			tq := q.tasks[task]
			if len(tq.waiting) > 0 {
				w := tq.waiting[0]
				tq.waiting = tq.waiting[1:]
				w.granted = true
				close(w.ready)
				return // the slot passes to w
			}
			tq.running--
			q.forgetLocked(task, tq)
		})
	}
}

// forgetLocked drops an idle task's entry, so the map holds only tasks
// with calls in flight.
func (q *taskQueues) forgetLocked(task string, tq *taskQueue) {
	if tq.running == 0 && len(tq.waiting) == 0 {
		delete(q.tasks, task)
	}
}

// load is how many Updates task has in flight and waiting.
func (q *taskQueues) load(task string) (running, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if tq := q.tasks[task]; tq != nil {
		return tq.running, len(tq.waiting)
	}
	return 0, 0
}

func indexOf(ws []*waiter, w *waiter) int {
	for i, x := range ws {
		if x == w {
			return i
		}
	}
	return -1
}

// LimitCheckBusy is MetaLimitCheck of a call refused because its task was
// busy; MetaLimit then names the bound (gateway.task_backlog when the
// queue was full, gateway.task_concurrency when the call's wait for a
// turn ended) and MetaRetryAfter suggests when to call again.
const LimitCheckBusy = "busy"

// busyRetryAfter is the MetaRetryAfter of a busy answer, in seconds: a
// task's calls in flight usually finish in milliseconds, but a client
// that retries at once into a full queue only adds to it.
const busyRetryAfter = 1

// admit waits for the caller's turn (principal's share, fairness.go)
// and then taskID's turn to send an Update (the queue of admission.go),
// and returns the function that gives both back. A non-nil *BusyError
// means the call must not be sent: a backlog is full, or ctx ended
// before its turn.
func (g *Gateway) admit(ctx context.Context, principal, taskID string, log zerolog.Logger) (release func(), busy *BusyError) {
	leave, err := g.fairness.enter(ctx, principal)
	if err == nil {
		// A call that starts its task (Update-with-Start: the gateway
		// knows no run of it) costs the server and worker about
		// startWeight calls in a running task: while others have calls,
		// its turn is held that many times as long (fairness.go).
		_, known := g.running.Load(taskID)
		t0 := time.Now()
		var done func()
		if done, err = g.admission.enter(ctx, taskID); err == nil {
			return func() {
				done()
				if known {
					leave()
					return
				}
				g.fairness.holdThenLeave(principal, time.Duration(startWeight-1)*time.Since(t0), leave)
			}, nil
		}
		leave()
	}
	if !errors.As(err, &busy) {
		busy = &BusyError{Task: taskID, Limit: g.admission.limit, Backlog: g.admission.queue, Waited: true}
	}
	busy.Task = taskID
	log.Info().Bool("waited", busy.Waited).Int("running", busy.Running).Int("waiting", busy.Waiting).Str("principal_busy", busy.Principal).Msg("call refused: busy")
	return nil, busy
}

// busyResult answers a call its task had no room for: an error result
// that says so in words and, in _meta, which bound and when to retry.
// It names no call ID: nothing was sent, so there is nothing to collect.
func busyResult(taskID string, b *BusyError) *mcp.CallToolResult {
	r := errorResult(taskID, "", b.Error())
	r.Meta[MetaLimitCheck] = LimitCheckBusy
	r.Meta[MetaLimit] = "gateway.task_backlog"
	switch {
	case b.Server != "":
		r.Meta[MetaLimit] = "history.maxInFlightUpdates"
	case b.Principal != "":
		r.Meta[MetaLimit] = "gateway.principal_share"
	case b.Waited:
		r.Meta[MetaLimit] = "gateway.task_concurrency"
	}
	r.Meta[MetaRetryAfter] = busyRetryAfter
	return r
}

// TaskLoad is how many Updates (tool calls, programs) this gateway has
// in flight to task and how many wait their turn.
func (g *Gateway) TaskLoad(task string) (inFlight, waiting int) {
	return g.admission.load(task)
}
