package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Programs (code mode, issue 27): each program is observed once, where it
// ends, by the task that ran it (workflows.ObservePrograms, set by the
// worker to ObserveProgram): whoever collects it (the gateway inline,
// airlock_await later, a plan's step), never during a replay, and not
// again for a retry answered from the task's memory.
var (
	// Programs counts programs by outcome: ok, error, invalid, limit,
	// stopped (api.ProgramOutcome), or "other" for a value airlock does
	// not know (an airlock bug; the label set stays bounded).
	Programs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "programs_total",
		Help: "Programs (code mode) ended, by outcome (ok, error, invalid, limit, stopped).",
	}, []string{"outcome"})

	// ProgramCalls is how many tool calls a program made (those refused
	// by its limits included).
	ProgramCalls = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "airlock", Name: "program_calls",
		Help:    "Tool calls one program made (code mode), refused ones included.",
		Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
	})

	// ProgramSteps is how many interpreter steps a program ran: near
	// Limits.MaxSteps (default 10M), programs are being stopped by it.
	ProgramSteps = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "airlock", Name: "program_steps",
		Help:    "Interpreter steps one program ran (code mode).",
		Buckets: prometheus.ExponentialBuckets(100, 10, 7), // 100 … 100M
	})

	// ProgramDuration is how long a program took in workflow time,
	// approval waits included: milliseconds to its timeout (default 1h) and beyond.
	ProgramDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "airlock", Name: "program_duration_seconds",
		Help:    "Time from a program's start to its end in its task (code mode), approval waits included.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 600, 1800, 3600, 4 * 3600},
	})
)

func init() { Registry.MustRegister(Programs, ProgramCalls, ProgramSteps, ProgramDuration) }

// ObserveProgram records one program's result (its api.ProgramOutcome,
// calls made and steps run), d being the time from its request to its
// result. metrics is a library below the contract, so it takes the
// result's parts, not an api.ProgramResult.
func ObserveProgram(outcome string, calls int, steps int64, d time.Duration) {
	Programs.WithLabelValues(programOutcome(outcome)).Inc()
	ProgramCalls.Observe(float64(max(calls, 0)))
	ProgramSteps.Observe(float64(max(steps, 0)))
	ProgramDuration.Observe(max(d, 0).Seconds())
}

// programOutcomes are the api.ProgramOutcome values (a label value
// outside them is "other", so the label set stays small).
var programOutcomes = map[string]bool{"ok": true, "error": true, "invalid": true, "limit": true, "stopped": true}

func programOutcome(o string) string {
	if programOutcomes[o] {
		return o
	}
	return "other"
}
