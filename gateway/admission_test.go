package gateway

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// queueWatch records each caller that joins a queue, so a test knows a
// goroutine waits before starting the next.
type queueWatch struct{ joined chan int }

func newWatchedQueues(limit, backlog int) (*taskQueues, *queueWatch) {
	q := newTaskQueues(limit, backlog)
	w := &queueWatch{joined: make(chan int, 1024)}
	q.queued = func(_ string, n int) { w.joined <- n }
	return q, w
}

// Callers past the concurrency get their turns in arrival order, each as
// one in flight finishes, and never more than the limit at once.
func TestTaskQueueAdmitsInArrivalOrder(t *testing.T) {
	const limit, waiters = 3, 20
	q, watch := newWatchedQueues(limit, waiters)
	ctx := context.Background()
	var first []func()
	for range limit {
		rel, err := q.enter(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, rel)
	}
	var mu sync.Mutex
	var order []int
	most := 0
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			rel, err := q.enter(ctx, "t")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			r, _ := q.load("t")
			mu.Lock()
			order = append(order, i)
			most = max(most, r)
			mu.Unlock()
			rel()
			rel() // a second release gives nothing back twice
		})
		if n := <-watch.joined; n != i+1 {
			t.Fatalf("waiter %d joined a queue of %d, want %d", i, n, i+1)
		}
	}
	first[0]() // one slot passes down the queue, waiter to waiter
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("turns in order %v, want arrival order", order)
		}
	}
	if most > limit {
		t.Errorf("%d in flight at once, want at most %d", most, limit)
	}
	if r, w := q.load("t"); r != limit-1 || w != 0 {
		t.Errorf("after the queue drained: %d running, %d waiting; want %d, 0", r, w, limit-1)
	}
	for _, rel := range first[1:] {
		rel()
	}
	if len(q.tasks) != 0 {
		t.Errorf("idle tasks kept: %v", q.tasks)
	}
}

// Past the backlog a caller is refused at once, with the bounds named, and
// other tasks are not affected.
func TestTaskQueueRefusesPastTheBacklog(t *testing.T) {
	q, watch := newWatchedQueues(2, 3)
	ctx := context.Background()
	var rels []func()
	for range 2 {
		rel, err := q.enter(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, rel)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			rel, err := q.enter(ctx, "t")
			if err != nil {
				t.Error(err)
				return
			}
			rel()
		})
		<-watch.joined
	}
	_, err := q.enter(ctx, "t")
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Waited || busy.Running != 2 || busy.Waiting != 3 {
		t.Fatalf("past the backlog: %#v, want a full-queue BusyError with 2 running and 3 waiting", err)
	}
	for _, want := range []string{"task t is busy", "gateway.task_concurrency", "gateway.task_backlog = 3", "nothing ran", "Call again"} {
		if !strings.Contains(busy.Error(), want) {
			t.Errorf("message %q lacks %q", busy.Error(), want)
		}
	}
	res := busyResult("t", busy)
	if !res.IsError || res.Meta[MetaLimitCheck] != LimitCheckBusy || res.Meta[MetaLimit] != "gateway.task_backlog" || res.Meta[MetaRetryAfter] == nil || res.Meta[MetaCall] != nil {
		t.Errorf("busy result %+v", res)
	}
	// Another task has its own queue.
	rel, err := q.enter(ctx, "other")
	if err != nil {
		t.Fatalf("another task: %v", err)
	}
	rel()
	for _, rel := range rels {
		rel()
	}
	wg.Wait()
	if len(q.tasks) != 0 {
		t.Errorf("idle tasks kept: %v", q.tasks)
	}
}

// A waiting caller whose context ends leaves the queue: it is answered
// busy (waited), its place goes to the next, and it never takes a slot.
func TestTaskQueueCancelledWaiterReleasesItsPlace(t *testing.T) {
	q, watch := newWatchedQueues(1, 2)
	bg := context.Background()
	hold, err := q.enter(bg, "t")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(bg)
	gone := make(chan error, 1)
	go func() {
		rel, err := q.enter(cctx, "t")
		if rel != nil {
			rel()
		}
		gone <- err
	}()
	<-watch.joined
	got := make(chan struct{})
	go func() {
		rel, err := q.enter(bg, "t")
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		rel()
		close(got)
	}()
	if n := <-watch.joined; n != 2 {
		t.Fatalf("second waiter joined a queue of %d, want 2", n)
	}
	// The backlog (2) is full; the cancelled waiter's leaving makes room.
	if _, err := q.enter(bg, "t"); err == nil {
		t.Fatal("a third waiter was admitted past a backlog of 2")
	}
	cancel()
	var busy *BusyError
	if err := <-gone; !errors.As(err, &busy) || !busy.Waited {
		t.Fatalf("cancelled waiter: %v, want a waited BusyError", err)
	}
	if !strings.Contains(busy.Error(), "waited its turn") || busyResult("t", busy).Meta[MetaLimit] != "gateway.task_concurrency" {
		t.Errorf("waited answer %q", busy.Error())
	}
	if r, w := q.load("t"); r != 1 || w != 1 {
		t.Fatalf("after the cancel: %d running, %d waiting; want 1, 1", r, w)
	}
	hold() // the slot goes to the remaining waiter, not the cancelled one
	<-got
	if len(q.tasks) != 0 {
		t.Errorf("idle tasks kept: %v", q.tasks)
	}
}
