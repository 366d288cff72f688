package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlock-run/airlock/api"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// awaitApproval asks the approvers and waits, durably, until the request is
// decided or expires. It reports whether the call may run and, if not, why.
func (t *task) awaitApproval(ctx workflow.Context, req api.CallRequest, d api.Decision, spec *api.ApprovalSpec) (bool, string) {
	now := workflow.Now(ctx)
	ar := &api.ApprovalRequest{
		ID: api.RequestID(t.in.TaskID, req.CallID), TaskID: t.in.TaskID, CallID: req.CallID,
		Tool: req.Tool, Server: req.Server, Principal: t.in.Principal, Client: t.in.Client,
		Arguments: req.Arguments, PolicyVersion: d.PolicyVersion, Rule: d.Rule, Reason: d.Reason,
		Digest:      t.digest(req.CallID, req.Tool, req.Arguments, d.PolicyVersion),
		SideEffects: spec.SideEffects, DataLevel: spec.DataLevel, Risk: spec.Risk, Redact: spec.Redact,
		Group: d.Group, Quorum: max(d.Quorum, 1), Approvers: slices.Clone(spec.Approvers),
		ExpiresAt: now.Add(spec.Timeout), OnTimeout: spec.OnTimeout, RequestedAt: now, State: api.ApprovalPending,
	}
	if why := t.labelsReason(); why != "" { // labels.go: the approver is told what the task has read, ingested and sent
		ar.Reason = strings.TrimSpace(ar.Reason + " " + why)
	}
	t.editFields(ar, spec)              // approve with edits
	if sub := req.Subject; sub != nil { // token exchange: the approver is told when the grant ends
		ar.ActsAs, ar.ActsUntil = sub.Principal, sub.Expiry
		if sub.Held && workflow.GetVersion(ctx, changeUserGrant, workflow.DefaultVersion, 1) >= 1 {
			ar.ActsHeld = true
		}
	}
	if spec.EscalateAfter > 0 && spec.EscalateAfter < spec.Timeout && spec.EscalateTo != "" {
		ar.EscalateAt, ar.EscalateTo = now.Add(spec.EscalateAfter), spec.EscalateTo
	}
	ar.MaxGrant, ar.GrantArgs = spec.MaxGrant, slices.Clone(spec.GrantArgs) // approval grants
	ar.Program, ar.Line = t.programOf(req.CallID)                           // code mode
	t.approvals = append(t.approvals, ar)
	if len(ar.Approvers) < ar.Quorum && len(spec.EscalateApprovers) == 0 {
		ar.State, ar.DecidedAt = api.ApprovalDenied, now
		return false, fmt.Sprintf("%s needs approval by %q (quorum %d), but that group has %d member(s); ask an operator to configure approver_groups.%s", req.Tool, ar.Group, ar.Quorum, len(ar.Approvers), ar.Group)
	}
	t.setApprovalAttr(ctx)
	defer t.setApprovalAttr(ctx)

	notified := t.notify(ctx, ar, ar.Group, false)
	cond := func() bool { return ar.State != api.ApprovalPending }

	if !ar.EscalateAt.IsZero() {
		ok, err := workflow.AwaitWithTimeout(ctx, ar.EscalateAt.Sub(now), cond)
		if err != nil {
			return t.closeApproval(ctx, ar, notified, api.ApprovalDenied, "the task was cancelled while waiting for approval")
		}
		if !ok {
			ar.Escalated = true
			for _, a := range spec.EscalateApprovers {
				if !slices.Contains(ar.Approvers, a) {
					ar.Approvers = append(ar.Approvers, a)
				}
			}
			t.notify(ctx, ar, ar.EscalateTo, true)
		}
	}
	if ar.State == api.ApprovalPending {
		ok, err := workflow.AwaitWithTimeout(ctx, ar.ExpiresAt.Sub(workflow.Now(ctx)), cond)
		if err != nil {
			return t.closeApproval(ctx, ar, notified, api.ApprovalDenied, "the task was cancelled while waiting for approval")
		}
		if !ok {
			if ar.OnTimeout == "approve" {
				return t.closeApproval(ctx, ar, notified, api.ApprovalApproved, "")
			}
			return t.closeApproval(ctx, ar, notified, api.ApprovalExpired,
				fmt.Sprintf("nobody in %q decided on %s before the request expired at %s; it was denied (approval.on_timeout: deny)", ar.Group, req.Tool, ar.ExpiresAt.UTC().Format(time.RFC3339)))
		}
	}
	if ar.State == api.ApprovalApproved {
		return t.closeApproval(ctx, ar, notified, api.ApprovalApproved, "")
	}
	return t.closeApproval(ctx, ar, notified, api.ApprovalDenied, denyReason(ar))
}

