package api

import (
	"time"

	"github.com/airlock-run/airlock/plans"
)

// Program steps of a plan (issue 27 §6): PrepareStep resolves a program
// step into a whole ProgramRequest (source, tool table, effective limits),
// so the request that steers the program is in history as the local
// activity's result, never recomputed from the worker's defaults on
// replay.

// PlanProgramID is the program ID of a plan's program step: the step's
// call ID, so its calls are step-<id>/1, step-<id>/2, …
func PlanProgramID(stepID string) string { return "step-" + stepID }

// PlanProgramLimits are DefaultProgramLimits with a step's overrides,
// held to the ceilings plans.Validate enforces (a plan may reach the
// workflow as JSON, unvalidated).
func PlanProgramLimits(o *plans.ProgramLimits) ProgramLimits {
	if o == nil {
		return DefaultProgramLimits
	}
	// max(…, 0): a negative MemoryMB, shifted, could turn positive.
	l := ProgramLimits{
		MaxSourceBytes:       o.MaxSourceBytes,
		MaxCalls:             o.MaxCalls,
		MaxDataBytes:         o.MaxDataBytes,
		MaxResultBytes:       o.MaxResultBytes,
		MaxPrintBytes:        o.MaxPrintBytes,
		MaxSteps:             o.MaxSteps,
		MaxStepsBetweenCalls: o.MaxStepsBetweenCalls,
		MaxParallel:          o.MaxParallel,
		MemoryBytes:          int64(min(max(o.MemoryMB, 0), plans.MaxProgramMemoryMB)) << 20,
		Timeout:              time.Duration(o.Timeout),
	}.Or(DefaultProgramLimits)
	l.MaxSourceBytes = min(l.MaxSourceBytes, plans.MaxProgramSourceBytes)
	l.MaxDataBytes = min(l.MaxDataBytes, plans.MaxProgramDataBytes)
	l.MaxResultBytes = min(l.MaxResultBytes, plans.MaxProgramDataBytes)
	l.MaxPrintBytes = min(l.MaxPrintBytes, plans.MaxProgramDataBytes)
	return l
}
