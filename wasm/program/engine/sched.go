package engine

import (
	"fmt"
	"math"
	"sort"

	"go.starlark.net/starlark"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// The scheduler. The program's main thread runs on the goroutine of Run,
// so a program without parallel(...) makes its calls inline: h.Start,
// then h.Wait for that call's reply. Each parallel branch is a Starlark
// thread in its own goroutine (a blocked call has to suspend a thread in
// the middle of the interpreter's Go stack), but exactly one goroutine
// runs at a time: while main waits in parallel(...), Run's goroutine
// resumes one branch and waits until it yields (starts a call, spawns
// branches or ends), then picks the next runnable branch in FIFO order.
// When none is runnable it calls h.Wait once and resumes the branch that
// owns the reply. So h is only ever called from Run's goroutine (the host
// is a workflow coroutine), and the interleaving depends only on the
// program and the reply order.

// maxThreads bounds the threads alive at once (nested parallel calls
// included), so a program cannot spawn goroutines without bound.
const maxThreads = 256

type eventKind int

const (
	evCall  eventKind = iota // the branch wants t.call started, then its reply
	evSpawn                  // the branch wants t.spawn run, then their results
	evDone                   // the branch's function returned (t.val, t.err)
)

type sched struct {
	main    *task
	events  chan *task // the running branch yields here
	runq    []*task
	pending map[int]*task // by call ID, waiting for a reply
	nextID  int
	live    int // threads created and not yet done

	total     int64 // steps run, all threads
	sinceCall int64 // steps run since the last call started
}

type task struct {
	e      *engine
	name   string
	thread *starlark.Thread
	fn     func(*starlark.Thread) (starlark.Value, error)
	resume chan struct{}

	started, done bool
	kind          eventKind
	val           starlark.Value
	err           error

	// base is the thread's step counter when it was last resumed.
	base uint64
	// call is the call it waits for (evCall), reply its end.
	call  *pendingCall
	reply wire.Reply
	// spawn are the branches it waits for (evSpawn); parent and
	// remaining tie a branch to its parent.
	spawn     []*task
	parent    *task
	remaining int
}

type pendingCall struct {
	tool *wire.Tool
	args []byte
	line int
}

func (e *engine) newTask(name string, fn func(*starlark.Thread) (starlark.Value, error), parent *task) *task {
	t := &task{e: e, name: name, fn: fn, parent: parent}
	t.thread = &starlark.Thread{
		Name:       name,
		Print:      e.print,
		OnMaxSteps: e.onMaxSteps,
	}
	t.thread.SetLocal(taskKey, t)
	e.live++
	return t
}

const taskKey = "airlock.task"

func taskOf(th *starlark.Thread) *task { return th.Local(taskKey).(*task) }

// runMain runs the main thread on the calling goroutine.
func (e *engine) runMain(main *task) {
	e.main = main
	e.events = make(chan *task)
	e.pending = map[int]*task{}
	main.started = true
	e.grant(main)
	func() {
		defer func() {
			if r := recover(); r != nil {
				main.val, main.err = nil, fmt.Errorf("internal error in the interpreter: %v", r)
			}
		}()
		main.val, main.err = main.fn(main.thread)
	}()
	e.account(main)
	main.done = true
	e.live--
}

// waitCall is how a thread blocks on its call t.call: inline on main,
// else by yielding to the scheduler.
func (e *engine) waitCall(t *task) {
	if t != e.main {
		t.yield(evCall)
		return
	}
	e.account(t)
	id := e.start(t)
	r := e.h.Wait()
	if r.ID != id {
		e.abort(nil, wire.OutcomeError, fmt.Sprintf("internal error: the host replied to call %d, which is not in flight", r.ID), 0)
	} else {
		delete(e.pending, id)
		e.replied(t, r)
	}
	e.grant(t)
}

// waitBranches runs t.spawn and returns once they have all ended.
func (e *engine) waitBranches(t *task) {
	if t != e.main {
		t.yield(evSpawn)
		return
	}
	e.account(t)
	t.remaining = len(t.spawn)
	e.runq = append(e.runq, t.spawn...)
	e.loop(func() bool { return t.remaining == 0 })
	e.grant(t)
}

// start hands t.call to the host.
func (e *engine) start(t *task) int {
	e.nextID++
	e.sinceCall = 0
	e.pending[e.nextID] = t
	e.h.Start(wire.GuestMessage{Op: wire.OpStart, ID: e.nextID, Tool: t.call.tool.Name, Args: t.call.args, Line: t.call.line})
	return e.nextID
}

// replied records r as t's reply; a stop or a program limit ends the
// program.
func (e *engine) replied(t *task, r wire.Reply) {
	t.reply = r
	switch r.Outcome {
	case wire.ReplyStopped:
		e.abort(nil, wire.OutcomeStopped, stopReason(r, "the program was stopped"), t.call.line)
	case wire.ReplyProgramLimit:
		e.abort(nil, wire.OutcomeLimit, stopReason(r, "the program reached a limit"), t.call.line)
	}
}

// loop runs branches until done.
func (e *engine) loop(done func() bool) {
	for !done() {
		if len(e.runq) == 0 {
			e.waitReply()
			continue
		}
		t := e.runq[0]
		e.runq = e.runq[1:]
		if e.end != nil && !t.started {
			// Ending: a branch that never ran does not start now.
			t.err = e.errAborted()
			e.ended(t)
			continue
		}
		e.resumeTask(t)
		switch t.kind {
		case evCall:
			if e.end != nil {
				e.runq = append(e.runq, t) // it sees e.end and unwinds
				continue
			}
			e.start(t)
		case evSpawn:
			t.remaining = len(t.spawn)
			e.runq = append(e.runq, t.spawn...)
		case evDone:
			e.ended(t)
		}
	}
}

// waitReply is called when every branch waits: for a reply, or (ending)
// to be woken to unwind.
func (e *engine) waitReply() {
	if len(e.pending) == 0 {
		// Every branch waits, none for a call: impossible by
		// construction (a parent waits only for live branches).
		panic("engine: every thread is blocked and no call is in flight")
	}
	if e.end != nil {
		// Ending: wake the branches waiting for calls (in call order)
		// instead of waiting for their replies.
		ids := make([]int, 0, len(e.pending))
		for id := range e.pending {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		for _, id := range ids {
			e.runq = append(e.runq, e.pending[id])
			delete(e.pending, id)
		}
		return
	}
	r := e.h.Wait()
	t, ok := e.pending[r.ID]
	if !ok {
		e.abort(nil, wire.OutcomeError, fmt.Sprintf("internal error: the host replied to call %d, which is not in flight", r.ID), 0)
		return
	}
	delete(e.pending, r.ID)
	e.replied(t, r)
	e.runq = append(e.runq, t)
}

func stopReason(r wire.Reply, def string) string {
	if r.Reason != "" {
		return r.Reason
	}
	return def
}

// grant gives t the step budget left before it runs on.
func (e *engine) grant(t *task) {
	budget := e.lim.MaxSteps - e.total
	if b := e.lim.MaxStepsBetweenCalls - e.sinceCall; b < budget {
		budget = b
	}
	if budget < 0 {
		budget = 0
	}
	t.base = t.thread.ExecutionSteps()
	// The hook fires when the counter reaches the limit: +1 lets the
	// thread run exactly budget steps.
	limit := t.base + uint64(budget) + 1
	if limit < t.base {
		limit = math.MaxUint64
	}
	t.thread.SetMaxExecutionSteps(limit)
	if e.end != nil {
		t.thread.Cancel(e.end.Error)
	}
}

// account adds the steps t ran since grant to the budgets.
func (e *engine) account(t *task) {
	used := int64(t.thread.ExecutionSteps() - t.base)
	t.base = t.thread.ExecutionSteps()
	e.total += used
	e.sinceCall += used
}

// resumeTask runs branch t until it yields.
func (e *engine) resumeTask(t *task) {
	e.grant(t)
	if !t.started {
		t.started = true
		t.resume = make(chan struct{})
		go t.run()
	} else {
		t.resume <- struct{}{}
	}
	<-e.events
	e.account(t)
}

// onMaxSteps is called on the running thread when it used the budget
// grant gave it.
func (e *engine) onMaxSteps(th *starlark.Thread) {
	t := taskOf(th)
	used := int64(th.ExecutionSteps() - t.base)
	total, since := e.total+used, e.sinceCall+used
	line := programLine(th)
	if total > e.lim.MaxSteps {
		e.abort(th, wire.OutcomeLimit, fmt.Sprintf("the program ran %d steps, more than the %d allowed in all; it was stopped (do less work per program: filter in the tool call, or split the job)", total, e.lim.MaxSteps), line)
		return
	}
	e.abort(th, wire.OutcomeLimit, fmt.Sprintf("the program ran %d steps without calling a tool, more than the %d allowed between calls; it was stopped (an endless loop?)", since, e.lim.MaxStepsBetweenCalls), line)
}

// ended records that branch t's function returned; its parent resumes
// when its last branch ends (main, waiting in loop, sees remaining 0).
func (e *engine) ended(t *task) {
	t.done = true
	e.live--
	p := t.parent
	p.remaining--
	if p.remaining == 0 && p != e.main {
		e.runq = append(e.runq, p)
	}
}

// run is branch t's goroutine.
func (t *task) run() {
	defer func() {
		if r := recover(); r != nil {
			t.val, t.err = nil, fmt.Errorf("internal error in the interpreter: %v", r)
		}
		t.kind = evDone
		t.e.events <- t
	}()
	t.val, t.err = t.fn(t.thread)
}

// yield hands control back to the scheduler and blocks until resumed.
func (t *task) yield(kind eventKind) {
	t.kind = kind
	t.e.events <- t
	<-t.resume
}
