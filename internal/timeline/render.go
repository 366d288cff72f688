package timeline

import (
	"cmp"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-run/airlock/internal/redact"
)

// RenderOptions tune Render. The zero value (or nil) is fine.
type RenderOptions struct {
	// UIURL is the Temporal Web UI's base URL ("http://127.0.0.1:8233");
	// when set, a "ui:" line links to the task's workflow.
	UIURL string
	// Namespace is the task's Temporal namespace, for the link.
	Namespace string
}

// Render writes the timeline for people: a header, then one line per
// event, with the events of a call or a rollback indented under it. Times
// are UTC, RFC 3339.
func Render(w io.Writer, tl *Timeline, opts *RenderOptions) error {
	if opts == nil {
		opts = &RenderOptions{}
	}
	var b strings.Builder
	kind := "agent task"
	switch tl.Kind {
	case "plan":
		kind = "plan " + tl.Plan
	case "rollback":
		kind = "rollback of the ended task, as " + tl.Workflow
	}
	fmt.Fprintf(&b, "task:      %s (%s)\n", tl.Task, kind)
	fmt.Fprintf(&b, "principal: %s\n", tl.Principal)
	if tl.Client != "" {
		fmt.Fprintf(&b, "client:    %s\n", tl.Client)
	}
	fmt.Fprintf(&b, "started:   %s\n", ts(tl.Started))
	if tl.Ended != nil {
		fmt.Fprintf(&b, "ended:     %s, %s\n", ts(*tl.Ended), tl.End)
	} else {
		fmt.Fprintf(&b, "state:     %s\n", tl.End)
	}
	fmt.Fprintf(&b, "runs:      %d\n", len(tl.Runs))
	fmt.Fprintf(&b, "calls:     %d\n", len(tl.Calls))
	if tl.Labels != nil || len(tl.LabelResets) > 0 { // information-flow labels (labels.go)
		fmt.Fprintf(&b, "labels:    %s\n", redact.VisibleLine(clip(labelsLine(tl), shortLen*2)))
	}
	if len(tl.Programs) > 0 {
		var ps []string
		for _, p := range tl.Programs {
			ps = append(ps, p.ID+" "+p.Outcome)
		}
		fmt.Fprintf(&b, "programs:  %s\n", redact.VisibleLine(clip(strings.Join(ps, ", "), shortLen*2)))
	}
	if len(tl.Steps) > 0 {
		var s []string
		for _, st := range tl.Steps {
			s = append(s, st.ID+" "+st.State)
		}
		fmt.Fprintf(&b, "steps:     %s\n", strings.Join(s, ", "))
	}
	if u := UILink(opts.UIURL, opts.Namespace, cmp.Or(tl.Workflow, tl.Task)); u != "" {
		fmt.Fprintf(&b, "ui:        %s\n", u)
	}
	for _, p := range tl.Problems {
		fmt.Fprintf(&b, "problem:   %s\n", p)
	}
	b.WriteString("\n")
	for _, e := range events(tl) {
		// Text from agents, tools and approvers is shown with its
		// control characters escaped (redact.VisibleLine), so it cannot
		// rewrite the terminal; an event's further lines (a program's
		// source) are indented under it.
		indent := strings.Repeat("  ", e.depth)
		first, rest, _ := strings.Cut(e.text, "\n")
		fmt.Fprintf(&b, "%s  %s%s\n", ts(e.at), indent, redact.VisibleLine(first))
		if rest != "" {
			pad := strings.Repeat(" ", len(timeFormat)+2) + indent + "  "
			for _, l := range strings.Split(rest, "\n") {
				fmt.Fprintf(&b, "%s%s\n", pad, redact.VisibleLine(l))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// UILink is the Temporal Web UI's page of a task's workflow, or "" without
// a base URL.
func UILink(base, namespace, task string) string {
	if base == "" {
		return ""
	}
	if namespace == "" {
		namespace = "default"
	}
	return strings.TrimRight(base, "/") + "/namespaces/" + url.PathEscape(namespace) + "/workflows/" + url.PathEscape(task)
}

// timeFormat is RFC 3339 with milliseconds: the events of one call are
// often within the same second.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func ts(t time.Time) string { return t.UTC().Format(timeFormat) }
