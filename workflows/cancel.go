package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// listenCancels starts the run's cancellation handler: a call the signal
// names is cancelled if it runs, withdrawn if it waits for approval, and
// remembered if it has not arrived yet (the signal can overtake the
// Update).
func (t *task) listenCancels(ctx workflow.Context) {
	t.cancelOn = true
	t.cancelled = map[string]string{}
	t.callCancels = map[string]workflow.CancelFunc{}
	ch := workflow.GetSignalChannel(ctx, api.SignalCancelCall)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var c api.CancelCall
			if !ch.Receive(ctx, &c) {
				return
			}
			if c.CallID == "" {
				continue
			}
			reason := c.Reason
			if reason == "" {
				reason = "cancelled"
			}
			t.cancelCall(ctx, c.CallID, reason)
		}
	})
}

// cancelCall cancels one call for reason: a running call's context is
// cancelled, a pending approval request withdrawn, and a call not yet
// arrived remembered (nothing in runs from before changeCancelCall).
func (t *task) cancelCall(ctx workflow.Context, callID, reason string) {
	if !t.cancelOn {
		return
	}
	t.cancelled[callID] = reason
	if cancel := t.callCancels[callID]; cancel != nil {
		cancel()
	}
	for _, ar := range t.approvals {
		if ar.CallID == callID && ar.State == api.ApprovalPending {
			ar.State, ar.DecidedAt = api.ApprovalWithdrawn, workflow.Now(ctx)
		}
	}
}

// callContext is the context a call runs in: cancelled by SignalCancelCall
// in runs that listen for it (ctx itself in older runs). The returned
// function releases it when the call ends.
func (t *task) callContext(ctx workflow.Context, callID string) (workflow.Context, func()) {
	if !t.cancelOn {
		return ctx, func() {}
	}
	cctx, cancel := workflow.WithCancel(ctx)
	if _, ok := t.cancelled[callID]; ok {
		cancel()
	}
	t.callCancels[callID] = cancel
	return cctx, func() { delete(t.callCancels, callID); cancel() }
}

// cancelledResult turns the result of a call that SignalCancelCall
// cancelled into a cancelled outcome; ok is false when the call was not
// cancelled (or had finished before the signal came).
func (t *task) cancelledResult(req api.CallRequest, res api.CallResult, waited bool) (api.CallResult, bool) {
	why, ok := t.cancelled[req.CallID]
	if !ok || !t.cancelOn {
		return res, false
	}
	switch {
	case waited:
		res.Outcome = api.OutcomeCancelled
		res.Reason = fmt.Sprintf("%s was cancelled (%s) while it waited for approval; the request was withdrawn and nothing ran", req.Tool, why)
	case res.Outcome == api.OutcomeUnknown || res.Outcome == api.OutcomeCancelled:
		res.Outcome = api.OutcomeCancelled
		res.Reason = fmt.Sprintf("%s was cancelled (%s) while it ran; the upstream was told to stop, and it may have partly taken effect", req.Tool, why)
	default:
		return res, false // it ended before the cancellation reached it
	}
	return res, true
}
