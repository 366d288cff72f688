// Package sandbox runs native tools: WASI (wasip1) command modules executed
// in-process by wazero, one fresh instance per call. Instances are started
// ahead of their calls and wait, parked, at their first use of one (see
// pool.go and instance.go), so that a call does not pay for instantiation
// or the guest's own start; no instance serves two calls. A module of the
// reactor ABI (reactor.go) goes further: its start, _initialize, runs once
// per call shape, and each later instance is made from a copy-on-write
// snapshot of the state it left, so that starting one costs a fraction of
// a command's start.
//
// A call sees only what its Call gives it: argv, stdin, exactly the listed
// environment variables, and the listed directory mounts. There are no
// sockets, clocks are real, random numbers come from crypto/rand, and each
// call is bounded in memory, wall time, output and open files (see Limits);
// each read-write mount in the bytes and entries it may hold (see Mount). A
// guest's memory lives outside the Go heap where the OS allows and is
// returned when its call ends. A tool that exits non-zero is not an error here: Result.ExitCode says so, and the
// caller decides what it means for the agent.
//
// sandbox imports only wazero, the standard library and internal/wasmmem
// (the memory allocator it shares with internal/program), returns errors
// and never logs.
package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/airlock-run/airlock/internal/wasmmem"
)

// Options configures a Sandbox. The zero value is ready to use.
type Options struct {
	// CacheDir, when set, keeps compiled modules on disk
	// (wazero.NewCompilationCacheWithDir), so a new process skips compilation.
	// Entries are keyed by wazero version, CPU features and module hash, so a
	// stale directory is never misused, only ignored.
	CacheDir string
	// Warm is how many started instances each call shape (a Call but its
	// Stdin: one native tool) keeps ready, so that a call does not wait
	// for instantiation (see pool); 0 means DefaultWarm, a negative value
	// none (every call instantiates afresh).
	Warm int
}

// Sandbox compiles and runs WASI modules. It is safe for concurrent use.
//
// It keeps one wazero Runtime, allowing a guest the most a wasm32 memory
// can hold, and compiles each distinct module (by hash) once; a call's own
// memory limit is enforced by the memory allocator each call gets (see
// wasmmem.Allocator), not by the Runtime. Between calls it keeps only that
// compiled code and the warm instances, which no call has used: a call's
// instance, memory and open files go with it.
type Sandbox struct {
	cache wazero.CompilationCache // nil without Options.CacheDir
	warm  int
	// ctx is every instance's parent: Close cancels it, stopping them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // fillers and instances not yet released

	mu        sync.Mutex
	closed    bool
	rt        wazero.Runtime // created on first use
	compiled  map[[sha256.Size]byte]*compileEntry
	quotas    map[string]*quota    // read-write mounts of calls in progress
	pools     map[string]*pool     // by shape key
	snapshots map[string]*snapshot // reactors' state after _initialize, by shape key
	instances int                  // started and not yet released, warm or running

	warmCalls, coldCalls atomic.Int64
}

// compileEntry lets concurrent callers wait for one compilation instead of
// racing to do the same work (wazero's cache does not deduplicate them).
type compileEntry struct {
	done chan struct{}
	cm   wazero.CompiledModule
	err  error
}

// New returns a Sandbox. Close it to release compiled code.
func New(ctx context.Context, o Options) (*Sandbox, error) {
	s := &Sandbox{
		warm:      o.Warm,
		compiled:  map[[sha256.Size]byte]*compileEntry{},
		quotas:    map[string]*quota{},
		pools:     map[string]*pool{},
		snapshots: map[string]*snapshot{},
	}
	if s.warm == 0 {
		s.warm = DefaultWarm
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if o.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(o.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("sandbox: compilation cache %s: %w", o.CacheDir, err)
		}
		s.cache = c
	}
	return s, nil
}

// Errors Load returns, wrapped with detail; test them with errors.Is.
var (
	// ErrClosed is returned by Load and Run after Close.
	ErrClosed = errors.New("sandbox: closed")
	// ErrMismatch: the module's SHA-256 is not the one it was pinned to.
	ErrMismatch = errors.New("sha256 mismatch")
	// ErrInvalidModule: the file is not a WASI command module the sandbox
	// can run (not wasm, imports beyond WASI, no _start).
	ErrInvalidModule = errors.New("not a usable WASI command module")
)

