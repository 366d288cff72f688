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
	l := DefaultProgramLimits
	if o == nil {
		return l
	}
	setInt := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	setInt(&l.MaxSourceBytes, o.MaxSourceBytes)
	setInt(&l.MaxCalls, o.MaxCalls)
	setInt(&l.MaxDataBytes, o.MaxDataBytes)
	setInt(&l.MaxResultBytes, o.MaxResultBytes)
	setInt(&l.MaxPrintBytes, o.MaxPrintBytes)
	setInt(&l.MaxParallel, o.MaxParallel)
	if o.MaxSteps > 0 {
		l.MaxSteps = o.MaxSteps
	}
	if o.MaxStepsBetweenCalls > 0 {
		l.MaxStepsBetweenCalls = o.MaxStepsBetweenCalls
	}
	if o.MemoryMB > 0 {
		l.MemoryBytes = int64(min(o.MemoryMB, plans.MaxProgramMemoryMB)) << 20
	}
	if o.Timeout > 0 {
		l.Timeout = time.Duration(o.Timeout)
	}
	l.MaxSourceBytes = min(l.MaxSourceBytes, plans.MaxProgramSourceBytes)
	l.MaxDataBytes = min(l.MaxDataBytes, plans.MaxProgramDataBytes)
	l.MaxResultBytes = min(l.MaxResultBytes, plans.MaxProgramDataBytes)
	l.MaxPrintBytes = min(l.MaxPrintBytes, plans.MaxProgramDataBytes)
	return l
}
