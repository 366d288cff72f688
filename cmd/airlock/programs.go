package main

import (
	"context"
	"fmt"
	"path/filepath"
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
	rt, err := program.New(ctx, program.Options{CacheDir: filepath.Join(e.dataDir, "wasm-cache"), Module: wasm.Program})
	if err != nil {
		return fmt.Errorf("starting the program interpreter: %w", err)
	}
	s.programs = rt
	s.stops = append(s.stops, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	return nil
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
