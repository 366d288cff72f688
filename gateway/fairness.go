package gateway

// Fairness between principals (issue 28 §2). Each task's calls are
// queued by admission.go, but a principal whose stateless agents each
// start a task of their own is bounded by no task's queue: 32 agents of
// alice kept 32 Updates in flight, the Temporal server, the worker and
// the upstream shared two cores among them, and bob's lone call waited
// its turn behind all of them (2.2–3.5× his p50 alone). Faster code does
// not fix that: any flood fills whatever the machine has.
//
// So while more than one principal has calls, a principal may have in
// flight at this gateway as many calls as the least busy of the others
// has in flight and waiting, and at least PrincipalShare (default 1): a
// flood beside an agent that calls one at a time runs one at a time, and
// each gets half of what the machine does. The rest wait here, in arrival
// order, holding nothing (no Update sent, no task started). A principal
// alone is not held back: it has the whole gateway, bounded only by its
// tasks' queues. A principal is "active" while it has calls in flight or
// waiting, and for activeWindow after its last one finished, so that an
// agent calling back to back (bob) stays counted between two calls and
// the flood does not refill the gap. A call counts for its first
// principalLease only (a call waiting for approval does not hold its
// principal back), and one that starts its task, which costs about
// startWeight calls in a running task, holds its turn that much longer
// while others have calls. RATIONALE.md,
// "How does one principal's flood leave room for another's calls?".

import (
	"context"
	"sync"
	"time"

	"github.com/airlock-run/airlock/internal/metrics"
)

// DefaultPrincipalShare is Options.PrincipalShare's default: the calls a
// principal may keep in flight, at least, while other principals have
// calls.
const DefaultPrincipalShare = 1

// DefaultPrincipalBacklog bounds the calls of one principal waiting for
// its share; past it a call is answered busy at once.
const DefaultPrincipalBacklog = 4096

// activeWindow is how long a principal counts as active after its last
// call finished (a variable for tests).
var activeWindow = time.Second

// startWeight is what a call that starts its task counts for, in calls
// to a running task: BenchmarkPrincipalFlood measured process CPU per
// call 10–18 ms in new_task (every call of the flood starts a task)
// against 3.3–6.5 ms in principal_task (one running task). 2 brought bob's
// ratio from 3.3–3.9 to 1.2–1.3; 3 to 0.95 but left the flood 5 calls/s.
const startWeight = 2

// principalLease is how long a call counts against its principal's
// share: a call waiting for approval (which may take hours) or a slow
// tool then stops holding the principal's other calls back. The work
// the share protects, the server's, the worker's and the gateway's, is
// done in a call's first milliseconds; what follows is waiting. A
// variable for tests.
var principalLease = 2 * time.Second

// principalGate admits calls by principal: see the comment at the top.
type principalGate struct {
	share, backlog int // 0 share: off
	window, lease  time.Duration
	now            func() time.Time

	mu sync.Mutex
	ps map[string]*principalLoad
	// nwait is how many callers wait, all principals together; swept is
	// when idle principals were last dropped from ps.
	nwait int
	swept time.Time
	// timer wakes waiters when a principal stops counting as active
	// (armed while someone waits; nil otherwise).
	timer *time.Timer
	// queued, when set (tests), is told of each caller that starts to
	// wait, with the principal's new number waiting.
	queued func(principal string, waiting int)
}

// principalLoad is one principal's calls at this gateway.
type principalLoad struct {
	running int
	waiting []*waiter
	last    time.Time // when its last call finished
}

func newPrincipalGate(share, backlog int) *principalGate {
	if backlog <= 0 {
		backlog = DefaultPrincipalBacklog
	}
	return &principalGate{share: max(share, 0), backlog: backlog, window: activeWindow, lease: principalLease, now: time.Now, ps: map[string]*principalLoad{}}
}

// activeLocked reports whether l counts as active at now.
func (g *principalGate) activeLocked(l *principalLoad, now time.Time) bool {
	return l.running > 0 || len(l.waiting) > 0 || now.Sub(l.last) < g.window
}

// loads is what the caps are read from: the least busy active principal
// (its calls in flight and waiting), and the least busy of the others.
type loads struct {
	owner         string
	least, second int // -1: none
}

// loadsLocked reads the active principals once (a grant does not change
// any principal's calls in flight and waiting, only which of them wait).
func (g *principalGate) loadsLocked(now time.Time) loads {
	ls := loads{least: -1, second: -1}
	for name, l := range g.ps {
		if !g.activeLocked(l, now) {
			continue
		}
		d := l.running + len(l.waiting)
		switch {
		case ls.least < 0 || d < ls.least:
			ls.second = ls.least
			ls.owner, ls.least = name, d
		case ls.second < 0 || d < ls.second:
			ls.second = d
		}
	}
	return ls
}

// capOf is how many calls p may have in flight: unbounded (-1) when no
// other principal is active; else as many as the least busy of the
// others has in flight and waiting, and at least the share. So a flood
// runs beside an agent calling one at a time one call at a time (with
// share 1), and beside an agent making four calls at once, four.
func (g *principalGate) capOf(p string, ls loads) int {
	other := ls.least
	if ls.owner == p {
		other = ls.second
	}
	if other < 0 {
		return -1
	}
	return max(other, g.share)
}

// mayRunLocked reports whether p, with l, may start one more call now.
func (g *principalGate) mayRunLocked(p string, l *principalLoad, ls loads) bool {
	if g.share == 0 {
		return true
	}
	c := g.capOf(p, ls)
	return c < 0 || l.running < c
}

