package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a principalGate's clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testGate is a gate of share and backlog with a fake clock, an hour's
// window (so only the clock ends a principal's activity) and a hook
// reporting each caller that starts to wait.
func testGate(share, backlog int) (*principalGate, *fakeClock, chan string) {
	g := newPrincipalGate(share, backlog)
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	g.now, g.window, g.lease = clk.now, time.Hour, 0
	queued := make(chan string, 1024)
	g.queued = func(p string, _ int) { queued <- p }
	return g, clk, queued
}

// enterAsync enters the gate in a goroutine; the channel gets its release
// (or nil, with the error on errs).
func enterAsync(ctx context.Context, g *principalGate, p string, errs chan<- error) <-chan func() {
	got := make(chan func(), 1)
	go func() {
		rel, err := g.enter(ctx, p)
		if err != nil {
			errs <- err
		}
		got <- rel
	}()
	return got
}

func mustEnter(t *testing.T, g *principalGate, p string) func() {
	t.Helper()
	rel, err := g.enter(context.Background(), p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return rel
}

func TestPrincipalGateAloneIsUnbounded(t *testing.T) {
	g, _, _ := testGate(2, 4)
	var rels []func()
	for range 50 {
		rels = append(rels, mustEnter(t, g, "alice"))
	}
	if r, w := g.load("alice"); r != 50 || w != 0 {
		t.Fatalf("alice alone: %d running, %d waiting; want 50, 0", r, w)
	}
	for _, rel := range rels {
		rel()
		rel() // a second release changes nothing
	}
	if r, _ := g.load("alice"); r != 0 {
		t.Fatalf("after the releases alice has %d running", r)
	}
}

func TestPrincipalGateSharesWhileContended(t *testing.T) {
	g, clk, queued := testGate(2, 100)
	bob := mustEnter(t, g, "bob") // bob is active
	a1, a2 := mustEnter(t, g, "alice"), mustEnter(t, g, "alice")
	errs := make(chan error, 10)
	// alice's third and fourth wait: bob has calls.
	w3 := enterAsync(context.Background(), g, "alice", errs)
	<-queued
	w4 := enterAsync(context.Background(), g, "alice", errs)
	<-queued
	if r, w := g.load("alice"); r != 2 || w != 2 {
		t.Fatalf("alice beside bob: %d running, %d waiting; want 2, 2", r, w)
	}
	// bob is never held behind alice's queue: up to his share at once.
	bob2 := mustEnter(t, g, "bob")
	bob2()
	// One of alice's finishes: her oldest waiter takes the turn.
	a1()
	rel3 := <-w3
	if rel3 == nil {
		t.Fatal(<-errs)
	}
	select {
	case <-w4:
		t.Fatal("alice's fourth call ran beside three of hers while bob was active")
	default:
	}
	// bob's last call ends, but he counts as active for the window.
	bob()
	if r, w := g.load("alice"); r != 2 || w != 1 {
		t.Fatalf("within bob's window: alice %d running, %d waiting; want 2, 1", r, w)
	}
	// Past it alice is alone again: her waiter runs.
	clk.add(time.Hour + time.Second)
	g.expire()
	rel4 := <-w4
	if rel4 == nil {
		t.Fatal(<-errs)
	}
	if r, w := g.load("alice"); r != 3 || w != 0 {
		t.Fatalf("alice alone again: %d running, %d waiting; want 3, 0", r, w)
	}
	a2()
	rel3()
	rel4()
	if r, w := g.load("alice"); r != 0 || w != 0 {
		t.Fatalf("at the end alice has %d running, %d waiting", r, w)
	}
}

// The timer, not only a release, lets waiters run once the other
// principal stops counting as active.
func TestPrincipalGateTimerEndsTheShare(t *testing.T) {
	g := newPrincipalGate(1, 10)
	g.window, g.lease = 20*time.Millisecond, 0
	bob := mustEnter(t, g, "bob")
	a := mustEnter(t, g, "alice")
	errs := make(chan error, 1)
	w := enterAsync(context.Background(), g, "alice", errs)
	bob() // bob is done; nobody releases anything after this
	select {
	case rel := <-w:
		if rel == nil {
			t.Fatal(<-errs)
		}
		rel()
	case <-time.After(time.Minute):
		t.Fatal("alice's waiting call never ran after bob's window ended")
	}
	a()
}

// A call that goes on past the lease (waiting for approval, a slow tool)
// stops counting, and the principal's next call runs.
func TestPrincipalGateLease(t *testing.T) {
	g := newPrincipalGate(1, 10)
	g.window, g.lease = time.Hour, 20*time.Millisecond
	bob := mustEnter(t, g, "bob")
	defer bob()
	held := mustEnter(t, g, "alice") // never given back by its caller before the end
	errs := make(chan error, 1)
	w := enterAsync(context.Background(), g, "alice", errs)
	select {
	case rel := <-w:
		if rel == nil {
			t.Fatal(<-errs)
		}
		rel()
	case <-time.After(time.Minute):
		t.Fatal("alice's next call never ran after her first one's lease")
	}
	held() // after its lease: changes nothing
	if r, w := g.load("alice"); r != 0 || w != 0 {
		t.Fatalf("alice at the end: %d running, %d waiting", r, w)
	}
}

func TestPrincipalGateBacklogAndCancel(t *testing.T) {
	g, _, queued := testGate(1, 2)
	bob := mustEnter(t, g, "bob")
	defer bob()
	a := mustEnter(t, g, "alice")
	errs := make(chan error, 10)
	ctx, cancel := context.WithCancel(context.Background())
	w1 := enterAsync(ctx, g, "alice", errs)
	<-queued
	w2 := enterAsync(context.Background(), g, "alice", errs)
	<-queued
	// The backlog is full: answered at once, naming the bound.
	_, err := g.enter(context.Background(), "alice")
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Principal != "alice" || busy.Waited || busy.Share != 1 || busy.Waiting != 2 {
		t.Fatalf("past the backlog: %#v, want a BusyError for alice's backlog", err)
	}
	busy.Task = "t1"
	if msg := busy.Error(); !strings.Contains(msg, "gateway.principal_share") || !strings.Contains(msg, "nothing ran") {
		t.Fatalf("busy text: %q", msg)
	}
	if r := busyResult("t1", busy); r.Meta[MetaLimit] != "gateway.principal_share" || r.Meta[MetaLimitCheck] != LimitCheckBusy {
		t.Fatalf("busy result meta: %v", r.Meta)
	}
	// A waiter whose client goes away leaves without a turn.
	cancel()
	if rel := <-w1; rel != nil {
		t.Fatal("a cancelled waiter got a turn")
	}
	if err := <-errs; !errors.As(err, &busy) || !busy.Waited {
		t.Fatalf("cancelled waiter: %v, want a BusyError that waited", err)
	}
	// The turn goes to the next waiter, and no slot is lost.
	a()
	rel2 := <-w2
	if rel2 == nil {
		t.Fatal(<-errs)
	}
	rel2()
	if r, w := g.load("alice"); r != 0 || w != 0 {
		t.Fatalf("alice at the end: %d running, %d waiting", r, w)
	}
}

func TestPrincipalGateOff(t *testing.T) {
	g := newPrincipalGate(-1, 0)
	_ = mustEnter(t, g, "bob")
	for range 100 {
		_ = mustEnter(t, g, "alice")
	}
	if r, w := g.load("alice"); r != 100 || w != 0 {
		t.Fatalf("off: alice %d running, %d waiting; want 100, 0 (counted, never held)", r, w)
	}
}

// A principal's cap follows the least busy other: beside bob's four
// calls at once, alice runs four.
func TestPrincipalGateFollowsTheLeastBusy(t *testing.T) {
	g, _, queued := testGate(1, 100)
	var bob []func()
	for range 4 {
		bob = append(bob, mustEnter(t, g, "bob"))
	}
	var alice []func()
	for range 4 {
		alice = append(alice, mustEnter(t, g, "alice"))
	}
	errs := make(chan error, 1)
	w := enterAsync(context.Background(), g, "alice", errs)
	<-queued
	// bob has two left: alice's cap drops to two, so her waiter runs
	// once only one of hers is in flight.
	bob[0]()
	bob[1]()
	alice[0]()
	alice[1]()
	select {
	case <-w:
		t.Fatal("alice ran a third call beside bob's two")
	default:
	}
	alice[2]()
	rel := <-w
	if rel == nil {
		t.Fatal(<-errs)
	}
	if r, _ := g.load("alice"); r != 2 {
		t.Fatalf("alice beside bob's two: %d running, want 2", r)
	}
	rel()
	alice[3]()
	bob[2]()
	bob[3]()
}

// Bursts of three principals at once beside a fourth that holds one call:
// all calls run (none lost, none stuck), none ran while its principal
// already had its share in flight, and the gate ends empty.
func TestPrincipalGateBurst(t *testing.T) {
	const share, principals, calls = 2, 3, 300
	g := newPrincipalGate(share, calls*principals)
	g.window, g.lease = time.Hour, 0
	light := mustEnter(t, g, "light")
	var wg sync.WaitGroup
	var ran, over atomic.Int64
	running := make([]atomic.Int64, principals)
	for p := range principals {
		for range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rel, err := g.enter(context.Background(), fmt.Sprint("p", p))
				if err != nil {
					t.Error(err)
					return
				}
				if n := running[p].Add(1); n > share {
					over.Add(1)
				}
				ran.Add(1)
				running[p].Add(-1)
				rel()
			}()
		}
	}
	wg.Wait()
	if ran.Load() != principals*calls || over.Load() != 0 {
		t.Fatalf("ran %d of %d calls; %d ran past their principal's share", ran.Load(), principals*calls, over.Load())
	}
	light()
	for p := range principals {
		if r, w := g.load(fmt.Sprint("p", p)); r != 0 || w != 0 {
			t.Fatalf("p%d at the end: %d running, %d waiting", p, r, w)
		}
	}
}