// Close stops running calls and the warm instances and releases them, the
// runtime and compiled code; it returns once they are released. The
// on-disk cache, if any, stays for the next process.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	rt := s.rt
	s.rt = nil
	s.compiled = nil
	s.pools = nil
	snaps := s.snapshots
	s.snapshots = nil
	s.mu.Unlock()

	// Stops every instance, warm or running (Run reports ErrClosed), and
	// the fillers, and waits for them: each guest closes its own module
	// on its way out. Closing the runtime under a guest still inside a
	// host function would race with it in wazero.
	s.cancel()
	s.wg.Wait()
	var errs []error
	for _, sn := range snaps {
		errs = append(errs, sn.image.Close())
	}
	if rt != nil {
		errs = append(errs, rt.CloseWithExitCode(ctx, 1))
	}
	if s.cache != nil {
		errs = append(errs, s.cache.Close(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox: close: %w", err)
	}
	return nil
}

// Module is a loaded, verified module. It is safe for concurrent use: every
// Run gets its own instance.
type Module struct {
	s    *Sandbox
	hash [sha256.Size]byte
	name string // argv[0]
	cm   wazero.CompiledModule
	// reactor is set for a module of the snapshot ABI (see reactor.go):
	// what its instances need to start as after _initialize.
	reactor *wasmmem.Reactor
	// minPages is the largest initial size of a memory the module
	// defines, to refuse a call whose limit it does not fit before
	// instantiating it.
	minPages uint32
}

// Name is the program name the guest sees as argv[0]: the file name
// without its extension.
func (m *Module) Name() string { return m.name }

// Load reads the module at path, checks its SHA-256 (hex) — a mismatch is
// ErrMismatch naming the file, the expected and the actual hash, and
// nothing is compiled — and compiles it once (later Loads of the same hash
// reuse it). A module that cannot run is ErrInvalidModule, here rather than
// at its first call. How much memory the module declares is checked
// against each call's limit, not here.
func (s *Sandbox) Load(ctx context.Context, path, sha256hex string) (*Module, error) {
	want, err := hex.DecodeString(strings.TrimSpace(sha256hex))
	if err != nil || len(want) != sha256.Size {
		return nil, fmt.Errorf("sandbox: load %s: sha256 %q is not 64 hex digits", path, sha256hex)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox: load: %w", err)
	}
	got := sha256.Sum256(b)
	if [sha256.Size]byte(want) != got {
		return nil, fmt.Errorf("sandbox: load %s: %w: expected %x, actual %x",
			path, ErrMismatch, want, got)
	}
	// Coalesced data segments instantiate in a fraction of the time
	// (see wasmmem.MergeData); the pin is on the module as written.
	code := wasmmem.MergeData(b)
	var rx *wasmmem.Reactor
	if wasmmem.HasExports(b, reactorInit, reactorRun) {
		// A reactor of the snapshot ABI (see reactor.go): compiled with
		// its data segments taken out and its globals exported.
		if rx, err = wasmmem.PrepareReactor(b); err != nil {
			return nil, fmt.Errorf("sandbox: load %s: %w: exports %s and %s but cannot be run from a snapshot: %v",
				path, ErrInvalidModule, reactorInit, reactorRun, err)
		}
		code = rx.Module
	}
	cm, err := s.compile(ctx, got, code)
	if err != nil {
		return nil, fmt.Errorf("sandbox: load %s: %w", path, err)
	}
	// Checked here so that a module that cannot run fails at Load, not as
	// a puzzling error on every call.
	for _, f := range cm.ImportedFunctions() {
		if mod, name, _ := f.Import(); mod != wasi_snapshot_preview1.ModuleName {
			return nil, fmt.Errorf("sandbox: load %s: %w: imports %s.%s; only %s is provided",
				path, ErrInvalidModule, mod, name, wasi_snapshot_preview1.ModuleName)
		}
	}
	if len(cm.ImportedMemories()) > 0 {
		return nil, fmt.Errorf("sandbox: load %s: %w: imports a memory; a WASI command defines its own", path, ErrInvalidModule)
	}
	if rx != nil {
		if err := checkReactor(cm); err != nil {
			return nil, fmt.Errorf("sandbox: load %s: %w: %v", path, ErrInvalidModule, err)
		}
	} else if _, ok := cm.ExportedFunctions()["_start"]; !ok {
		return nil, fmt.Errorf("sandbox: load %s: %w: no _start export (nor the reactor ABI's %s and %s)",
			path, ErrInvalidModule, reactorInit, reactorRun)
	}
	return &Module{
		s:        s,
		hash:     got,
		name:     strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)),
		cm:       cm,
		reactor:  rx,
		minPages: wasmmem.MinPages(b),
	}, nil
}

// runtime returns the Runtime, creating it on first use. Callers hold s.mu.
func (s *Sandbox) runtime(ctx context.Context) (wazero.Runtime, error) {
	if s.rt != nil {
		return s.rt, nil
	}
	rc := wazero.NewRuntimeConfig().
		// The most a wasm32 memory can hold: each call's limit is its
		// allocator's (wasmmem.Allocator), so one Runtime and one compiled copy
		// of a module serve every limit.
		WithMemoryLimitPages(maxPages).
		// Without this a timeout cancels the context but the guest keeps
		// spinning: wazero only checks the context at function boundaries
		// and loop headers when asked to.
		WithCloseOnContextDone(true)
	if s.cache != nil {
		rc = rc.WithCompilationCache(s.cache)
	}
	r := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
		_ = r.Close(ctx)
		return nil, fmt.Errorf("wasi: %w", err)
	}
	s.rt = r
	return r, nil
}

// compile returns the module with this hash compiled, compiling it on
// first use.
func (s *Sandbox) compile(ctx context.Context, hash [sha256.Size]byte, wasm []byte) (wazero.CompiledModule, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if e, ok := s.compiled[hash]; ok {
		s.mu.Unlock()
		select {
		case <-e.done:
			return e.cm, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r, err := s.runtime(ctx)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	e := &compileEntry{done: make(chan struct{})}
	s.compiled[hash] = e
	s.mu.Unlock()

	e.cm, e.err = r.CompileModule(ctx, wasm)
	if e.err != nil {
		e.err = fmt.Errorf("%w: compile: %w", ErrInvalidModule, e.err)
		if ctx.Err() != nil {
			e.err = fmt.Errorf("compile: %w", ctx.Err())
		}
		// Forget the failure so a later call may try again (the context may
		// have been what failed); waiters already holding e still see it.
		s.mu.Lock()
		if s.compiled != nil && s.compiled[hash] == e {
			delete(s.compiled, hash)
		}
		s.mu.Unlock()
	}
	close(e.done)
	return e.cm, e.err
}
