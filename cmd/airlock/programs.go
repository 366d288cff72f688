package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/airlock-run/airlock/internal/program"
	"github.com/airlock-run/airlock/wasm"
	"github.com/airlock-run/airlock/workflows"
)

// startPrograms starts the program interpreter (code mode, issue 27) for
// a worker. Compiling the guest takes seconds the first time (10-13 s on a
// loaded 2-core machine; it is cached under the data dir for the next
// start), and must then be over before the worker polls, because a
// program's workflow task would otherwise wait for it and trip the SDK's
// deadlock detector: the worker waits for it (programsReady) after
// Temporal is up, so the two overlap. Once the cache holds the compiled
// guest (interpreterCached), the interpreter is lazy instead: loaded by
// the first program (a load from the cache takes 0.2-0.7 s, well inside
// the worker's 5 s deadlock detection), so that a process that runs no
// program does not hold its ~60 MiB. A configuration with programs turned
// off starts nothing: its worker refuses programs ("code mode is not
// enabled on this worker").
func (s *stack) startPrograms(ctx context.Context, r roles) error {
	e := s.env
	if !r.worker || !e.snap.Config.Programs.ProgramsEnabled() {
		return nil
	}
	rt, err := processPrograms(e.wasmCache())
	if err != nil {
		return fmt.Errorf("starting the program interpreter: %w", err)
	}
	s.programs = rt
	return nil
}

// processPrograms is the process's one program interpreter, started by
// the first worker that wants it and never closed: a process's workflows
// have one runner (workflows.UseProgramRunner), so stacks started one
// after another in one process (tests) share it rather than one closing
// what the next still uses. Its compiled code and warm instances go with
// the process.
func processPrograms(cacheDir string) (*program.Runtime, error) {
	procPrograms.mu.Lock()
	defer procPrograms.mu.Unlock()
	if procPrograms.rt == nil {
		lazy := interpreterCached(cacheDir)
		rt, err := program.New(context.Background(), program.Options{CacheDir: cacheDir, Module: wasm.Program, Lazy: lazy})
		if err != nil {
			return nil, err
		}
		procPrograms.rt, procPrograms.cacheDir = rt, cacheDir
	}
	return procPrograms.rt, nil
}

var procPrograms struct {
	mu       sync.Mutex
	rt       *program.Runtime
	cacheDir string
}

// interpreterMarker is the file in the compilation cache that says the
// cache holds this build's compiled interpreter: written once it compiled
// there, named for what wazero keys its entries by that a process can
// know (the guest's pinned hash, wasm.ProgramSHA256, which go test ./wasm
// holds to the embedded module: hashing the 6 MiB at every start would
// bring its pages in for nothing; wazero's version; the architecture). wazero
// also keys by CPU features: a cache copied to another kind of CPU misses,
// and the first program then compiles on its workflow task (which the
// deadlock detector may fail once; it is retried, and finds it compiled).
func interpreterMarker(cacheDir string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00wazero %s %s/%s", wasm.ProgramSHA256, wazeroVersion(), runtime.GOOS, runtime.GOARCH)
	return filepath.Join(cacheDir, "airlock-program-"+hex.EncodeToString(h.Sum(nil))[:32]+".compiled")
}

// interpreterCached reports whether the cache holds the compiled
// interpreter (its marker is there).
func interpreterCached(cacheDir string) bool {
	_, err := os.Stat(interpreterMarker(cacheDir))
	return err == nil
}

// markInterpreterCached writes the marker after a compile into cacheDir;
// a failure only means the next start compiles eagerly again.
func markInterpreterCached(cacheDir string) error {
	f := interpreterMarker(cacheDir)
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		return fmt.Errorf("marking the program interpreter compiled in %s: %w", cacheDir, err)
	}
	return nil
}

// wazeroVersion is the wazero module's version in this build ("" where the
// build does not say, as in tests: then any version matches).
func wazeroVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/tetratelabs/wazero" {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

// envWASMCache names the directory of wazero's compilation cache (default
// <data dir>/wasm-cache): the native tools' and the program interpreter's
// compiled code, kept between starts. Several data dirs may share one (the
// entries are keyed by wazero version, CPU and module hash), as the tests
// do, so that each airlock they start does not compile the modules again.
const envWASMCache = "AIRLOCK_WASM_CACHE"

// wasmCache is the compilation cache directory (envWASMCache).
func (e *env) wasmCache() string {
	if d := os.Getenv(envWASMCache); d != "" {
		return d
	}
	return filepath.Join(e.dataDir, "wasm-cache")
}

// programsReady waits for the interpreter to compile and makes it this
// process's program runner. An interpreter that failed to compile is an
// error: the worker must not poll and fail every program's workflow task.
func (s *stack) programsReady(ctx context.Context) error {
	if s.programs == nil {
		workflows.UseProgramRunner(nil)
		return nil
	}
	if !s.programs.Loading() {
		workflows.UseProgramRunner(s.programs)
		s.env.log.Info().Msg("program interpreter compiled in the cache: the first program loads it (code mode: airlock_run_program)")
		return nil
	}
	t0 := time.Now()
	if err := s.programs.Ready(ctx); err != nil {
		return fmt.Errorf("the program interpreter (wasm.Program) did not compile: %w", err)
	}
	workflows.UseProgramRunner(s.programs)
	procPrograms.mu.Lock()
	dir := procPrograms.cacheDir // the runtime's, which may be an earlier stack's
	procPrograms.mu.Unlock()
	if err := markInterpreterCached(dir); err != nil {
		s.env.log.Warn().Err(err).Msg("the next start compiles the program interpreter again")
	}
	s.env.log.Info().Dur("waited", time.Since(t0)).Msg("program interpreter ready (code mode: airlock_run_program)")
	return nil
}
