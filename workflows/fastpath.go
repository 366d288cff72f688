package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// fastPathMaxTimeout bounds the tools that may run in a local activity:
// one holds its workflow task while it runs, so a long one belongs in an
// activity of its own.
const fastPathMaxTimeout = time.Minute

// fastHeadroom is how many calls of max_calls (and of the ledger) must
// remain for a call to take the fast path: history.maxInFlightUpdates of
// the server, the most Updates one workflow task can admit at once
// (internal/devserver sets 64, and deploy/README.md asks a cluster for
// it; raise this with it, behind a new version). A call that ran in a
// dropped workflow task and is delivered again to the retried one is then
// among at most that many, and still finds room. Runs from before
// changeFastHeadroom keep fastHeadroomV0, Temporal's default limit.
const (
	fastHeadroom   = 64
	fastHeadroomV0 = 10
)

// fastDeadlineMargin is how long before the task's deadline its calls
// leave the fast path, for the same reason: a retried workflow task comes
// later, and must not find a call that ran already past the deadline.
const fastDeadlineMargin = time.Minute

// fastEligible reports whether req may try the fast path. This is the
// workflow's view (the gateway's copy of the manifest); the worker checks
// its own manifests and the decision before it runs anything. It is asked
// after the call was admitted and counted (t.calls includes it).
func (t *task) fastEligible(req api.CallRequest, now time.Time) bool {
	s := req.Spec
	return t.fast && s.Idempotent && s.Risk == string(manifests.RiskLow) &&
		req.ArgumentsRef == "" && s.Timeout > 0 && s.Timeout <= fastPathMaxTimeout &&
		!(t.mrtrOn && s.MayAsk) && // a local activity has no heartbeats to carry its upstream's requests (mrtr.go)
		!(t.fastUncounted && t.counted(req, now))
}

// counted reports whether req's admission depended on state a dropped
// workflow task would not have committed: a budget (every call of a task
// with one costs), a rate limit over its tool, little headroom left under
// max_calls or the ledger, or a deadline near.
func (t *task) counted(req api.CallRequest, now time.Time) bool {
	if q := t.in.Quota; q != nil {
		if q.Budget > 0 {
			return true
		}
		for _, l := range q.Rates {
			if l.Applies(req.Tool) {
				return true
			}
		}
	}
	if lim := t.in.Limits.MaxCalls; lim > 0 && lim-t.calls < t.headroom {
		return true
	}
	if t.ledger != nil && api.MaxTaskCalls-t.ledger.Len()-len(t.inFlight) < t.headroom {
		return true
	}
	if dl := t.in.Limits.Deadline; !dl.IsZero() && dl.Sub(now) < fastDeadlineMargin {
		return true
	}
	return false
}

// decideAndCall runs DecideAndCall. It returns the decision and, when the
// worker ran the call, its result; nil means the call is not done and
// continues the regular pipeline under the decision (approval, capture,
// CallTool, compensation, or its denial).
func (t *task) decideAndCall(ctx workflow.Context, req api.CallRequest, now time.Time) (api.Decision, api.DecideOutput, *api.CallResult, []api.Finding) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		// As the CallTool activity: a little past the tool's own timeout
		// (the request's spec: the judged one comes with the decision).
		StartToCloseTimeout: req.Spec.Timeout + timeoutGrace,
		// One attempt: a failed call is reported in the output, not as an
		// error; what is left (a timeout, a decision that failed) is
		// handled below rather than by running the call again here, which
		// would hold the workflow task for another timeout.
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	in := api.DecideAndCallInput{
		Decide: t.decideInput(req, now),
		Call: api.CallToolInput{TaskID: t.in.TaskID, CallID: req.CallID, Attempt: 1,
			Server: req.Server, Tool: req.UpstreamTool, Arguments: req.Arguments,
			Idempotent: req.Spec.Idempotent, ExposedName: req.Tool, ProgressToken: req.ProgressToken, Subject: req.Subject},
	}
	var o api.DecideAndCallOutput
	if err := workflow.ExecuteLocalActivity(lctx, api.DecideAndCallName, in).Get(ctx, &o); err != nil {
		if temporal.IsCanceledError(err) || ctx.Err() != nil {
			// The task was cancelled while the call may have been running.
			res := api.CallResult{Outcome: api.OutcomeUnknown, Attempts: 1,
				Reason: fmt.Sprintf("the task was cancelled while %s was being decided and run; it may or may not have taken effect", req.Tool)}
			return api.Decision{}, api.DecideOutput{}, &res, nil
		}
		var toErr *temporal.TimeoutError
		if errors.As(err, &toErr) {
			// The tool may have run and hung: it is idempotent, so the
			// regular pipeline decides again and runs it as an activity,
			// with the manifest's retries.
			d, out := t.judge(ctx, req, now)
			return d, out, nil, nil
		}
		return undecided(err), api.DecideOutput{}, nil, nil
	}
	d := o.Decision.Recorded()
	if !o.Ran {
		return d, o.Decision, nil, nil
	}
	res, findings := t.fastResult(ctx, req, o)
	res.Decision = &d
	return d, o.Decision, &res, findings
}

// fastResult turns the fast path's call into the call's result. A failure
// the regular path would retry (the tool is idempotent: not sent, or no
// answer) is retried there, with the CallTool activity and the manifest's
// attempts and backoff, after the manifest's first interval.
func (t *task) fastResult(ctx workflow.Context, req api.CallRequest, o api.DecideAndCallOutput) (api.CallResult, []api.Finding) {
	if c := o.Call; c != nil {
		oc := api.OutcomeOK
		if c.IsError {
			oc = api.OutcomeToolError
		}
		return api.CallResult{Outcome: oc, Result: c.Result, ResultRef: c.ResultRef, Attempts: 1}, c.Findings
	}
	// The worker ran the route it judged; so do the retries.
	req = t.judgedRoute(ctx, req, o.Decision)
	rp := req.Spec.Retry
	retryable := (o.ErrorType == api.ErrTypeNotSent || o.ErrorType == api.ErrTypeOutcomeUnknown) &&
		!slices.Contains(rp.NonRetryable, o.ErrorType) && rp.MaxAttempts > 1
	if !retryable {
		return api.CallResult{Outcome: outcomeFor(o.ErrorType, true), Attempts: 1,
			Reason: reasonFor(o.ErrorType, req, 1, o.Error)}, nil
	}
	interval := rp.InitialInterval
	if interval <= 0 {
		interval = time.Second
	}
	if err := workflow.Sleep(ctx, interval); err != nil {
		return api.CallResult{Outcome: api.OutcomeUnknown, Attempts: 1, Reason: "the task was cancelled while retrying " + req.Tool}, nil
	}
	// The regular loop, one attempt fewer (the fast path made the first).
	rest := req
	rest.Spec.Retry.MaxAttempts--
	res, findings := t.executeFound(ctx, rest)
	res.Attempts++
	return res, findings
}

// FastHeadroom is fastHeadroom, for the server's configuration
// (internal/devserver) to check its history.maxInFlightUpdates against.
const FastHeadroom = fastHeadroom
