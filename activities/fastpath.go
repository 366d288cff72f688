package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// DecideAndCall is the fast path of a call (a local activity): the policy
// decision, recorded as Decide records it, and, when the decision is a
// plain allow for a tool this worker's manifest declares idempotent and
// low-risk, with no capture and no compensation, the call itself. A local
// activity runs again if the worker dies before its workflow task
// completes, so only a tool that may run twice takes this path; every
// other call returns the decision alone and continues the regular
// pipeline (approval, capture, the CallTool activity, compensation).
//
// A failed call is not an error of the local activity (which would run
// the decision and the call again): it is reported in the output, for the
// workflow to classify and retry as it does CallTool's failures.
//
// The call runs the route the decision judged (DecideOutput.Route, from
// this worker's catalog), whatever server and upstream tool the request
// named; the fast path is only for tools this catalog declares.
func (a *Activities) DecideAndCall(ctx context.Context, in api.DecideAndCallInput) (api.DecideAndCallOutput, error) {
	d, err := a.Decide(ctx, in.Decide)
	if err != nil {
		return api.DecideAndCallOutput{}, err
	}
	out := api.DecideAndCallOutput{Decision: d}
	if !a.fastPath(in.Decide.Tool, d) || a.holdsResults(in.Decide.Tool, in.Decide.Principal.Roles) {
		return out, nil
	}
	out.Ran = true
	call := in.Call
	if call.Roles == nil { // the content guard of the result reads the caller's roles
		call.Roles = in.Decide.Principal.Roles
	}
	if r := d.Route; r != nil {
		// Run what was judged: this worker's route, not the request's.
		call.Server, call.Tool, call.Idempotent = r.Server, r.UpstreamTool, r.Spec.Idempotent
	}
	res, err := a.CallTool(ctx, call)
	if err != nil {
		out.ErrorType, out.Error = api.ErrTypeInternal, err.Error()
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) {
			out.ErrorType, out.Error = appErr.Type(), appErr.Message()
		}
		return out, nil
	}
	out.Call = &res
	return out, nil
}

// fastPath reports whether a call so decided may run inside its local
// activity: allowed outright, and its tool declared (in this worker's own
// manifests, not the caller's view) idempotent and low-risk, with no
// capture and no compensation, and no rule that may apply to it reading
// the task's counters.
func (a *Activities) fastPath(tool string, d api.DecideOutput) bool {
	if d.Effect != api.Allow || d.Approval != nil || d.Capture != nil || d.CaptureError != "" || d.Compensable || len(d.Locks) > 0 {
		return false
	}
	j := a.judge()
	t, ok := j.Catalog.Tool(tool)
	// A rule over the task's counters decided on state that a dropped
	// workflow task had not committed: the call goes the regular way,
	// where its decision is committed before it runs (issue 25 item 3,
	// as workflows' counted() does for budgets and rate limits).
	return ok && t.Decl != nil && t.Decl.Idempotent && t.Decl.Risk == manifests.RiskLow &&
		t.Decl.Compensation == nil && t.Decl.Capture == nil && !j.Policy.ReadsTaskCounters(tool)
}
