package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-run/airlock/internal/program"
	"github.com/airlock-run/airlock/wasm"
	"github.com/airlock-run/airlock/workflows"
)

// startPrograms starts compiling the program interpreter (code mode, issue
// 27) for a worker, in the background: compiling the guest takes seconds
// the first time (it is cached under the data dir for the next start), and
// must be over before the worker polls, because a program's workflow task
// would otherwise wait for it and trip the SDK's deadlock detector. The
// worker waits for it (programsReady) after Temporal is up, so the two
// overlap. A configuration with programs turned off starts nothing: its
// worker refuses programs ("code mode is not enabled on this worker").
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
		rt, err := program.New(context.Background(), program.Options{CacheDir: cacheDir, Module: wasm.Program})
		if err != nil {
			return nil, err
		}
		procPrograms.rt = rt
	}
	return procPrograms.rt, nil
}

var procPrograms struct {
	mu sync.Mutex
	rt *program.Runtime
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
	t0 := time.Now()
	if err := s.programs.Ready(ctx); err != nil {
		return fmt.Errorf("the program interpreter (wasm.Program) did not compile: %w", err)
	}
	workflows.UseProgramRunner(s.programs)
	s.env.log.Info().Dur("waited", time.Since(t0)).Msg("program interpreter ready (code mode: airlock_run_program)")
	return nil
}
