package timeline

import (
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"

	"github.com/airlock-run/airlock/api"
)

// prepareStep handles a PrepareStep marker: the i-th one prepares the
// plan's i-th step, which is skipped, fails, or becomes the call in
// progress.
func (b *builder) prepareStep(at time.Time, result *commonpb.Payloads, failed string) {
	b.finishPlanCall()
	i := b.stepNext
	b.stepNext++
	if i >= len(b.tl.Steps) {
		b.problem("a plan step was prepared beyond the plan's %d steps", len(b.tl.Steps))
		return
	}
	st := &b.tl.Steps[i]
	var out api.StepOutput
	if failed == "" {
		if err := b.decode(result, &out); err != nil {
			b.problem("step %s: %v", st.ID, err)
			return
		}
	} else {
		out.Error = failed
	}
	switch {
	case out.Skip:
		st.State, st.Reason = api.StepSkipped, out.Reason
	case out.Program != nil:
		// A program step (code mode): its calls are the program's,
		// step-<id>/n, each seen from its own events. How the program
		// ended is not an event of its own (the plan's status holds
		// it), so the step's state says what history does show.
		st.State = "program"
		st.Reason = fmt.Sprintf("a program step; its calls are %s/1, %s/2, …; how it ended is in the plan's status (airlock tasks show)",
			api.PlanProgramID(st.ID), api.PlanProgramID(st.ID))
	case out.Error != "" || out.Call == nil:
		st.State, st.Reason = api.StepFailed, fmt.Sprintf("step %s could not be prepared: %s", st.ID, out.Error)
	default:
		b.closeInferred()
		cs := b.newCall("step-"+st.ID, out.Call.Tool, at)
		cs.plan = true
		cs.c.Step, cs.c.Server, cs.args = st.ID, out.Call.Server, out.Call.Arguments
		st.Call, st.State = cs.c.ID, api.StepRunning
		b.current = cs
	}
}

// finishPlanCall works out how the plan call in progress ended.
func (b *builder) finishPlanCall() {
	cs := b.current
	if cs == nil {
		return
	}
	b.current = nil
	c := cs.c
	res := &Result{Attempts: len(c.Tries)}
	d := c.Decision
	switch {
	case cs.decideError != "":
		res.Outcome, res.Reason = string(api.OutcomeDenied),
			fmt.Sprintf("denied: the policy could not be evaluated (%s); nothing ran", cs.decideError)
	case d == nil:
		res.Outcome, res.Reason = string(api.OutcomeLimit), "a task limit (calls or deadline) stopped the call"
	case d.Effect == api.Deny:
		res.Outcome, res.Reason = string(api.OutcomeDenied), d.Reason
	case d.Effect == api.RequireApproval && (c.Approval == nil || c.Approval.State != api.ApprovalApproved):
		res.Outcome, res.Reason = string(api.OutcomeDenied), "not approved"
		if c.Approval != nil {
			res.Reason = "the approval request was " + c.Approval.State
		}
	case c.Capture != nil && c.Capture.Outcome != string(api.OutcomeOK) && c.Capture.Outcome != string(api.OutcomeToolError):
		res.Outcome, res.Reason = string(api.OutcomeFailed), fmt.Sprintf("%s did not run: its pre-image could not be captured with %s (%s)", c.Tool, c.Capture.Tool, c.Capture.Outcome)
		if c.Capture.Outcome == string(api.OutcomeUnavailable) {
			res.Outcome = string(api.OutcomeUnavailable)
		}
	case len(c.Tries) == 0:
		res.Outcome, res.Reason = string(api.OutcomeUnknown), "the call did not run to the end"
	default:
		last := c.Tries[len(c.Tries)-1]
		res.Outcome, res.Reason = last.Outcome, last.Error
		res.Text = cs.text
		if last.Outcome == string(api.OutcomeToolError) {
			res.IsError, res.Reason = true, c.Tool+" reported an error: "+res.Text
		}
	}
	c.Result = res
	if c.Finished == nil {
		f := c.Requested
		if d != nil && d.At != nil {
			f = *d.At
		}
		if n := len(c.Tries); n > 0 && c.Tries[n-1].Finished != nil {
			f = *c.Tries[n-1].Finished
		}
		if comp := c.Compensation; comp != nil && comp.Recorded.After(f) {
			f = comp.Recorded
		}
		c.Finished = &f
	}
	if st := b.step(c.Step); st != nil {
		switch api.Outcome(res.Outcome) {
		case api.OutcomeOK:
			st.State = api.StepOK
		case api.OutcomeDenied:
			st.State = api.StepDenied
		default:
			st.State = api.StepFailed
		}
		if res.Outcome != string(api.OutcomeOK) {
			st.Reason = res.Reason
		}
	}
}

func (b *builder) step(id string) *Step {
	for i := range b.tl.Steps {
		if b.tl.Steps[i].ID == id {
			return &b.tl.Steps[i]
		}
	}
	return nil
}