// Many principals at once, one call each: every one runs at once (each is
// within its share), and the gate ends empty.
func TestPrincipalGateManyPrincipals(t *testing.T) {
	g := newPrincipalGate(1, 10)
	g.window, g.lease = time.Hour, 0
	var rels []func()
	for i := range 5000 {
		rels = append(rels, mustEnter(t, g, fmt.Sprint("p", i)))
	}
	for _, rel := range rels {
		rel()
	}
	for i := range 5000 {
		if r, w := g.load(fmt.Sprint("p", i)); r != 0 || w != 0 {
			t.Fatalf("p%d at the end: %d running, %d waiting", i, r, w)
		}
	}
}

// A costly call's turn is held past its end while another principal is
// active, and given back at once when none is.
func TestPrincipalGateHoldsCostlyTurns(t *testing.T) {
	g := newPrincipalGate(1, 10)
	g.window, g.lease = time.Hour, 0
	rel := mustEnter(t, g, "alice")
	left := make(chan struct{})
	g.holdThenLeave("alice", time.Hour, func() { rel(); close(left) })
	select {
	case <-left:
	default:
		t.Fatal("alone, alice's turn was held")
	}
	bob := mustEnter(t, g, "bob")
	defer bob()
	rel = mustEnter(t, g, "alice")
	held := make(chan struct{})
	g.holdThenLeave("alice", 20*time.Millisecond, func() { rel(); close(held) })
	if r, _ := g.load("alice"); r != 1 {
		t.Fatalf("beside bob, alice's costly turn was given back at once (%d running)", r)
	}
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("alice's held turn was never given back")
	}
	if r, _ := g.load("alice"); r != 0 {
		t.Fatalf("after the hold alice has %d running", r)
	}
}
