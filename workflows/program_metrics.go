package workflows

import (
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// ProgramObserver is told of each program's end: its outcome, the calls
// it made, the steps it ran and how long it took in workflow time
// (approval waits included). The worker's wiring sets it to the metrics
// (metrics.ObserveProgram).
type ProgramObserver func(outcome string, calls int, steps int64, d time.Duration)

// observer holds the process's ProgramObserver (nil: none).
var observer atomic.Pointer[ProgramObserver]

// ObservePrograms sets the process's ProgramObserver (nil: none).
func ObservePrograms(f ProgramObserver) {
	if f == nil {
		observer.Store(nil)
		return
	}
	observer.Store(&f)
}

// observeProgram tells the observer that a program ended with res, once:
// where it ends, whoever asked (the gateway inline, airlock_await later,
// a plan's step, a retry), and never while the workflow replays, as the
// SDK's own metrics handler does. It records nothing in the history, so
// it needs no version. A workflow task dropped after the program ended
// and retried counts it again, as it does the SDK's metrics.
func observeProgram(ctx workflow.Context, res api.ProgramResult, d time.Duration) {
	if workflow.IsReplaying(ctx) {
		return
	}
	if f := observer.Load(); f != nil {
		(*f)(string(res.Outcome), len(res.Calls), res.Steps, d)
	}
}