func denyReason(ar *api.ApprovalRequest) string {
	for _, v := range ar.Votes {
		if !v.Approve {
			msg := fmt.Sprintf("%s denied %s", v.Approver, ar.Tool)
			if v.Comment != "" {
				msg += ": " + v.Comment
			}
			return msg
		}
	}
	return "the request for " + ar.Tool + " was denied"
}

// closeApproval settles the request and updates its messages once the
// notification that posted them has finished.
func (t *task) closeApproval(ctx workflow.Context, ar *api.ApprovalRequest, notified workflow.Future, state, reason string) (bool, string) {
	if ar.State == api.ApprovalPending || state == api.ApprovalExpired {
		ar.State = state
		ar.DecidedAt = workflow.Now(ctx)
	}
	t.stopRedeliveries(ar) // changeDeliveries: nothing to announce any more
	closed, settle := workflow.NewFuture(ctx)
	if t.closedNotices == nil {
		t.closedNotices = map[string]workflow.Future{}
	}
	t.closedNotices[ar.ID] = closed
	workflow.Go(ctx, func(gctx workflow.Context) {
		_ = notified.Get(gctx, nil)
		t.awaitEditJudged(gctx, ar) // changeEditOutcome: the notice tells what became of an edit
		actx := workflow.WithActivityOptions(gctx, notifyOptions(time.Hour))
		err := workflow.ExecuteActivity(actx, api.UpdateApprovalName, t.notice(ar, ar.Group, false)).Get(gctx, nil)
		settle.Set(nil, err)
		delete(t.closedNotices, ar.ID) // a later notice (tellNotRun) need not wait

	})
	return ar.State == api.ApprovalApproved, reason
}

// tellNotRun tells the approvers of an approved call that it did not run
// after all because its user's grant was gone (UserGrant), and why
// (changeGrantGoneNotice): the request's NotRun, shown by approvals show,
// and its messages updated once more, after the closing update.
func (t *task) tellNotRun(ctx workflow.Context, callID, reason string) {
	ar := t.approval(api.RequestID(t.in.TaskID, callID))
	if ar == nil || ar.State != api.ApprovalApproved || ar.NotRun != "" {
		return
	}
	if workflow.GetVersion(ctx, changeGrantGoneNotice, workflow.DefaultVersion, 1) < 1 {
		return
	}
	ar.NotRun = reason
	closed := t.closedNotices[ar.ID]
	notice := t.notice(ar, ar.Group, false)
	workflow.Go(ctx, func(gctx workflow.Context) {
		if closed != nil {
			_ = closed.Get(gctx, nil)
		}
		actx := workflow.WithActivityOptions(gctx, notifyOptions(time.Hour))
		_ = workflow.ExecuteActivity(actx, api.UpdateApprovalName, notice).Get(gctx, nil)
	})
}

// notify posts the request to a group in the background: a Slack outage
// must not hold the wait (nor approve anything). The future is ready when
// posting finished (or gave up).
func (t *task) notify(ctx workflow.Context, ar *api.ApprovalRequest, group string, escalation bool) workflow.Future {
	f, settle := workflow.NewFuture(ctx)
	notice := t.notice(ar, group, escalation)
	separate := workflow.GetVersion(ctx, changeDeliveries, workflow.DefaultVersion, 1) >= 1
	notice.Separate = separate
	workflow.Go(ctx, func(gctx workflow.Context) {
		actx := workflow.WithActivityOptions(gctx, notifyOptions(ar.ExpiresAt.Sub(workflow.Now(gctx))))
		var refs []api.MessageRef
		err := workflow.ExecuteActivity(actx, api.NotifyApproversName, notice).Get(gctx, &refs)
		if !separate {
			ar.Messages = append(ar.Messages, refs...)
			settle.Set(nil, err)
			return
		}
		now := workflow.Now(gctx)
		for _, r := range refs {
			if r.Failed == "" {
				ar.Messages = append(ar.Messages, r)
				ar.Deliveries = setDelivery(ar.Deliveries, api.Delivery{Notifier: r.Notifier, Group: group, State: api.DeliveryDelivered, At: now})
				continue
			}
			ar.Deliveries = setDelivery(ar.Deliveries, api.Delivery{Notifier: r.Notifier, Group: group, State: api.DeliveryRetrying, Error: r.Failed, Since: now, At: now})
			t.redeliver(ctx, ar, notice, r.Notifier)
		}
		settle.Set(nil, err)
	})
	return f
}

