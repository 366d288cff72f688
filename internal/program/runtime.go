// Package program runs airlock's program interpreter (the Starlark guest,
// wasm/program.wasm) for the AgentTask workflow: one fresh wazero instance
// per program, with a hard memory cap and a deterministic environment, so
// that a program, replayed anywhere, takes the same steps and ends the
// same way, and no program can take the worker's memory.
//
// The workflow calls Run from a workflow coroutine. The guest runs on its
// own goroutine and talks to Run over the wire protocol (package wire);
// Run alone calls the wire.Host (Start, Wait), always on its caller's
// goroutine, as Temporal requires.
//
// Compiling the module takes seconds, far past the SDK's 1 s deadlock
// detector, so New starts it in the background and the worker waits for
// Ready before it takes workflow tasks. With Options.Lazy nothing is
// compiled until the first Ready or Run: for a worker whose cache already
// holds the compiled module, which a load then takes well under a second
// (0.2-0.7 s on a loaded 2-core machine), and which should not hold the
// interpreter's ~60 MiB (its machine code, decoded module and warm
// instances) until a program runs. A pool of instances already
// started, blocked in their first recv, saves a program the instantiation
// and the guest's own start (about 12 ms): a small program then runs in
// about 1.5 ms. Each instance serves one program and is closed.
//
// The guest's code is compiled without wazero's context checks (see New),
// so a guest that is computing cannot be interrupted; it notices that it
// was stopped at its next host call, which the program's step limits
// bound. Those limits are therefore what bounds a workflow task's time
// between two calls: at about 2.5M steps/s in the guest (30 times slower
// than native), 1M steps take about 0.4 s on an idle machine.
package program

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/airlock-run/airlock/internal/wasmmem"
)

// Options configures a Runtime.
type Options struct {
	// CacheDir, when set, keeps the compiled module on disk
	// (wazero.NewCompilationCacheWithDir), so a new process skips most of
	// the compilation. Entries are keyed by wazero version, CPU features
	// and module hash.
	CacheDir string
	// Module is the guest: wasm.Program.
	Module []byte
	// Warm is how many started instances to keep ready for each memory cap
	// in use (default 2; the default cap's are started once compiled).
	Warm int
	// Lazy defers compiling (and warming) to the first Ready or Run. Set
	// it only when CacheDir holds the compiled module: the first Run
	// waits for the load on a workflow coroutine. Module is then read at
	// that first Ready or Run, and must not change after New.
	Lazy bool
}

// DefaultMemoryBytes is the memory cap for a memoryBytes of 0, and the cap
// whose instances New starts warming.
const DefaultMemoryBytes = 64 << 20

const (
	pageSize = wasmmem.PageSize
	maxPages = wasmmem.MaxPages
	// defaultWarm is Options.Warm's default.
	defaultWarm = 2
)

// ErrClosed is returned by Run and Ready after Close.
var ErrClosed = errors.New("program: runtime closed")

// Runtime compiles the guest once and runs programs in fresh instances of
// it. It is safe for concurrent use.
type Runtime struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache // nil without Options.CacheDir
	warm  int

	// ctx is the parent of every instance's context; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	module   []byte        // the guest (o.Module) until load copies it
	loadOnce sync.Once     // starts the compilation (load)
	started  atomic.Bool   // load has run
	ready    chan struct{} // closed when compilation has ended
	cm       wazero.CompiledModule
	minPages uint32 // the module's initial memory
	err      error  // compilation's

	mu     sync.Mutex
	closed bool
	pools  map[uint32]*pool
	// wg counts the goroutines Close waits for: the compiler, the
	// pools' fillers and every instance's guest.
	wg sync.WaitGroup
}

