package program

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/airlock-run/airlock/internal/wasmmem"
	"github.com/airlock-run/airlock/wasm/program/wire"
)

// hostModule is the module name of the guest's imports.
const hostModule = "airlock"

// MaxMessageBytes is the largest message the guest may send. A call's
// arguments and the Done are bounded far below it by the program's own
// limits (data, result, print); this only keeps a broken guest from
// handing the host its whole memory.
const MaxMessageBytes = 16 << 20

// stderrBytes is how much of the guest's stderr an instance keeps: enough
// for the first lines of a crash report.
const stderrBytes = 16 << 10

// instance is one guest, started on its own goroutine (guest), which runs
// _start and, inside it, the host functions. The program's Run talks to
// it over fromGuest and toGuest.
type instance struct {
	rt     *Runtime
	pages  uint32
	mod    api.Module
	mem    *wasmmem.Allocator
	ctx    context.Context // the guest's: cancelled by stop
	cancel context.CancelFunc

	fromGuest chan *wire.GuestMessage // unbuffered: send blocks until Run takes it
	toGuest   chan []byte             // at most one message (the protocol allows no more)
	parked    chan struct{}           // closed when the guest first waits in recv
	exited    chan struct{}           // closed when _start has returned

	// Written by the guest's goroutine before exited is closed.
	exitErr error
	fault   string // how the guest broke the protocol, if it did
	stderr  *capWriter

	// The guest's goroutine's alone (the host functions run on it).
	pending     []byte // the message recv has taken but not yet delivered
	owed        int    // messages the host will send: the Request, a Reply per wait
	started     int    // calls started
	outstanding int    // calls started and not yet waited for
	didPark     bool
}

type instanceKey struct{}

// startInstance instantiates the module with a cap of pages and starts its
// guest goroutine, which runs until the guest's first recv and blocks
// there. The error is an infrastructure failure.
func (r *Runtime) startInstance(pages uint32) (*instance, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	r.wg.Add(1)
	r.mu.Unlock()
	inst := &instance{
		rt:        r,
		pages:     pages,
		mem:       wasmmem.New(uint64(pages) * pageSize),
		fromGuest: make(chan *wire.GuestMessage),
		toGuest:   make(chan []byte, 1),
		parked:    make(chan struct{}),
		exited:    make(chan struct{}),
		stderr:    &capWriter{max: stderrBytes},
		owed:      1,
	}
	ctx, cancel := context.WithCancel(r.ctx)
	inst.ctx, inst.cancel = context.WithValue(ctx, instanceKey{}, inst), cancel
	mod, err := r.rt.InstantiateModule(experimental.WithMemoryAllocator(inst.ctx, inst.mem), r.cm, moduleConfig(inst.stderr))
	if err != nil {
		cancel()
		inst.mem.Release()
		r.wg.Done()
		if r.isClosed() {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("program: instantiate the guest: %w", err)
	}
	inst.mod = mod
	go inst.guest()
	return inst, nil
}

// guest runs the guest to its end and releases it.
func (inst *instance) guest() {
	defer inst.rt.wg.Done()
	_, err := inst.mod.ExportedFunction("_start").Call(inst.ctx)
	inst.exitErr = err
	_ = inst.mod.Close(context.Background())
	inst.mem.Release()
	close(inst.exited)
}

// stop ends the guest (it may still be running); its goroutine releases
// it. It returns at once.
func (inst *instance) stop() { inst.cancel() }

// faultf records how the guest broke the protocol and ends it.
func (inst *instance) faultf(ctx context.Context, mod api.Module, format string, args ...any) {
	inst.fault = fmt.Sprintf(format, args...)
	exit(ctx, mod, 1)
}

// exit ends the guest from inside a host function, as WASI's proc_exit
// does.
func exit(ctx context.Context, mod api.Module, code uint32) {
	_ = mod.CloseWithExitCode(ctx, code)
	panic(sys.NewExitError(code))
}

// hostSend is airlock.send(ptr, len) -> 0: one JSON GuestMessage from the
// guest. It checks the message against the protocol, so that Run sees
// only well-formed ones, and hands it to Run (blocking until Run takes it).
func hostSend(ctx context.Context, mod api.Module, stack []uint64) {
	inst := ctx.Value(instanceKey{}).(*instance)
	ptr, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if n > MaxMessageBytes {
		inst.faultf(ctx, mod, "it sent a message of %d bytes, more than the %d allowed", n, MaxMessageBytes)
	}
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		inst.faultf(ctx, mod, "it sent a message outside its memory (%d bytes at %d)", n, ptr)
	}
	if inst.owed > 0 {
		inst.faultf(ctx, mod, "it sent a message before receiving the host's")
	}
	var m wire.GuestMessage
	if err := json.Unmarshal(b, &m); err != nil {
		inst.faultf(ctx, mod, "it sent a message that is not a JSON GuestMessage: %v", err)
	}
	switch m.Op {
	case wire.OpStart:
		if m.ID != inst.started+1 {
			inst.faultf(ctx, mod, "it started call %d after call %d (calls are numbered from 1 in start order)", m.ID, inst.started)
		}
		inst.started++
		inst.outstanding++
	case wire.OpWait:
		if inst.outstanding == 0 {
			inst.faultf(ctx, mod, "it waited with no call in flight")
		}
		inst.outstanding--
		inst.owed++
	case wire.OpDone:
		if m.Done == nil {
			inst.faultf(ctx, mod, "it sent done without a Done")
		}
	default:
		inst.faultf(ctx, mod, "it sent op %.40q (want %q, %q or %q)", m.Op, wire.OpStart, wire.OpWait, wire.OpDone)
	}
	select {
	case inst.fromGuest <- &m:
	case <-ctx.Done():
		exit(ctx, mod, 1)
	}
	if m.Op == wire.OpDone {
		exit(ctx, mod, 0) // nothing after done matters
	}
	stack[0] = 0
}

// hostRecv is airlock.recv(ptr, cap) -> len or -(needed length): the
// host's next message (the Request, then a Reply after each wait), which
// stays queued while cap is too small.
func hostRecv(ctx context.Context, mod api.Module, stack []uint64) {
	inst := ctx.Value(instanceKey{}).(*instance)
	ptr, capacity := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if inst.pending == nil {
		if inst.owed == 0 {
			inst.faultf(ctx, mod, "it waited to receive with no message due (send op wait first)")
		}
		if !inst.didPark {
			inst.didPark = true
			close(inst.parked)
		}
		select {
		case inst.pending = <-inst.toGuest:
		case <-ctx.Done():
			exit(ctx, mod, 1)
		}
	}
	n := uint32(len(inst.pending))
	if n > capacity {
		stack[0] = api.EncodeI32(-int32(n))
		return
	}
	if !mod.Memory().Write(ptr, inst.pending) {
		inst.faultf(ctx, mod, "it asked to receive into memory it does not have (%d bytes at %d)", capacity, ptr)
	}
	inst.pending = nil
	inst.owed--
	stack[0] = api.EncodeI32(int32(n))
}

// capWriter keeps the first max bytes written to it and drops the rest.
// The guest's goroutine alone writes it.
type capWriter struct {
	buf []byte
	max int
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// outOfMemory tells whether the guest died for lack of memory: Go's wasm
// runtime, refused a memory.grow, prints "fatal error: out of memory"
// (and "runtime: out of memory: cannot allocate ..." before it).
func (w *capWriter) outOfMemory() bool {
	return bytes.Contains(w.buf, []byte("out of memory")) || bytes.Contains(w.buf, []byte("cannot allocate memory"))
}