// redeliver retries posting notice with one notifier in the background;
// closing the request stops it (abandoned).
func (t *task) redeliver(ctx workflow.Context, ar *api.ApprovalRequest, notice api.ApprovalNotice, notifier string) {
	dctx, cancel := workflow.WithCancel(ctx)
	if t.redeliveries == nil {
		t.redeliveries = map[string][]workflow.CancelFunc{}
	}
	t.redeliveries[ar.ID] = append(t.redeliveries[ar.ID], cancel)
	workflow.Go(dctx, func(gctx workflow.Context) {
		actx := workflow.WithActivityOptions(gctx, deliveryOptions(ar.ExpiresAt.Sub(workflow.Now(gctx))))
		var refs []api.MessageRef
		err := workflow.ExecuteActivity(actx, api.DeliverApprovalNoticeName, api.ChannelNotice{Notifier: notifier, Notice: notice}).Get(gctx, &refs)
		d := api.Delivery{Notifier: notifier, Group: notice.Group, State: api.DeliveryDelivered, At: workflow.Now(gctx)}
		var canceled *temporal.CanceledError
		switch {
		case errors.As(err, &canceled):
			d.State, d.Error = api.DeliveryAbandoned, "the request closed before this delivery got through"
		case err != nil:
			d.State, d.Error = api.DeliveryFailed, err.Error()
		default:
			ar.Messages = append(ar.Messages, refs...)
		}
		for _, old := range ar.Deliveries {
			if old.Notifier == d.Notifier && old.Group == d.Group {
				d.Since = old.Since
				if d.Error == "" {
					d.Error = old.Error // delivered after failing: why it was late
				}
			}
		}
		ar.Deliveries = setDelivery(ar.Deliveries, d)
	})
}

// stopRedeliveries stops the retries of a closed request's deliveries.
func (t *task) stopRedeliveries(ar *api.ApprovalRequest) {
	for _, cancel := range t.redeliveries[ar.ID] {
		cancel()
	}
	delete(t.redeliveries, ar.ID)
}

// setDelivery replaces the delivery of d's notifier and group, or adds d.
func setDelivery(ds []api.Delivery, d api.Delivery) []api.Delivery {
	for i := range ds {
		if ds[i].Notifier == d.Notifier && ds[i].Group == d.Group {
			ds[i] = d
			return ds
		}
	}
	return append(ds, d)
}

// deliveryOptions retry one notifier's delivery with backoff over
// minutes, until the request would expire (at least ten minutes).
func deliveryOptions(within time.Duration) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: max(within, 10*time.Minute),
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 5 * time.Second, BackoffCoefficient: 2,
			MaximumInterval: 5 * time.Minute},
	}
}

// notifyOptions retry posting until the request would expire anyway.
func notifyOptions(within time.Duration) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: max(within, time.Minute),
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: time.Minute},
	}
}

func (t *task) notice(ar *api.ApprovalRequest, group string, escalation bool) api.ApprovalNotice {
	n := api.ApprovalNotice{
		RequestID: ar.ID, TaskID: ar.TaskID, CallID: ar.CallID, Tool: ar.Tool, Principal: ar.Principal, Client: ar.Client,
		Arguments: ar.Arguments, Redact: ar.Redact, SideEffects: ar.SideEffects, DataLevel: ar.DataLevel, Risk: ar.Risk,
		Rule: ar.Rule, Reason: ar.Reason, Digest: ar.Digest, Group: group, Quorum: ar.Quorum, ExpiresAt: ar.ExpiresAt,
		RequestedAt: ar.RequestedAt,
		Escalation:  escalation, State: ar.State, Messages: slices.Clone(ar.Messages),
		ApprovalEdits: ar.ApprovalEdits,
		MaxGrant:      ar.MaxGrant,
		Program:       ar.Program, Line: ar.Line,
		ActsAs: ar.ActsAs, ActsUntil: ar.ActsUntil, ActsHeld: ar.ActsHeld, NotRun: ar.NotRun,
	}
	for _, v := range ar.Votes {
		n.Votes = append(n.Votes, api.NoticeVote{Approver: v.Approver, Approve: v.Approve, At: v.At, Via: v.Via, Grant: grantNote(v.Grant)})
	}
	return n
}

