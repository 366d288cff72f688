package timeline

import (
	"fmt"
	"time"

	"github.com/airlock-run/airlock/api"
)

// compensationEntry brings a call's compensation up to date with a rollback's
// account of it.
func (b *builder) compensationEntry(e api.CompensationEntry) {
	cs := b.call(e.CallID, e.Tool, e.At)
	comp := b.compensation(cs, e.At)
	if e.Compensation != nil && cs.undo == nil {
		cs.undo = &compState{tool: e.Compensation.Tool, args: e.Compensation.Arguments}
	}
	if e.Error != "" {
		comp.Error = e.Error
	}
	comp.State, comp.Reason = e.State, e.Reason
}

func (b *builder) compensation(cs *callState, at time.Time) *Compensation {
	if cs.c.Compensation == nil {
		cs.c.Compensation = &Compensation{Recorded: at, State: api.CompensationPending}
	}
	return cs.c.Compensation
}

// compensated is the call a PlanCompensation marker belongs to: the call
// whose tool finished first among those that have no compensation yet
// and have not answered (the workflow computes the compensation right
// after the call ran, before it answers).
func (b *builder) compensated(callID string) *callState {
	// Recorded since PlanCompensation echoes it: exact.
	if cs, ok := b.calls[callID]; ok && callID != "" {
		return cs
	}
	if b.tl.Kind == "plan" {
		return b.current
	}
	var best *callState
	for _, cs := range b.order {
		if cs.executed == 0 || cs.done != 0 || cs.c.Compensation != nil {
			continue
		}
		if best == nil || cs.executed < best.executed {
			best = cs
		}
	}
	return best
}

// inferRollback opens a rollback the task started itself: on cancel, on
// a denial (rollback_on_deny) or, in a plan, on a failed step.
func (b *builder) inferRollback(at time.Time) int {
	if b.inferred >= 0 {
		return b.inferred
	}
	rb := Rollback{Inferred: true, Requested: at, State: "running"}
	cur := b.current
	if cur == nil && len(b.order) > 0 {
		cur = b.order[len(b.order)-1]
	}
	denied := cur != nil && b.deniedNow(cur, at)
	if b.tl.Kind == "agent" {
		// The denied call has not answered yet, and its decision is
		// matched to it only at the end: look at the last decision and at
		// the approvals of calls still running.
		if n := len(b.decides); n > 0 {
			d := b.decides[n-1]
			denied = d.err != "" || d.out.Effect == api.Deny
		}
		for _, cs := range b.order {
			if cs.done == 0 && b.deniedNow(cs, at) {
				denied, cur = true, cs
			}
		}
	}
	switch {
	case b.cancelRequested:
		rb.By, rb.Reason = "cancel", "the task was cancelled"
	case denied:
		rb.By, rb.Reason = "deny", cur.c.Tool+" was denied"
	case b.tl.Kind == "plan" && cur != nil:
		rb.By, rb.Reason = "plan", fmt.Sprintf("step %s failed", cur.c.Step)
	default:
		rb.By = "task"
	}
	b.tl.Rollbacks = append(b.tl.Rollbacks, rb)
	b.inferred = len(b.tl.Rollbacks) - 1
	return b.inferred
}

// deniedNow reports that cs was denied by policy or by its approvers (or
// its request expired) by the time at.
func (b *builder) deniedNow(cs *callState, at time.Time) bool {
	if d := cs.c.Decision; d != nil && d.Effect == api.Deny {
		return true
	}
	ap := cs.c.Approval
	if ap == nil {
		return false
	}
	switch ap.State {
	case api.ApprovalDenied, api.ApprovalExpired:
		return true
	case api.ApprovalPending:
		return !ap.Expires.IsZero() && !at.Before(ap.Expires)
	}
	return false
}

// closeInferred settles the rollback the task started itself once
// something else happens.
func (b *builder) closeInferred() {
	i := b.inferred
	if i < 0 {
		return
	}
	b.inferred = -1
	rb := &b.tl.Rollbacks[i]
	var last time.Time
	var done, failed []string
	for _, id := range rb.Compensated {
		comp := b.calls[id].c.Compensation
		ok := false
		for _, r := range comp.Runs {
			if r.Rollback != i {
				continue
			}
			if r.Finished != nil && r.Finished.After(last) {
				last = *r.Finished
			}
			ok = r.Outcome == string(api.OutcomeOK)
		}
		if ok {
			done = append(done, id)
		} else {
			failed = append(failed, id)
		}
	}
	rb.Compensated = done
	if !last.IsZero() {
		rb.Finished = &last
	}
	if rb.State != "running" {
		return // the failure notice said how it ended
	}
	if len(failed) > 0 {
		rb.State, rb.Remaining = api.StateRollbackFailed, failed
		rb.Result = fmt.Sprintf("the compensation of call %s failed", failed[0])
		return
	}
	rb.State, rb.Result = api.StateRolledBack, fmt.Sprintf("rolled back %d call(s)", len(done))
}