// enter waits for principal's turn to send a call and returns the
// function that gives it back (call it once the call's answer is in or
// abandoned). Off (share 0), it only counts the call.
func (g *principalGate) enter(ctx context.Context, principal string) (release func(), _ error) {
	now := g.now()
	g.mu.Lock()
	l := g.ps[principal]
	if l == nil {
		l = &principalLoad{}
		g.ps[principal] = l
	}
	if len(l.waiting) == 0 && g.mayRunLocked(principal, l, g.loadsLocked(now)) {
		l.running++
		g.mu.Unlock()
		return g.leased(principal), nil
	}
	if len(l.waiting) >= g.backlog {
		g.mu.Unlock()
		metrics.TaskBusy.WithLabelValues(metrics.BusyPrincipal).Inc()
		return nil, &BusyError{Principal: principal, Share: g.share, Backlog: g.backlog, Waiting: len(l.waiting)}
	}
	w := &waiter{ready: make(chan struct{})}
	l.waiting = append(l.waiting, w)
	g.nwait++
	n := len(l.waiting)
	g.armLocked(now)
	g.mu.Unlock()
	metrics.PrincipalQueued.Inc()
	if g.queued != nil {
		g.queued(principal, n)
	}
	select {
	case <-w.ready:
		return g.leased(principal), nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	if w.granted {
		g.mu.Unlock()
		return g.leased(principal), nil
	}
	if i := indexOf(l.waiting, w); i >= 0 {
		l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
		g.nwait--
	}
	g.mu.Unlock()
	metrics.TaskBusy.WithLabelValues(metrics.BusyPrincipal).Inc()
	return nil, &BusyError{Principal: principal, Share: g.share, Backlog: g.backlog, Waited: true}
}

// leased is the releaser of a turn just taken, which also gives the
// turn back by itself after the lease.
func (g *principalGate) leased(principal string) func() {
	rel := g.releaser(principal)
	if g.lease <= 0 {
		return rel
	}
	t := time.AfterFunc(g.lease, rel)
	return func() {
		t.Stop()
		rel()
	}
}

// holdThenLeave gives a turn back (leave) after extra when principal has
// to share (another principal is active), else at once: a costly call's
// turn is held for as long as its cost, so that a principal whose every
// call starts a task takes no more of the machine than one whose calls
// do not. The turn's lease still ends the hold.
func (g *principalGate) holdThenLeave(principal string, extra time.Duration, leave func()) {
	if g.share == 0 || extra <= 0 {
		leave()
		return
	}
	now := g.now()
	g.mu.Lock()
	shared := g.capOf(principal, g.loadsLocked(now)) >= 0
	g.mu.Unlock()
	if !shared {
		leave()
		return
	}
	time.AfterFunc(extra, leave)
}

// releaser gives principal's turn back exactly once and lets in whoever
// may run now.
func (g *principalGate) releaser(principal string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			now := g.now()
			g.mu.Lock()
			defer g.mu.Unlock()
			l := g.ps[principal]
			l.running--
			l.last = now
			if g.nwait > 0 {
				g.grantLocked(now)
			}
			g.sweepLocked(now)
		})
	}
}

// grantLocked starts the waiters that may run now, oldest first within a
// principal, one principal after another so that none takes all the
// room, and arms the timer if someone still waits.
func (g *principalGate) grantLocked(now time.Time) {
	ls := g.loadsLocked(now)
	for granted := true; granted; {
		granted = false
		for p, l := range g.ps {
			if len(l.waiting) > 0 && g.mayRunLocked(p, l, ls) {
				w := l.waiting[0]
				l.waiting = l.waiting[1:]
				l.running++
				g.nwait--
				w.granted = true
				close(w.ready)
				granted = true
			}
		}
	}
	g.armLocked(now)
}

// sweepLocked drops the principals no longer active, at most once a
// window, so that ps holds the principals of about the last window.
func (g *principalGate) sweepLocked(now time.Time) {
	if now.Sub(g.swept) < g.window {
		return
	}
	g.swept = now
	for p, l := range g.ps {
		if !g.activeLocked(l, now) {
			delete(g.ps, p)
		}
	}
}

// armLocked sets the timer for the moment the next principal without
// calls stops counting as active, if anyone waits; that may let the
// waiters run.
func (g *principalGate) armLocked(now time.Time) {
	var next time.Time
	waiting := false
	for _, l := range g.ps {
		waiting = waiting || len(l.waiting) > 0
		if l.running == 0 && len(l.waiting) == 0 {
			if end := l.last.Add(g.window); end.After(now) && (next.IsZero() || end.Before(next)) {
				next = end
			}
		}
	}
	if !waiting || next.IsZero() {
		return
	}
	d := next.Sub(now)
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.expire)
		return
	}
	g.timer.Reset(d)
}

// expire is the timer: re-read who is active, and start who may run.
func (g *principalGate) expire() {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.grantLocked(now)
	g.sweepLocked(now)
}

// load is how many calls principal has in flight and waiting here.
func (g *principalGate) load(principal string) (running, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.ps[principal]; l != nil {
		return l.running, len(l.waiting)
	}
	return 0, 0
}

// PrincipalLoad is how many calls (tool calls, programs) principal has in
// flight at this gateway and how many wait for its share.
func (g *Gateway) PrincipalLoad(principal string) (inFlight, waiting int) {
	return g.fairness.load(principal)
}
