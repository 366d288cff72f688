package activities

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/manifests"
)

// Notifier tells people about approval requests. Slack implements it; the
// local path (CLI, web page) needs none: it reads the workflow's state.
type Notifier interface {
	Name() string
	// Post announces a request to its group and returns where it posted.
	Post(ctx context.Context, n api.ApprovalNotice) ([]api.MessageRef, error)
	// Update rewrites posted messages to show the outcome.
	Update(ctx context.Context, n api.ApprovalNotice) error
	// Alert tells a group that a rollback left compensations undone.
	Alert(ctx context.Context, n api.RollbackNotice) error
}

// ErrNoChannel is returned by a notifier that has nowhere to post for a
// group; the request stays pending and visible locally.
var ErrNoChannel = errors.New("no channel configured for this approver group")

// NotifyApprovers posts a request with every configured notifier. A
// notifier that fails is retried by Temporal (429s and 5xx included); the
// request stays pending meanwhile and is never approved by default.
func (a *Activities) NotifyApprovers(ctx context.Context, n api.ApprovalNotice) (refs []api.MessageRef, err error) {
	var errs []error
	posted := 0
	if firstAttempt(ctx) {
		defer func() {
			r := auditstream.ApprovalRequest{Request: n.RequestID, Task: n.TaskID, Call: n.CallID, Tool: n.Tool, Principal: n.Principal,
				Group: n.Group, Quorum: n.Quorum, Rule: n.Rule, Digest: n.Digest, ExpiresAt: n.ExpiresAt, Escalation: n.Escalation, Posted: posted}
			switch {
			case err != nil:
				r.NotifyError = err.Error()
			case len(errs) > 0 && posted == 0: // Separate: each failed notifier is retried on its own
				r.NotifyError = errors.Join(errs...).Error()
			}
			a.Audit.ApprovalRequested(r)
		}()
	}
	for _, nt := range a.Notifiers {
		r, err := nt.Post(ctx, n)
		if errors.Is(err, ErrNoChannel) {
			continue
		}
		if err != nil {
			logDeliveryFailure(ctx, nt.Name(), n, err)
			errs = append(errs, err)
			if n.Separate { // the workflow retries this notifier alone
				refs = append(refs, api.MessageRef{Notifier: nt.Name(), Group: n.Group, Failed: err.Error()})
			}
			continue
		}
		posted += len(r)
		refs = append(refs, r...)
	}
	if n.Separate {
		return refs, nil
	}
	switch {
	case len(errs) == 1 && len(refs) == 0:
		return nil, errs[0] // keeps the notifier's error type and retry delay (Slack's Retry-After)
	case len(errs) > 0 && len(refs) == 0:
		return nil, errors.Join(errs...)
	}
	return refs, nil
}

// DeliverApprovalNotice posts a request with the one notifier that
// failed to in NotifyApprovers. The workflow runs it with a retry policy
// (backoff over minutes, until the request expires); every failed attempt
// is logged, and a notifier's refusal (a 4xx from a webhook bridge) is
// not retried.
func (a *Activities) DeliverApprovalNotice(ctx context.Context, c api.ChannelNotice) ([]api.MessageRef, error) {
	for _, nt := range a.Notifiers {
		if nt.Name() != c.Notifier {
			continue
		}
		refs, err := nt.Post(ctx, c.Notice)
		if errors.Is(err, ErrNoChannel) {
			return nil, temporal.NewNonRetryableApplicationError("notifier "+c.Notifier+" no longer serves group "+c.Notice.Group, "NoChannel", err)
		}
		if err != nil {
			logDeliveryFailure(ctx, c.Notifier, c.Notice, err)
			return nil, err
		}
		return refs, nil
	}
	return nil, temporal.NewNonRetryableApplicationError("no notifier "+c.Notifier+" is configured any more (the approval channels changed)", "NoChannel", nil)
}

// logDeliveryFailure logs one failed attempt to post or update a request.
func logDeliveryFailure(ctx context.Context, notifier string, n api.ApprovalNotice, err error) {
	if !activity.IsActivity(ctx) {
		return
	}
	info := activity.GetInfo(ctx)
	activity.GetLogger(ctx).Warn("approval notification not delivered; Temporal retries it",
		"notifier", notifier, "request", n.RequestID, "group", n.Group, "activity", info.ActivityType.Name,
		"attempt", info.Attempt, "error", err.Error())
}