func (t *task) setApprovalAttr(ctx workflow.Context) {
	state := "none"
	for _, a := range t.approvals {
		if a.State == api.ApprovalPending {
			state = api.ApprovalPending
			break
		}
	}
	if state != t.approvalAttr {
		t.approvalAttr = state
		_ = workflow.UpsertTypedSearchAttributes(ctx, api.SAApproval.ValueSet(state))
	}
}

func (t *task) approval(id string) *api.ApprovalRequest {
	for _, a := range t.approvals {
		if a.ID == id {
			return a
		}
	}
	return nil
}

// validateDecide rejects decisions that must not count; a rejected Update
// leaves no trace in history, and its error goes back to the clicker.
func (t *task) validateDecide(ctx workflow.Context, d api.DecideRequest) error {
	ar := t.approval(d.RequestID)
	switch {
	case len(d.Comment) > api.MaxReasonBytes || len(d.Approver) > api.MaxReasonBytes || len(d.Via) > api.MaxReasonBytes:
		return fmt.Errorf("decide: comment is %d bytes; keep it under %d", len(d.Comment), api.MaxReasonBytes)
	case ar == nil:
		return fmt.Errorf("no approval request %q in task %s", d.RequestID, t.in.TaskID)
	case ar.State != api.ApprovalPending:
		return fmt.Errorf("request %s is already %s", ar.ID, ar.State)
	case d.Digest != ar.Digest:
		return errors.New("the request changed since this decision was made (digest mismatch); decide on the current request")
	case !workflow.Now(ctx).Before(ar.ExpiresAt):
		return fmt.Errorf("request %s expired at %s", ar.ID, ar.ExpiresAt.UTC().Format(time.RFC3339))
	case strings.TrimSpace(d.Approver) == "":
		return errors.New("the decision names no approver")
	case d.Approver == ar.Principal:
		return fmt.Errorf("%s asked for this call and may not approve it", d.Approver)
	case !slices.Contains(ar.Approvers, d.Approver):
		return fmt.Errorf("%s is not in approver group %q", d.Approver, ar.Group)
	}
	if err := t.validateGrantAsk(ar, d); err != nil {
		return err
	}
	for _, v := range ar.Votes {
		if v.Approver == d.Approver {
			past := "approved"
			if !v.Approve {
				past = "denied"
			}
			return fmt.Errorf("%s already %s request %s; a decision cannot be changed", d.Approver, past, ar.ID)
		}
	}
	return t.validateEdit(ar, d) // approve with edits
}

// decide records one approver's decision: a deny closes the request, and
// the quorum of distinct approvals approves it.
func (t *task) decide(ctx workflow.Context, d api.DecideRequest) (api.DecideResult, error) {
	ar := t.approval(d.RequestID)
	ar.Votes = append(ar.Votes, api.Vote{Approver: d.Approver, Approve: d.Approve, At: workflow.Now(ctx), Via: d.Via, Comment: d.Comment})
	approvals := ar.Approvals()
	switch {
	case !d.Approve:
		ar.State = api.ApprovalDenied
	case approvals >= ar.Quorum:
		ar.State = api.ApprovalApproved
	}
	edit := t.takeEdit(ctx, ar, d) // approve with edits
	if ar.State != api.ApprovalPending {
		ar.DecidedAt = workflow.Now(ctx)
	}
	msg := fmt.Sprintf("%s: %d of %d approvals", ar.State, approvals, ar.Quorum)
	res := api.DecideResult{RequestID: ar.ID, State: ar.State, Approver: d.Approver, Approve: d.Approve, EditDigest: edit, Nonce: d.Nonce}
	if edit != "" {
		msg = "approved with edited arguments; policy judges the edited call again before it runs"
		t.awaitEditJudged(ctx, ar) // changeEditOutcome
		switch e := ar.Edit; {
		case e.Refused != "":
			msg = "approved with edited arguments, but the edit was refused: " + e.Refused + "; nothing ran"
			res.EditRefused = e.Refused
		case e.Effect == api.EditNeedsApproval:
			msg = "approved with edited arguments; policy sends the edited call to approval by its group before it runs"
		case e.Effect != "":
			msg = "approved with edited arguments; policy allowed the edited call, and it runs"
		}
		res.EditEffect = ar.Edit.Effect
	}
	res.Message = msg + t.noteGrant(ar, d)
	return res, nil
}

func (t *task) approvalsQuery() ([]api.ApprovalRequest, error) {
	out := make([]api.ApprovalRequest, len(t.approvals))
	for i, a := range t.approvals {
		out[i] = *a
	}
	return out, nil
}
