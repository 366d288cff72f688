package sandbox

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/airlock-run/airlock/internal/wasmmem"
)

// The reactor ABI: a module that exports _initialize and airlock_run (and
// no _start) is a WASI reactor (for Go: GOOS=wasip1 -buildmode=c-shared,
// with a //go:wasmexport airlock_run function). Its calls see what a
// command's do (argv, environment, stdin, stdout, stderr, the mounts) and
// airlock_run, taking nothing and returning nothing or an i32 exit code,
// is its main.
//
// What it buys: an instance of a command must run the guest's start (for
// Go, the runtime's and every package's initialisation, and the data
// segments copied in before that: ~3 ms of CPU) before it can serve its
// one call. A reactor's start, _initialize, runs once per call shape: the
// first instance of the shape runs it, and when it returns without having
// used anything of a call, its memory and mutable globals are kept as the
// shape's snapshot. Every later instance of the shape is a new instance
// whose memory is that snapshot, mapped copy-on-write, and whose globals
// are set to it: the state _initialize left, without running it.
//
// Isolation is that of a fresh instance, call by call: each call still
// gets an instance no other call has used (memory, globals, tables, open
// files, environment), made from the snapshot of a start that no call
// could see or influence (it is taken when _initialize returns, before
// airlock_run, and one that read stdin, wrote output, read the wall clock
// or touched a mount, each of which waits for a call, is not kept). What calls of one shape share is only what _initialize computed,
// identically for each of them: in particular the seeds it drew from the
// random source (a Go guest's map hash seed and math/rand's top-level
// generator), so math/rand's sequence repeats from call to call where a
// command's would not. crypto/rand reads the host's random source at each
// use and is unaffected.
const (
	reactorInit = "_initialize"
	reactorRun  = "airlock_run"
)

// maxSnapshotBytes is the most memory a snapshot may hold; a reactor whose
// _initialize leaves more runs it in every call instead.
const maxSnapshotBytes = warmMemoryBytes

// checkReactor checks a reactor's exports' signatures.
func checkReactor(cm wazero.CompiledModule) error {
	fns := cm.ExportedFunctions()
	if _, ok := fns["_start"]; ok {
		return fmt.Errorf("exports both _start and the reactor ABI's %s: it is a command or a reactor, not both", reactorRun)
	}
	init, run := fns[reactorInit], fns[reactorRun]
	if len(init.ParamTypes()) != 0 || len(init.ResultTypes()) != 0 {
		return fmt.Errorf("%s must take and return nothing", reactorInit)
	}
	if res := run.ResultTypes(); len(run.ParamTypes()) != 0 || len(res) > 1 || len(res) == 1 && res[0] != api.ValueTypeI32 {
		return fmt.Errorf("%s must take nothing and return nothing or an i32 exit code", reactorRun)
	}
	return nil
}

// snapshot is a reactor's state after _initialize for one call shape.
type snapshot struct {
	image   *wasmmem.Image
	globals []uint64 // by Module.reactor.Globals
}

// snapshotOf returns the snapshot of sh, or nil.
func (m *Module) snapshotOf(sh *shape) *snapshot {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	return m.s.snapshots[sh.key]
}

// keepSnapshot keeps inst's state, just after its _initialize returned, as
// its shape's snapshot, unless the shape has one, maxPools shapes have, or
// it is too large. Errors are not the call's: without a snapshot, each
// instance runs _initialize.
func (inst *instance) keepSnapshot() {
	m, s := inst.m, inst.m.s
	mem := inst.mod.Memory()
	if mem == nil || uint64(mem.Size()) > maxSnapshotBytes {
		return
	}
	s.mu.Lock()
	_, have := s.snapshots[inst.sh.key]
	full := s.closed || len(s.snapshots) >= maxPools
	s.mu.Unlock()
	if have || full {
		return
	}
	globals := make([]uint64, len(m.reactor.Globals))
	for i, g := range m.reactor.Globals {
		eg := inst.mod.ExportedGlobal(wasmmem.GlobalExport(g))
		if eg == nil {
			return
		}
		globals[i] = eg.Get()
	}
	b, ok := mem.Read(0, mem.Size())
	if !ok {
		return
	}
	img, err := wasmmem.NewImage(b)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, have := s.snapshots[inst.sh.key]; have || s.closed || len(s.snapshots) >= maxPools {
		_ = img.Close()
		return
	}
	s.snapshots[inst.sh.key] = &snapshot{image: img, globals: globals}
}

// restore makes a new instance's memory and globals the snapshot's; its
// memory was allocated from the snapshot's image.
func (inst *instance) restore(sn *snapshot) error {
	mem := inst.mod.Memory()
	if mem == nil || !inst.mem.FromImage() {
		return fmt.Errorf("restore: the memory was not made from the snapshot")
	}
	if want := uint32(sn.image.Size() / pageSize); mem.Size()/pageSize < want {
		if _, ok := mem.Grow(want - mem.Size()/pageSize); !ok {
			return fmt.Errorf("restore: memory cannot grow to %d pages", want)
		}
	}
	for i, g := range inst.m.reactor.Globals {
		mg, ok := inst.mod.ExportedGlobal(wasmmem.GlobalExport(g)).(api.MutableGlobal)
		if !ok {
			return fmt.Errorf("restore: global %d is not exported mutable", g)
		}
		mg.Set(sn.globals[i])
	}
	return nil
}

// writeData writes the data segments the rewritten module lacks into a new
// instance that is to run _initialize.
func (inst *instance) writeData() error {
	mem := inst.mod.Memory()
	for _, sg := range inst.m.reactor.Data {
		if mem == nil || !mem.Write(sg.Offset, sg.Init) {
			return fmt.Errorf("data segment at %d (%d bytes) is outside the memory", sg.Offset, len(sg.Init))
		}
	}
	return nil
}

// runReactor is a reactor's guest: _initialize unless the instance was
// made from a snapshot (keeping one when it can), then, once it has its
// call, airlock_run.
func (inst *instance) runReactor() error {
	if !inst.restored {
		if _, err := inst.mod.ExportedFunction(reactorInit).Call(inst.ctx); err != nil {
			return err
		}
		if !inst.didPark {
			inst.keepSnapshot()
		}
	}
	if !inst.await() {
		return fmt.Errorf("stopped before its call: %w", context.Cause(inst.ctx))
	}
	res, err := inst.mod.ExportedFunction(reactorRun).Call(inst.ctx)
	if err != nil {
		return err
	}
	if len(res) == 1 && uint32(res[0]) != 0 {
		return sys.NewExitError(uint32(res[0]))
	}
	return nil
}
