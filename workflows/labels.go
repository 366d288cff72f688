package workflows

// Information-flow labels (issue 30 §2, api/labels.go): what the task's
// calls did, accumulated in its durable state, carried across
// continue-as-new, passed to every decision (task.read_level,
// task.untrusted, task.egress) and reset only by an operator's
// reset_labels update.
//
// Which calls raise labels:
//   - read_level and untrusted: a call whose result reached the agent
//     (outcome ok or tool_error: a tool error's text is content too). A
//     call that was denied, refused, not sent, failed or whose outcome is
//     unknown delivered nothing, and raises neither.
//   - untrusted also: any injection finding of the content guard in a
//     call's result (rule "injection-…"), whatever it did with it; a
//     blocked result still says that the source is hostile.
//   - egress: an egress tool (side_effects send or pay) whose call may
//     have taken effect: ok, tool_error, unknown or cancelled. A call that
//     surely did not run (denied, not sent, rejected, failed) is no egress.
//
// A compensated call keeps its labels: what it read is in the agent's
// context, and what it sent has left; a rollback undoes changes, not
// knowledge. Captures and compensations raise nothing (their results never
// reach the agent).

import (
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// startLabels decides whether this run keeps labels (changeLabels), loads
// the carried ones and registers the reset update. Called in startRun,
// before anything blocks.
func (t *task) startLabels(ctx workflow.Context) error {
	if workflow.GetVersion(ctx, changeLabels, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	t.labelsOn = true
	if c := t.in.Carried; c != nil && c.Labels != nil {
		t.labels = c.Labels.Clone()
		// A level the code does not know (a newer airlock's, or bytes
		// changed on the way) counts as the highest, never as none.
		t.labels.ReadLevel = ""
		t.labels.Read(c.Labels.ReadLevel)
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateResetLabels, t.resetLabels,
		workflow.UpdateHandlerOptions{Validator: func(r api.ResetLabelsRequest) error { return r.Check() }})
}

// resetLabels serves api.UpdateResetLabels: an operator clears the labels.
// The update (who and why) is recorded in the history; the reset keeps
// what it cleared (Labels.LastReset) for tasks show and audit show.
func (t *task) resetLabels(ctx workflow.Context, r api.ResetLabelsRequest) (api.ResetLabelsResult, error) {
	before := t.labels.Clone()
	before.LastReset = nil
	t.labels = api.Labels{Resets: t.labels.Resets + 1, LastReset: &api.LabelsReset{
		By: strings.TrimSpace(r.By), Reason: strings.TrimSpace(r.Reason), At: workflow.Now(ctx), Before: before}}
	workflow.GetLogger(ctx).Info("labels reset", "task", t.in.TaskID, "by", r.By, "before", before.String())
	return api.ResetLabelsResult{TaskID: t.in.TaskID, Before: before}, nil
}

// labelsFor is a copy of the labels for a decision or the status (nil in
// runs that keep none).
func (t *task) labelsFor() *api.Labels {
	if !t.labelsOn {
		return nil
	}
	l := t.labels.Clone()
	return &l
}

// judgedSpec is the spec of the declaration the worker judged (out.Route),
// else the request's. Runs that keep labels also run the judged route
// (changeJudgedRoute came first), so this is the spec of what ran.
func judgedSpec(req api.CallRequest, out api.DecideOutput) api.ToolSpec {
	if r := out.Route; r != nil && r.Server != "" && r.UpstreamTool != "" {
		return r.Spec
	}
	return req.Spec
}

// observe raises the labels by what a call did (see the package comment
// above for which outcomes count), and sets res.Labels when it raised
// them, so the call's record says which call raised what.
func (t *task) observe(ctx workflow.Context, tool string, spec api.ToolSpec, res *api.CallResult, findings []api.Finding) {
	if !t.labelsOn {
		return
	}
	before := t.labels.Clone()
	delivered := res.Outcome == api.OutcomeOK || res.Outcome == api.OutcomeToolError
	if delivered && spec.DataLevel != "" {
		t.labels.Read(spec.DataLevel)
	}
	if delivered && spec.OpenWorld {
		t.labels.Taint(tool + " (open_world)")
	}
	for _, f := range findings {
		if strings.HasPrefix(f.Rule, api.InjectionRulePrefix) {
			t.labels.Taint(tool + " (" + f.Rule + " at " + f.Path + ")")
			break
		}
	}
	switch res.Outcome {
	case api.OutcomeOK, api.OutcomeToolError, api.OutcomeUnknown, api.OutcomeCancelled:
		if api.IsEgress(spec.SideEffects) {
			t.labels.Sent(tool)
		}
	}
	if t.labels.Raised(before) {
		l := t.labels.Clone()
		l.LastReset = nil
		res.Labels = &l
		workflow.GetLogger(ctx).Info("labels raised", "task", t.in.TaskID, "tool", tool, "labels", l.String())
	}
}

// labelsReason is what an approval request adds to its reason: the task's
// labels, so that the approver is told what the task has read, ingested
// and sent ("" when it keeps none or none is raised).
func (t *task) labelsReason() string {
	if !t.labelsOn || t.labels.Empty() {
		return ""
	}
	return "Task labels: " + t.labels.String() + "."
}
