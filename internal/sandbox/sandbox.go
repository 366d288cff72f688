// Package sandbox runs native tools: WASI (wasip1) command modules executed
// in-process by wazero, one fresh instance per call.
//
// A call sees only what its Call gives it: argv, stdin, exactly the listed
// environment variables, and the listed directory mounts. There are no
// sockets, clocks are real, random numbers come from crypto/rand, and each
// call is bounded in memory, wall time and output (see Limits). A tool that
// exits non-zero is not an error here: Result.ExitCode says so, and the
// caller decides what it means for the agent.
//
// sandbox is a leaf package: it imports only wazero and the standard
// library, returns errors and never logs.
package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Options configures a Sandbox. The zero value is ready to use.
type Options struct {
	// CacheDir, when set, keeps compiled modules on disk
	// (wazero.NewCompilationCacheWithDir), so a new process skips compilation.
	// Entries are keyed by wazero version, CPU features and module hash, so a
	// stale directory is never misused, only ignored.
	CacheDir string
}

// Sandbox compiles and runs WASI modules. It is safe for concurrent use.
//
// wazero fixes the memory limit per Runtime, so a Sandbox keeps one Runtime
// per distinct page limit, all sharing one CompilationCache, and compiles a
// module at most once per Runtime.
type Sandbox struct {
	cache wazero.CompilationCache

	mu       sync.Mutex
	closed   bool
	runtimes map[uint32]wazero.Runtime
	compiled map[compileKey]*compileEntry
}

type compileKey struct {
	pages uint32
	hash  [sha256.Size]byte
}

// compileEntry lets concurrent callers wait for one compilation instead of
// racing to do the same work (wazero's cache does not deduplicate them).
type compileEntry struct {
	done chan struct{}
	r    wazero.Runtime
	cm   wazero.CompiledModule
	err  error
}

// New returns a Sandbox. Close it to release compiled code.
func New(ctx context.Context, o Options) (*Sandbox, error) {
	var cache wazero.CompilationCache
	if o.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(o.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("sandbox: compilation cache %s: %w", o.CacheDir, err)
		}
		cache = c
	} else {
		cache = wazero.NewCompilationCache()
	}
	return &Sandbox{
		cache:    cache,
		runtimes: map[uint32]wazero.Runtime{},
		compiled: map[compileKey]*compileEntry{},
	}, nil
}

// ErrClosed is returned by Load and Run after Close.
var ErrClosed = errors.New("sandbox: closed")

// Close stops running calls and releases every runtime and the in-memory
// cache. The on-disk cache, if any, stays for the next process.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	runtimes := s.runtimes
	s.runtimes = nil
	s.compiled = nil
	s.mu.Unlock()

	var errs []error
	for _, r := range runtimes {
		// A non-zero code makes calls still running fail (Run reports
		// ErrClosed) instead of looking like a clean exit.
		errs = append(errs, r.CloseWithExitCode(ctx, 1))
	}
	errs = append(errs, s.cache.Close(ctx))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox: close: %w", err)
	}
	return nil
}

// Module is a loaded, verified module. It is safe for concurrent use: every
// Run gets its own instance.
type Module struct {
	s    *Sandbox
	name string // argv[0]
	hash [sha256.Size]byte
	wasm []byte // kept to compile for other memory limits
	// mems are the memories the module declares (a WASI command exports
	// its memory), to tell a limit too small for them from other
	// compile failures.
	mems []api.MemoryDefinition
}

// overLimit reports whether a memory the module declares does not fit
// pages: its initial size, or a maximum it declares, is larger. wazero
// refuses to compile such a module for that limit.
func (m *Module) overLimit(pages uint32) bool {
	for _, d := range m.mems {
		if max, ok := d.Max(); d.Min() > pages || (ok && max > pages) {
			return true
		}
	}
	return false
}

// Name is the program name the guest sees as argv[0]: the file name
// without its extension.
func (m *Module) Name() string { return m.name }

// Load reads the module at path, checks its SHA-256 (hex) — a mismatch is an
// error naming the file, the expected and the actual hash, and nothing is
// compiled — and compiles it once (later Loads of the same hash reuse it).
// It is compiled for the default memory limit here, so an invalid module
// fails at Load rather than at its first call.
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
		return nil, fmt.Errorf("sandbox: load %s: sha256 mismatch: expected %x, actual %x",
			path, want, got)
	}
	m := &Module{
		s:    s,
		name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)),
		hash: got,
		wasm: b,
	}
	_, cm, err := s.compile(ctx, m, pagesFor(0))
	if err != nil {
		return nil, fmt.Errorf("sandbox: load %s: %w", path, err)
	}
	// Checked here so that a module that cannot run fails at Load, not as
	// a puzzling error on every call.
	for _, f := range cm.ImportedFunctions() {
		if mod, name, _ := f.Import(); mod != wasi_snapshot_preview1.ModuleName {
			return nil, fmt.Errorf("sandbox: load %s: imports %s.%s; only %s is provided",
				path, mod, name, wasi_snapshot_preview1.ModuleName)
		}
	}
	if _, ok := cm.ExportedFunctions()["_start"]; !ok {
		return nil, fmt.Errorf("sandbox: load %s: not a WASI command: no _start export", path)
	}
	m.mems = append(cm.ImportedMemories(), slices.Collect(maps.Values(cm.ExportedMemories()))...)
	return m, nil
}

// runtime returns the Runtime for a page limit, creating it on first use.
// Callers hold s.mu.
func (s *Sandbox) runtime(ctx context.Context, pages uint32) (wazero.Runtime, error) {
	if r, ok := s.runtimes[pages]; ok {
		return r, nil
	}
	rc := wazero.NewRuntimeConfig().
		WithMemoryLimitPages(pages).
		// Without this a timeout cancels the context but the guest keeps
		// spinning: wazero only checks the context at function boundaries
		// and loop headers when asked to.
		WithCloseOnContextDone(true).
		WithCompilationCache(s.cache)
	r := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
		_ = r.Close(ctx)
		return nil, fmt.Errorf("wasi: %w", err)
	}
	s.runtimes[pages] = r
	return r, nil
}

// compile returns the runtime for the given page limit and m compiled for
// it, compiling on first use.
func (s *Sandbox) compile(ctx context.Context, m *Module, pages uint32) (wazero.Runtime, wazero.CompiledModule, error) {
	key := compileKey{pages: pages, hash: m.hash}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if e, ok := s.compiled[key]; ok {
		s.mu.Unlock()
		select {
		case <-e.done:
			return e.r, e.cm, e.err
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	r, err := s.runtime(ctx, pages)
	if err != nil {
		s.mu.Unlock()
		return nil, nil, err
	}
	e := &compileEntry{done: make(chan struct{}), r: r}
	s.compiled[key] = e
	s.mu.Unlock()

	e.cm, e.err = r.CompileModule(ctx, m.wasm)
	if e.err != nil {
		e.err = fmt.Errorf("compile: %w", e.err)
		// Forget the failure so a later call may try again (the context may
		// have been what failed); waiters already holding e still see it.
		s.mu.Lock()
		if s.compiled != nil && s.compiled[key] == e {
			delete(s.compiled, key)
		}
		s.mu.Unlock()
	}
	close(e.done)
	return e.r, e.cm, e.err
}
