package api

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Information-flow labels (issue 30 §2). A task accumulates them from what
// its calls did: the most sensitive data access level it read, whether it
// ingested open-world (untrusted) content, and which egress tools ran. They
// only ever rise: no call, argument or _meta of the agent's lowers them;
// only an operator resets them (UpdateResetLabels), recorded in the task's
// history and the audit stream. Policy rules see them as task.read_level,
// task.untrusted and task.egress.

// UpdateResetLabels resets a task's labels (an operator's command: airlock
// tasks reset-labels). Its argument is a ResetLabelsRequest, its result a
// ResetLabelsResult.
const UpdateResetLabels = "reset_labels"

// Data access levels, least sensitive first: the manifests' levels
// (manifests.DataLevel), repeated here as the order labels compare by.
var DataLevels = []string{"public", "internal", "confidential", "sensitive", "restricted"}

// LevelRank is level's place in DataLevels (0 for public), -1 for ""
// (nothing read), and false for a level that is not one of them.
func LevelRank(level string) (int, bool) {
	if level == "" {
		return -1, true
	}
	i := slices.Index(DataLevels, level)
	return i, i >= 0
}

// Egress side effects: a tool that declares one of them can move data out
// of the task (a message, a payment, a request to another system).
var EgressSideEffects = []string{"send", "pay"}

// IsEgress reports whether a tool with these side effects is an egress tool.
func IsEgress(sideEffects []string) bool {
	return slices.ContainsFunc(sideEffects, func(s string) bool { return slices.Contains(EgressSideEffects, s) })
}

// InjectionRulePrefix starts the rule IDs of the content guard's
// prompt-injection findings; any such finding in a call's result marks
// the task untrusted.
const InjectionRulePrefix = "injection-"

// maxEgressKept bounds Labels.Egress: one entry per distinct egress tool
// (exposed name), so only a task calling that many different egress tools
// reaches it; past it, EgressMore counts the rest.
const maxEgressKept = 64

// Labels are a task's information-flow labels.
type Labels struct {
	// ReadLevel is the most sensitive data_access_level a call of the task
	// read ("" when none did).
	ReadLevel string `json:",omitempty"`
	// Untrusted: a call returned open-world content (its manifest says
	// open_world: true) or the content guard found an injection marker in
	// a result.
	Untrusted bool `json:",omitempty"`
	// UntrustedBy names the first call that made the task untrusted and
	// why ("fetch__get (open_world)").
	UntrustedBy string `json:",omitempty"`
	// Egress lists the egress tools that ran (exposed names, in the order
	// they first ran); EgressMore counts those past maxEgressKept.
	Egress     []string `json:",omitempty"`
	EgressMore int      `json:",omitempty"`
	// Resets counts the operator's resets; LastReset is the newest.
	Resets    int          `json:",omitempty"`
	LastReset *LabelsReset `json:",omitempty"`
}

// LabelsReset is one reset of a task's labels by an operator.
type LabelsReset struct {
	By     string
	Reason string
	At     time.Time
	// Before are the labels the reset cleared.
	Before Labels
}

// Empty reports whether no label is raised.
func (l Labels) Empty() bool {
	return l.ReadLevel == "" && !l.Untrusted && len(l.Egress) == 0 && l.EgressMore == 0
}

// Raised reports whether l holds a label that before did not: a higher
// read level, untrusted, or another egress tool.
func (l Labels) Raised(before Labels) bool {
	r, _ := LevelRank(l.ReadLevel)
	b, _ := LevelRank(before.ReadLevel)
	return r > b || (l.Untrusted && !before.Untrusted) || len(l.Egress)+l.EgressMore > len(before.Egress)+before.EgressMore
}

// Read raises ReadLevel to level, when level is higher. An unknown level
// (not in DataLevels) counts as restricted: the highest, as policy treats
// a tool whose level it does not know.
func (l *Labels) Read(level string) {
	r, ok := LevelRank(level)
	if !ok {
		level, r = DataLevels[len(DataLevels)-1], len(DataLevels)-1
	}
	if cur, _ := LevelRank(l.ReadLevel); r > cur {
		l.ReadLevel = level
	}
}

// Taint marks the task untrusted; why names the call and the cause.
func (l *Labels) Taint(why string) {
	if !l.Untrusted {
		l.Untrusted, l.UntrustedBy = true, why
	}
}

// Sent records that egress tool ran.
func (l *Labels) Sent(tool string) {
	if slices.Contains(l.Egress, tool) {
		return
	}
	if len(l.Egress) >= maxEgressKept {
		l.EgressMore++
		return
	}
	l.Egress = append(l.Egress, tool)
}

// Clone is a deep copy.
func (l Labels) Clone() Labels {
	l.Egress = slices.Clone(l.Egress)
	if l.LastReset != nil {
		r := *l.LastReset
		r.Before = r.Before.Clone()
		r.Before.LastReset = nil
		l.LastReset = &r
	}
	return l
}

// String is the labels in one line, as tasks show, audit show and
// approval reasons print them.
func (l Labels) String() string {
	var parts []string
	if l.ReadLevel != "" {
		parts = append(parts, "read "+l.ReadLevel)
	}
	if l.Untrusted {
		u := "untrusted"
		if l.UntrustedBy != "" {
			u += " (" + l.UntrustedBy + ")"
		}
		parts = append(parts, u)
	}
	if len(l.Egress) > 0 {
		e := "egress " + strings.Join(l.Egress, ", ")
		if l.EgressMore > 0 {
			e += fmt.Sprintf(" and %d more", l.EgressMore)
		}
		parts = append(parts, e)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// ResetLabelsRequest asks a task to reset its labels. By and Reason are
// required: the reset is recorded with them.
type ResetLabelsRequest struct {
	By     string
	Reason string
}

// MaxResetReasonBytes bounds ResetLabelsRequest.Reason (and By).
const MaxResetReasonBytes = 1000

// Check says what is wrong with r, naming the field and the fix.
func (r ResetLabelsRequest) Check() error {
	switch {
	case strings.TrimSpace(r.By) == "":
		return fmt.Errorf("%s: By is empty; say who resets the labels", UpdateResetLabels)
	case strings.TrimSpace(r.Reason) == "":
		return fmt.Errorf("%s: Reason is empty; say why the labels may be reset (--reason)", UpdateResetLabels)
	case len(r.By) > MaxResetReasonBytes || len(r.Reason) > MaxResetReasonBytes:
		return fmt.Errorf("%s: By and Reason must each be under %d bytes", UpdateResetLabels, MaxResetReasonBytes)
	}
	return nil
}

// ResetLabelsResult is what a reset cleared.
type ResetLabelsResult struct {
	TaskID string
	Before Labels
}
