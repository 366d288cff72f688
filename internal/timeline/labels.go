package timeline

import (
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"

	"github.com/airlock-run/airlock/api"
)

// Information-flow labels (issue 30 §2): a call that raised the task's
// labels says so in its result (api.CallResult.Labels); an operator's
// reset is the reset_labels Update, with who and why.

// Event types of labels.
const (
	EventLabelsRaised = "labels_raised"
	EventLabelsReset  = "labels_reset"
)

// LabelsReset is one reset of the task's labels by an operator.
type LabelsReset struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Before are the labels the reset cleared (empty when the history
	// holds no result: refused, or not completed yet).
	Before *api.Labels `json:"before,omitempty"`
	// Refused says why the task refused it.
	Refused string `json:"refused,omitempty"`
}

// labelsResetAccepted records a reset_labels Update.
func (b *builder) labelsResetAccepted(at time.Time, id string, args *commonpb.Payloads) {
	var r api.ResetLabelsRequest
	if err := b.decode(args, &r); err != nil {
		b.problem("reset_labels update %s: %v", id, err)
	}
	b.tl.LabelResets = append(b.tl.LabelResets, LabelsReset{By: r.By, Reason: r.Reason, At: at})
	b.updates[id] = &updateRef{kind: "labels", reset: len(b.tl.LabelResets) - 1}
}

// labelsResetCompleted records what a reset cleared.
func (b *builder) labelsResetCompleted(ref *updateRef, fail *failurepb.Failure, ok *commonpb.Payloads) {
	r := &b.tl.LabelResets[ref.reset]
	if fail != nil {
		r.Refused = fail.GetMessage()
		return
	}
	var res api.ResetLabelsResult
	if err := b.decode(ok, &res); err != nil {
		b.problem("reset_labels result: %v", err)
		return
	}
	r.Before = &res.Before
	b.tl.Labels = &api.Labels{}
}

// callLabels records the labels a call raised, and the task's labels
// after it. A program's calls are read when the program ends, after
// calls that finished later, so the task's labels merge each call's in
// (labels only rise between resets) rather than take the last.
func (b *builder) callLabels(cs *callState, l *api.Labels) {
	if l == nil {
		return
	}
	cs.c.Labels = l
	m := api.Labels{}
	if b.tl.Labels != nil {
		m = b.tl.Labels.Clone()
	}
	m.Read(l.ReadLevel)
	if l.Untrusted {
		m.Taint(l.UntrustedBy)
	}
	for _, e := range l.Egress {
		m.Sent(e)
	}
	m.EgressMore = max(m.EgressMore, l.EgressMore)
	b.tl.Labels = &m
}

// labelEvents is the labels a call raised.
func labelEvents(c *Call, base eventBase) []event {
	if c.Labels == nil || c.Finished == nil {
		return nil
	}
	text := "labels raised: the task's labels are now " + c.Labels.String()
	return []event{base(*c.Finished, 1, EventLabelsRaised, text, map[string]any{"labels": c.Labels})}
}

// labelResetBlocks are the operators' resets of the labels.
func labelResetBlocks(tl *Timeline) []block {
	var out []block
	for _, r := range tl.LabelResets {
		f := map[string]any{"by": r.By, "reason": r.Reason}
		text := fmt.Sprintf("labels reset by %s (%q)", r.By, r.Reason)
		if r.Before != nil {
			f["before"] = r.Before
			text += "; they were " + r.Before.String()
		}
		if r.Refused != "" {
			f["refused"] = r.Refused
			text += "; refused: " + r.Refused
		}
		out = append(out, block{at: r.At, events: []event{{at: r.At, typ: EventLabelsReset, run: runAt(tl, r.At), text: text, fields: f}}})
	}
	return out
}

// labelsLine is the task's labels at the end of the histories, and how
// often an operator reset them.
func labelsLine(tl *Timeline) string {
	l := api.Labels{}
	if tl.Labels != nil {
		l = *tl.Labels
	}
	line := l.String()
	if n := len(tl.LabelResets); n > 0 {
		line += fmt.Sprintf(" (reset %d time(s))", n)
	}
	return line
}