// New returns a Runtime and starts compiling o.Module in the background
// (with o.Lazy, at the first Ready or Run); Ready waits for it. The error is about the runtime itself (the cache
// directory, the host module); a module that does not compile is Ready's
// error. Close the Runtime to stop its instances.
func New(ctx context.Context, o Options) (*Runtime, error) {
	if len(o.Module) == 0 {
		return nil, errors.New("program: Options.Module is empty (want wasm.Program)")
	}
	if o.Warm < 0 {
		return nil, fmt.Errorf("program: Options.Warm is %d; want 0 for the default (%d) or more", o.Warm, defaultWarm)
	}
	r := &Runtime{warm: o.Warm, ready: make(chan struct{}), pools: map[uint32]*pool{}}
	if r.warm == 0 {
		r.warm = defaultWarm
	}
	rc := wazero.NewRuntimeConfig().
		// The most a wasm32 memory can hold: each instance's cap is its
		// allocator's (wasmmem.Allocator), so one compiled module serves all.
		WithMemoryLimitPages(maxPages).
		// Not WithCloseOnContextDone: its check at every loop header and
		// function entry made the guest 3 to 20 times slower (a Starlark
		// loop of 1M steps: 1.4 s instead of 0.6 s; a Go loop of 1e8
		// iterations 8.5 s instead of 0.4 s). Without it a guest that is
		// computing notices that it was stopped at its next host call; the
		// program's step and memory limits bound how long that takes.
		WithCloseOnContextDone(false)
	if o.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(o.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("program: compilation cache %s: %w", o.CacheDir, err)
		}
		r.cache = c
		rc = rc.WithCompilationCache(c)
	}
	r.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	fail := func(err error) (*Runtime, error) {
		_ = r.rt.Close(ctx)
		if r.cache != nil {
			_ = r.cache.Close(ctx)
		}
		return nil, err
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r.rt); err != nil {
		return fail(fmt.Errorf("program: wasi: %w", err))
	}
	_, err := r.rt.NewHostModuleBuilder(hostModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostSend),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		WithParameterNames("ptr", "len").Export("send").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostRecv),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		WithParameterNames("ptr", "cap").Export("recv").
		Instantiate(ctx)
	if err != nil {
		return fail(fmt.Errorf("program: host module %s: %w", hostModule, err))
	}
	// Detached from ctx, which may be New's caller's only: instances live
	// until Close.
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	// Kept as given until load copies it: with Lazy, a copy here would hold
	// the guest's 6 MiB in the heap of a process that may never run a
	// program (wasm.Program itself is in the binary).
	r.module = o.Module
	if !o.Lazy {
		r.load()
	}
	return r, nil
}

// load starts the compilation, once; after Close it ends it as ErrClosed
// without compiling.
func (r *Runtime) load() {
	r.loadOnce.Do(func() {
		r.started.Store(true)
		module := append([]byte(nil), r.module...)
		r.module = nil // compile holds the copy while it needs it
		r.mu.Lock()
		closed := r.closed
		if !closed {
			r.wg.Add(1)
		}
		r.mu.Unlock()
		if closed {
			r.err = ErrClosed
			close(r.ready)
			return
		}
		go r.compile(module)
	})
}

// Loading reports whether the compilation has started (always, without
// Options.Lazy).
func (r *Runtime) Loading() bool { return r.started.Load() }

// compile compiles the module, then starts warming the default cap.
func (r *Runtime) compile(module []byte) {
	defer r.wg.Done()
	cm, err := r.rt.CompileModule(r.ctx, module)
	if err == nil {
		err = checkModule(cm)
	}
	if err != nil {
		if r.ctx.Err() != nil {
			err = ErrClosed
		}
		r.err = fmt.Errorf("program: compile the guest: %w", err)
	} else {
		r.cm, r.minPages = cm, wasmmem.MinPages(module)
	}
	if err == nil {
		// Before Ready returns, so a worker that waited for it finds the
		// default cap warming.
		r.mu.Lock()
		if !r.closed {
			r.poolLocked(DefaultMemoryBytes / pageSize)
		}
		r.mu.Unlock()
	}
	close(r.ready)
}

// checkModule refuses a module that is not a guest of this host.
func checkModule(cm wazero.CompiledModule) error {
	for _, f := range cm.ImportedFunctions() {
		if mod, name, _ := f.Import(); mod != wasi_snapshot_preview1.ModuleName && mod != hostModule {
			return fmt.Errorf("it imports %s.%s; only %s and %s are provided", mod, name, wasi_snapshot_preview1.ModuleName, hostModule)
		}
	}
	if _, ok := cm.ExportedFunctions()["_start"]; !ok {
		return errors.New("it has no _start export (build it as a wasip1 command)")
	}
	return nil
}

// Ready waits until the module has compiled and returns the compile
// error, if any. Call it before taking workflow tasks: Run waits for it
// too, and a workflow task must not wait seconds.
func (r *Runtime) Ready(ctx context.Context) error {
	r.load()
	select {
	case <-r.ready:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops every instance, running programs' included (their Run
// returns ErrClosed), waits for their goroutines and releases the
// runtime. A guest that is computing stops at its next host call, which
// the program's step limits bound; if ctx ends first, Close returns its
// error and leaves the runtime to those guests. The on-disk cache stays
// for the next process.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	ended := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-ctx.Done():
		return fmt.Errorf("program: close: guests still computing: %w", ctx.Err())
	}
	errs := []error{r.rt.Close(ctx)}
	if r.cache != nil {
		errs = append(errs, r.cache.Close(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("program: close: %w", err)
	}
	return nil
}

func (r *Runtime) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}
