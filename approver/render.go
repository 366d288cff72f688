package approver

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/redact"
)

// Redacted is r with its arguments masked, for printing as JSON.
func Redacted(r api.ApprovalRequest) api.ApprovalRequest {
	if e := r.Edit; e != nil { // approve with edits: both versions masked
		masked := *e
		masked.Original, masked.Arguments = redact.Arguments(e.Original, r.Redact), redact.Arguments(e.Arguments, r.Redact)
		r.Edit = &masked
	}
	v, err := redact.MaskArguments(r.Arguments, r.Redact)
	if err != nil {
		r.Arguments = json.RawMessage(`"(withheld: not JSON)"`)
		return r
	}
	b, err := json.Marshal(v)
	if err != nil {
		r.Arguments = json.RawMessage(`"(withheld)"`)
		return r
	}
	r.Arguments = b
	return r
}

// ExpiresIn says how long until the request expires, "expired" once it has.
func ExpiresIn(r api.ApprovalRequest, now time.Time) string {
	d := r.ExpiresAt.Sub(now)
	if d <= 0 {
		return "expired"
	}
	if d >= time.Minute {
		return strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s")
	}
	return d.Truncate(time.Second).String()
}

// WriteList prints requests as a table, one a line.
func WriteList(w io.Writer, reqs []api.ApprovalRequest, now time.Time) error {
	if len(reqs) == 0 {
		_, err := fmt.Fprintln(w, "no approval requests are pending")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	// A PROGRAM column (code mode) only when a program made a listed call.
	programs := slices.ContainsFunc(reqs, func(r api.ApprovalRequest) bool { return r.Program != "" })
	head := "ID\tTASK\tTOOL\tREQUESTER\tGROUP\tVOTES\tEXPIRES IN"
	if programs {
		head += "\tPROGRAM"
	}
	fmt.Fprintln(tw, head)
	for _, r := range reqs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s", cell(r.ID), cell(r.TaskID), cell(r.Tool), cell(r.Principal), cell(r.Group),
			r.Approvals(), r.Quorum, ExpiresIn(r, now))
		if programs {
			where := ProgramWhere(r.Program, r.Line)
			if where == "" {
				where = "-" // the agent's own call
			}
			fmt.Fprintf(tw, "\t%s", cell(where))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// WriteRequest prints one request in full, its arguments masked.
func WriteRequest(w io.Writer, r api.ApprovalRequest, now time.Time) error {
	var b strings.Builder
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%-14s %s\n", k+":", cell(v))
		}
	}
	line("request", r.ID)
	line("state", r.State)
	line("task", r.TaskID)
	line("call", r.CallID)
	line("tool", r.Tool)
	line("program", ProgramWhere(r.Program, r.Line)) // code mode: the call is a program's
	line("server", r.Server)
	requester := r.Principal
	if r.Client != "" {
		requester += " (client " + r.Client + ")"
	}
	line("requester", requester)
	if r.ActsAs != "" {
		line("acts as", ActsAsNote(r.ActsAs, r.ActsUntil, r.ActsHeld, r.State == api.ApprovalPending && now.After(r.ActsUntil), func(t time.Time) string {
			return t.Local().Format(time.DateTime)
		}))
	}
	line("outcome", r.NotRun) // approved, but the call did not run (the user's grant is gone)
	line("side effects", strings.Join(r.SideEffects, ", "))
	line("data level", r.DataLevel)
	line("risk", r.Risk)
	line("rule", r.Rule)
	line("reason", r.Reason)
	line("group", fmt.Sprintf("%s (%d of %d approvals needed; members: %s)", r.Group, r.Quorum, len(r.Approvers), strings.Join(r.Approvers, ", ")))
	if r.Escalated || r.EscalateTo != "" {
		esc := r.EscalateTo + " at " + r.EscalateAt.Local().Format(time.DateTime)
		if r.Escalated {
			esc += " (escalated)"
		}
		line("escalation", esc)
	}
	line("requested", r.RequestedAt.Local().Format(time.DateTime))
	expires := r.ExpiresAt.Local().Format(time.DateTime)
	if r.State == api.ApprovalPending {
		expires += " (in " + ExpiresIn(r, now) + "; then " + r.OnTimeout + ")"
	}
	line("expires", expires)
	if !r.DecidedAt.IsZero() {
		line("decided", r.DecidedAt.Local().Format(time.DateTime))
	}
	line("policy", r.PolicyVersion)
	line("digest", r.Digest)
	writeEdits(line, r) // approve with edits (edits.go)
	writeDeliveries(&b, r)
	if len(r.Votes) > 0 {
		b.WriteString("votes:\n")
		for _, v := range r.Votes {
			verb := "approved"
			if !v.Approve {
				verb = "denied"
			}
			fmt.Fprintf(&b, "  %s %s via %s at %s", cell(v.Approver), verb, cell(v.Via), v.At.Local().Format(time.DateTime))
			if v.Comment != "" {
				fmt.Fprintf(&b, ": %s", cell(v.Comment))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("arguments")
	if len(r.Redact) > 0 {
		fmt.Fprintf(&b, " (masked: %s)", strings.Join(r.Redact, ", "))
	}
	b.WriteString(":\n")
	for _, l := range strings.Split(redact.PrettyArguments(r.Arguments, r.Redact), "\n") {
		b.WriteString("  " + l + "\n")
	}
	_, err := io.WriteString(w, redact.Visible(b.String()))
	return err
}

// cell is one table cell: visible, on one line, without tabs.
func cell(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ").Replace(redact.Visible(s))
}

// ShortDigest is the start of a digest, as the CLI, the web page and Slack
// show it.
func ShortDigest(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// writeDeliveries lists how posting the request went per channel: a
// webhook that is still being retried, or that gave up, shows here.
func writeDeliveries(b *strings.Builder, r api.ApprovalRequest) {
	if len(r.Deliveries) == 0 {
		return
	}
	b.WriteString("delivered to:\n")
	for _, d := range r.Deliveries {
		fmt.Fprintf(b, "  %s (group %s): %s", cell(d.Notifier), cell(d.Group), d.State)
		switch {
		case d.State == api.DeliveryRetrying:
			fmt.Fprintf(b, " since %s, with backoff until the request closes (first failure: %s)", d.Since.Local().Format(time.DateTime), cell(d.Error))
		case d.State == api.DeliveryDelivered && !d.Since.IsZero():
			fmt.Fprintf(b, " at %s, after failing since %s (%s)", d.At.Local().Format(time.DateTime), d.Since.Local().Format(time.DateTime), cell(d.Error))
		case d.Error != "":
			fmt.Fprintf(b, " at %s: %s", d.At.Local().Format(time.DateTime), cell(d.Error))
		}
		b.WriteString("\n")
	}
}

// ActsAsNote says in plain words whom a call that acts as its user (token
// exchange) runs as upstream, until when, and whether the provider holds
// the user's grant (offline): what an approver must know before approving
// late. ended: the sign-in has ended while the request is pending. stamp
// formats a time for the reader (the CLI's local time, Slack's date
// tokens).
func ActsAsNote(actsAs string, until time.Time, held, ended bool, stamp func(time.Time) string) string {
	acts := actsAs + " upstream (token exchange)"
	switch {
	case held:
		acts += "; the provider holds their grant (offline): approved after their sign-in ends"
		if !until.IsZero() {
			acts += " (" + stamp(until) + ")"
		}
		acts += ", the call runs as them with a fresh exchange, unless the grant was revoked"
	case !until.IsZero():
		acts += "; their sign-in ends " + stamp(until)
		if ended {
			acts += " (ended: approved now, the call does not run)"
		} else {
			acts += ": approved after that, the call does not run"
		}
	}
	return acts
}