// UpdateApprovalMessages shows a request's outcome on its messages. It is
// also where the outcome is counted and audited: the workflow runs it once
// per request, when the request closes.
func (a *Activities) UpdateApprovalMessages(ctx context.Context, n api.ApprovalNotice) error {
	// A notice with NotRun follows the closing one (the approved call did
	// not run): the request was counted and audited when it closed.
	if firstAttempt(ctx) && n.NotRun == "" {
		a.observeApproval(n, time.Now())
	}
	var errs []error
	for _, nt := range a.Notifiers {
		if err := nt.Update(ctx, n); err != nil && !errors.Is(err, ErrNoChannel) {
			logDeliveryFailure(ctx, nt.Name(), n, err)
			errs = append(errs, err)
		}
	}
	if len(errs) == 1 {
		return errs[0] // keeps its retry delay
	}
	if err := errors.Join(errs...); err != nil {
		return temporal.NewApplicationErrorWithCause("updating approval messages", "NotifyFailed", err)
	}
	return nil
}

// NotifyRollbackFailed tells the task's rollback group, through every
// notifier that can reach it. With no group or no channel it only logs:
// the task's state (rollback_failed) and history still hold everything.
func (a *Activities) NotifyRollbackFailed(ctx context.Context, n api.RollbackNotice) error {
	if firstAttempt(ctx) {
		metrics.RollbacksFailed.Inc()
		f := auditstream.RollbackFailure{Task: n.TaskID, Principal: n.Principal, Group: n.Group, RequestedBy: n.RequestedBy}
		for _, r := range n.Remaining {
			f.Remaining, f.Tools = append(f.Remaining, r.CallID), append(f.Tools, r.Tool)
		}
		a.Audit.RollbackFailed(f)
	}
	activity.GetLogger(ctx).Error("rollback failed: compensations remain undone",
		"task", n.TaskID, "group", n.Group, "remaining", len(n.Remaining), "reason", n.Reason)
	if n.Group == "" {
		return nil
	}
	var errs []error
	for _, nt := range a.Notifiers {
		if err := nt.Alert(ctx, n); err != nil && !errors.Is(err, ErrNoChannel) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// How a request ended, as counted and audited (the workflow's states, and
// canceled).
const (
	approvalApproved = "approved"
	approvalDenied   = "denied"
	approvalExpired  = "expired"
	approvalCanceled = "canceled"
)

// observeApproval records how a closed request ended and how long it
// waited.
func (a *Activities) observeApproval(n api.ApprovalNotice, now time.Time) {
	outcome, decided := approvalOutcome(n, now)
	waited := max(decided.Sub(a.requestedAt(n)), 0)
	metrics.ApprovalWait.WithLabelValues(outcome).Observe(waited.Seconds())
	o := auditstream.ApprovalOutcome{Request: n.RequestID, Task: n.TaskID, Call: n.CallID, Tool: n.Tool, Principal: n.Principal,
		Outcome: outcome, Waited: waited}
	for _, v := range n.Votes {
		o.Approvers = append(o.Approvers, v.Approver)
	}
	a.Audit.ApprovalClosed(o)
}

// approvalOutcome tells how a closed request ended and when, from what the
// workflow's notice carries: the deny vote, or the vote that made the
// quorum; the expiry when nobody decided in time (also for on_timeout:
// approve); now when the task was cancelled while it waited.
func approvalOutcome(n api.ApprovalNotice, now time.Time) (string, time.Time) {
	switch n.State {
	case approvalExpired:
		return approvalExpired, n.ExpiresAt
	case approvalApproved:
		if n.Approvals() < max(n.Quorum, 1) {
			return approvalApproved, n.ExpiresAt
		}
		var last time.Time
		for _, v := range slices.Backward(n.Votes) {
			if v.Approve {
				last = v.At
				break
			}
		}
		return approvalApproved, last
	case approvalDenied:
		for _, v := range n.Votes {
			if !v.Approve {
				return approvalDenied, v.At
			}
		}
		return approvalCanceled, now
	}
	return n.State, now
}

// requestedAt is when the request was made. Notices from older workflow
// code do not carry it, but their expiry does, and the request waited the
// tool's approval timeout from its start (unless the manifest changed
// since).
func (a *Activities) requestedAt(n api.ApprovalNotice) time.Time {
	if !n.RequestedAt.IsZero() {
		return n.RequestedAt // workflows since it was added say it
	}
	var decl *manifests.Tool
	if cat := a.judge().Catalog; cat != nil {
		if t, ok := cat.Tool(n.Tool); ok {
			decl = t.Decl
		}
	}
	return n.ExpiresAt.Add(-approvalTimeout(decl))
}

// firstAttempt reports whether this is an activity's first attempt (or a
// direct call outside a worker): events that an activity retries only to
// deliver a notification are counted once.
func firstAttempt(ctx context.Context) bool {
	return !activity.IsActivity(ctx) || activity.GetInfo(ctx).Attempt <= 1
}
