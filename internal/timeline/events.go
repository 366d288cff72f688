package timeline

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/airlock-run/airlock/api"
)

// Event types of the export and the rendering.
const (
	EventTaskStarted          = "task_started"
	EventContinuedAsNew       = "continued_as_new"
	EventCallRequested        = "call_requested"
	EventPolicyDecision       = "policy_decision"
	EventApprovalRequested    = "approval_requested"
	EventApprovalEscalated    = "approval_escalated"
	EventApprovalDecided      = "approval_decided"
	EventApprovalClosed       = "approval_closed"
	EventCapture              = "capture"
	EventCallAttempt          = "call_attempt"
	EventServerRequest        = "server_request"
	EventGuardFinding         = "guard_finding"
	EventCallFinished         = "call_finished"
	EventCompensationRecorded = "compensation_recorded"
	EventRollbackRequested    = "rollback_requested"
	EventCompensation         = "compensation"
	EventRollbackFinished     = "rollback_finished"
	EventFinishRequested      = "finish_requested"
	EventCancelRequested      = "cancel_requested"
	EventTaskEnded            = "task_ended"
	EventGrantRevoked         = "grant_revoked"
)

// event is one line of the rendering and one record of the export.
type event struct {
	at     time.Time
	depth  int
	typ    string
	run    int // 1-based; 0: the task as a whole
	fields map[string]any
	text   string
}

// block is an event and the events under it (a call and its decision,
// approval and result; a rollback and its compensations).
type block struct {
	at     time.Time
	events []event
}

// events lists the timeline's events grouped for reading: the task's
// start, then calls, rollbacks and requests by the time they began, each
// with its own events under it, then the task's end.
func events(tl *Timeline) []event {
	var blocks []block
	for _, c := range tl.Calls {
		if c.Program != "" && tl.Program(c.Program) != nil {
			continue // under its program
		}
		blocks = append(blocks, block{at: c.Requested, events: callEvents(tl, c)})
	}
	for _, p := range tl.Programs {
		blocks = append(blocks, block{at: p.Requested, events: programEvents(tl, p)})
	}
	for i := range tl.Rollbacks {
		blocks = append(blocks, block{at: tl.Rollbacks[i].Requested, events: rollbackEvents(tl, i)})
	}
	for _, r := range tl.Requests {
		typ, text := EventFinishRequested, "finish requested: the task ends once its running calls are done"
		if r.Type == "cancel" {
			typ, text = EventCancelRequested, "cancel requested: the task rolls back what it changed, then ends"
		}
		blocks = append(blocks, block{at: r.At, events: []event{{at: r.At, typ: typ, run: runAt(tl, r.At), text: text}}})
	}
	blocks = append(blocks, revocationBlocks(tl)...)
	blocks = append(blocks, labelResetBlocks(tl)...) // labels.go
	for i, r := range tl.Runs {
		if i == 0 {
			continue
		}
		blocks = append(blocks, block{at: r.Started, events: []event{{at: r.Started, typ: EventContinuedAsNew, run: i + 1,
			fields: map[string]any{"previous_run": tl.Runs[i-1].ID},
			text:   fmt.Sprintf("continued as new: run %d (%s)", i+1, r.ID)}}})
	}
	sort.SliceStable(blocks, func(i, j int) bool { return blocks[i].at.Before(blocks[j].at) })

	out := []event{startEvent(tl)}
	for _, b := range blocks {
		out = append(out, b.events...)
	}
	if e, ok := endEvent(tl); ok {
		out = append(out, e)
	}
	return out
}

// runAt is the run (1-based) that was current at t.
func runAt(tl *Timeline, t time.Time) int {
	n := 1
	for i, r := range tl.Runs {
		if !t.Before(r.Started) {
			n = i + 1
		}
	}
	return n
}

func startEvent(tl *Timeline) event {
	f := map[string]any{"kind": tl.Kind, "principal": tl.Principal}
	what := "agent task"
	switch tl.Kind {
	case "plan":
		what = fmt.Sprintf("plan %q (%d steps)", tl.Plan, len(tl.Steps))
		f["plan"] = tl.Plan
	case "rollback":
		what = fmt.Sprintf("rollback of the ended task (%d compensations left)", len(tl.Calls))
		f["workflow"] = tl.Workflow
	}
	text := fmt.Sprintf("task started: %s for %s", what, tl.Principal)
	if tl.Client != "" {
		f["client"] = tl.Client
		text += " via " + tl.Client
	}
	if len(tl.Roles) > 0 {
		f["roles"] = tl.Roles
	}
	if tl.DataLevel != "" {
		f["data_level"] = tl.DataLevel
	}
	var lim []string
	if n := tl.Limits.MaxCalls; n > 0 {
		f["max_calls"] = n
		lim = append(lim, fmt.Sprintf("%d calls", n))
	}
	if d := tl.Limits.Deadline; d != nil {
		f["deadline"] = d.Format(time.RFC3339Nano)
		lim = append(lim, "deadline "+d.Format(time.RFC3339))
	}
	if it := tl.Limits.IdleTimeout; it != "" {
		f["idle_timeout"] = it
		lim = append(lim, "idle timeout "+it)
	}
	if len(lim) > 0 {
		text += " (limits: " + strings.Join(lim, ", ") + ")"
	}
	if tl.Partial {
		f["partial"] = true
		text += "; the history given starts in a later run, so earlier events are missing"
	}
	return event{at: tl.Started, typ: EventTaskStarted, run: 1, fields: f, text: text}
}

func endEvent(tl *Timeline) (event, bool) {
	if tl.Ended == nil {
		return event{}, false
	}
	run := len(tl.Runs)
	if tl.End == "continued_as_new" {
		return event{at: *tl.Ended, typ: EventContinuedAsNew, run: run,
			text: "continued as new; the later runs are not in this timeline"}, true
	}
	f := map[string]any{"end": tl.End, "calls": tl.CallCount}
	text := fmt.Sprintf("task ended: %s (%d calls)", tl.End, tl.CallCount)
	if tl.EndReason != "" {
		f["reason"] = tl.EndReason
		text += ": " + tl.EndReason
	}
	if len(tl.Undone) > 0 {
		f["undone"] = tl.Undone
		text += "; not undone: " + strings.Join(tl.Undone, ", ")
	}
	return event{at: *tl.Ended, typ: EventTaskEnded, run: run, fields: f, text: text}, true
}

// eventBase makes one of a call's events: at a time and depth, of a type,
// with its text and fields (the call's ID added).
type eventBase func(at time.Time, depth int, typ, text string, f map[string]any) event

func callEvents(tl *Timeline, c *Call) []event {
	base := func(at time.Time, depth int, typ, text string, f map[string]any) event {
		if f == nil {
			f = map[string]any{}
		}
		f["call"] = c.ID
		return event{at: at, depth: depth, typ: typ, run: c.Run, fields: f, text: text}
	}
	out := []event{requestedEvent(c, base)}
	out = append(out, decisionEvents(c, base)...)
	if ap := c.Approval; ap != nil {
		out = append(out, approvalEvents(c, ap, base)...)
	}
	out = append(out, rejudgedEvents(c, base)...)
	out = append(out, lockEvents(c, base)...) // locks.go
	out = append(out, editEvents(c, base)...)
	out = append(out, captureEvents(c, base)...)
	out = append(out, exchangeEvents(c, base)...)
	out = append(out, findingEvents(c, base)...)
	if ap := c.ResultApproval; ap != nil { // guard.results: require_approval
		for _, e := range approvalEvents(c, ap, base) {
			e.text = strings.Replace(e.text, "approval ", "approval to deliver the result ", 1)
			out = append(out, e)
		}
	}
	out = append(out, tryEvents(c, base)...)
	out = append(out, resultEvents(c, base)...)
	out = append(out, labelEvents(c, base)...) // labels.go
	return append(out, compensationEvents(c, base)...)
}

// requestedEvent is the call as the client asked for it.
func requestedEvent(c *Call, base eventBase) event {
	f := map[string]any{"tool": c.Tool}
	if c.Server != "" {
		f["server"] = c.Server
	}
	if len(c.Arguments) > 0 {
		f["arguments"] = c.Arguments
	}
	text := fmt.Sprintf("call %s: %s %s", c.ID, c.Tool, short(c.Arguments))
	if c.Program != "" {
		f["program"] = c.Program
		args := short(c.Arguments)
		if len(c.Arguments) == 0 {
			// Decided and run on the fast path: the history holds its
			// arguments only as the program's source wrote them.
			args = "(arguments as in the source)"
		}
		text = fmt.Sprintf("call %s: %s %s", c.ID, c.Tool, args)
		if c.Line > 0 {
			f["line"] = c.Line
			text = fmt.Sprintf("call %s (line %d): %s %s", c.ID, c.Line, c.Tool, args)
		}
	}
	if c.Step != "" {
		f["step"] = c.Step
		text = fmt.Sprintf("step %s: call %s: %s %s", c.Step, c.ID, c.Tool, short(c.Arguments))
	}
	if c.Repeat {
		f["repeat"] = true
		text += " (a repeat of a call from an earlier run: answered with its recorded result)"
	}
	return base(c.Requested, 0, EventCallRequested, text, f)
}

// decisionEvents is the policy's decision, if one was made.
func decisionEvents(c *Call, base eventBase) []event {
	d := c.Decision
	if d == nil {
		return nil
	}
	at := c.Requested
	if d.At != nil {
		at = *d.At
	}
	f := map[string]any{"effect": d.Effect, "check": d.Check}
	how := d.Check
	if d.Rule != "" {
		f["rule"] = d.Rule
		how = "rule " + d.Rule
		switch { // issue 16 §3: the rule is the limit
		case d.Check == api.CheckBudget && d.Rule == "budget":
			how = d.Check
		case d.Check == api.CheckRateLimit || d.Check == api.CheckBudget:
			how = d.Check + " " + d.Rule
		}
	}
	if d.PolicyVersion != "" {
		f["policy_version"] = d.PolicyVersion
		how += ", policy " + d.PolicyVersion
	}
	if d.Reason != "" {
		f["reason"] = d.Reason
	}
	if d.Group != "" {
		f["group"], f["quorum"] = d.Group, d.Quorum
	}
	if d.Grant != "" {
		f["grant"] = d.Grant
	}
	text := fmt.Sprintf("policy: %s (%s): %s", d.Effect, how, d.Reason)
	if x := d.External; x != nil {
		f["external"] = externalFields(x)
		text += "; " + externalText(x)
	}
	return []event{base(at, 1, EventPolicyDecision, text, f)}
}

// rejudgedEvents is the approved call's second decision, if it was
// judged again before it ran.
func rejudgedEvents(c *Call, base eventBase) []event {
	if c.Rejudged == nil {
		return nil
	}
	ev := decisionEvents(&Call{Requested: c.Requested, Decision: c.Rejudged}, base)
	for i := range ev {
		ev[i].fields["rejudged"] = true
		ev[i].text = "judged again after approval: " + ev[i].text
	}
	return ev
}

// captureEvents is the pre-image read before the call ran, if any.
func captureEvents(c *Call, base eventBase) []event {
	cp := c.Capture
	if cp == nil {
		return nil
	}
	f := map[string]any{"tool": cp.Tool, "outcome": cp.Outcome}
	if len(cp.Arguments) > 0 {
		f["arguments"] = cp.Arguments
	}
	text := fmt.Sprintf("capture (pre-image): %s %s: %s", cp.Tool, short(cp.Arguments), cp.Outcome)
	if cp.Error != "" {
		f["error"] = cp.Error
		text += ": " + cp.Error
	}
	return []event{base(cp.At, 1, EventCapture, text, f)}
}

// exchangeEvents are the upstream's requests (sampling, elicitation)
// during the call, and what the client answered.
func exchangeEvents(c *Call, base eventBase) []event {
	var out []event
	for _, x := range c.Exchanges {
		f := map[string]any{"kind": x.Kind, "request": x.Request}
		text := fmt.Sprintf("%s requested by the upstream: %s", x.Kind, short(x.Request))
		if x.Refused != "" {
			f["refused"] = x.Refused
			text += "; not answered: " + x.Refused
		} else {
			f["answer"] = x.Answer
			text += "; the client answered " + short(x.Answer)
		}
		out = append(out, base(c.Requested, 1, EventServerRequest, text, f))
	}
	return out
}

// findingEvents are what the content guard found in the call's result
// (secrets, personal data, prompt-injection markers): kind, place and
// action, never the value.
func findingEvents(c *Call, base eventBase) []event {
	var out []event
	for _, f := range c.Findings {
		in, verb := "the result", "redacted"
		switch f.Action {
		case "block":
			verb = "withheld the result"
		case "require_approval":
			verb = "held for an approver to approve delivering it"
		case "annotate":
			verb = "delivered unchanged, recorded"
		}
		if f.Where == api.FindingsInArguments {
			in = "the arguments"
			switch f.Action {
			case "block":
				verb = "refused the call"
			case "require_approval":
				verb = "sent to approval"
			}
		}
		text := fmt.Sprintf("content guard: %s in %s at %s: %s", f.Rule, in, f.Path, verb)
		at := c.Requested
		if c.Finished != nil && f.Where != api.FindingsInArguments {
			at = *c.Finished
		}
		out = append(out, base(at, 1, EventGuardFinding, text, map[string]any{"rule": f.Rule, "path": f.Path, "action": f.Action, "where": findingWhere(f)}))
	}
	return out
}

// tryEvents are the call's attempts, unless there was one that ran.
func tryEvents(c *Call, base eventBase) []event {
	var out []event
	for _, t := range c.Tries {
		if len(c.Tries) == 1 && (t.Outcome == string(api.OutcomeOK) || t.Outcome == string(api.OutcomeToolError)) {
			break
		}
		f := map[string]any{"attempt": t.N, "outcome": t.Outcome}
		text := fmt.Sprintf("attempt %d: %s", t.N, t.Outcome)
		if t.Error != "" {
			f["error"] = t.Error
			text += ": " + t.Error
		}
		at := t.Started
		if t.Finished != nil {
			at = *t.Finished
		}
		out = append(out, base(at, 1, EventCallAttempt, text, f))
	}
	return out
}

// resultEvents is how the call finished, if it did.
func resultEvents(c *Call, base eventBase) []event {
	r := c.Result
	if r == nil {
		return nil
	}
	at := c.Requested
	if c.Finished != nil {
		at = *c.Finished
	}
	f := map[string]any{"tool": c.Tool, "outcome": r.Outcome, "attempts": r.Attempts, "duration_ms": c.DurationMS}
	text := fmt.Sprintf("finished: %s in %s", r.Outcome, time.Duration(c.DurationMS)*time.Millisecond)
	if r.Attempts > 0 {
		text += " (" + plural(r.Attempts, "attempt") + ")"
	}
	if r.Reason != "" {
		f["reason"] = r.Reason
		text += ": " + r.Reason
	}
	if r.Text != "" {
		f["text"] = r.Text
		if r.Reason == "" {
			text += ": " + oneLine(r.Text)
		}
	}
	if r.IsError {
		f["is_error"] = true
	}
	return []event{base(at, 1, EventCallFinished, text, f)}
}

// compensationEvents is the compensation recorded for the call, if any.
func compensationEvents(c *Call, base eventBase) []event {
	cp := c.Compensation
	if cp == nil {
		return nil
	}
	f := map[string]any{}
	var text string
	switch {
	case cp.State == "skipped":
		text = "compensation: nothing to undo (" + cp.Reason + ")"
		f["state"], f["reason"] = cp.State, cp.Reason
	case cp.Tool == "" && cp.Error != "":
		text = "compensation: " + cp.Error
	default:
		f["tool"] = cp.Tool
		if len(cp.Arguments) > 0 {
			f["arguments"] = cp.Arguments
		}
		text = fmt.Sprintf("compensation recorded: %s %s", cp.Tool, short(cp.Arguments))
	}
	if cp.Error != "" {
		f["error"] = cp.Error
	}
	if len(cp.Runs) == 0 && cp.State == api.CompensationPending {
		text += " (never run)"
	}
	return []event{base(cp.Recorded, 1, EventCompensationRecorded, text, f)}
}

func approvalEvents(c *Call, ap *Approval, base eventBase) []event {
	var out []event
	idf := func(f map[string]any) map[string]any { f["request"] = ap.ID; return f }
	if ap.Group != "" {
		out = append(out, base(ap.Requested, 1, EventApprovalRequested,
			fmt.Sprintf("approval requested from %s (quorum %d, digest %s, expires %s)", ap.Group, ap.Quorum, shortDigest(ap.Digest), ap.Expires.Format(time.RFC3339)),
			idf(map[string]any{"tool": c.Tool, "group": ap.Group, "quorum": ap.Quorum, "digest": ap.Digest, "expires": ap.Expires.Format(time.RFC3339Nano)})))
	}
	if ap.EscalatedAt != nil {
		out = append(out, base(*ap.EscalatedAt, 1, EventApprovalEscalated, "approval escalated to "+ap.EscalatedTo,
			idf(map[string]any{"group": ap.EscalatedTo})))
	}
	for _, v := range ap.Votes {
		verb := "denied"
		if v.Approve {
			verb = "approved"
		}
		text := fmt.Sprintf("%s %s via %s", v.Approver, verb, v.Via)
		f := idf(map[string]any{"approver": v.Approver, "approve": v.Approve, "via": v.Via})
		if v.Comment != "" {
			f["comment"] = v.Comment
			text += fmt.Sprintf(" (%q)", v.Comment)
		}
		if v.Result != "" {
			f["result"] = v.Result
			text += ": " + v.Result
		}
		if v.Grant != "" {
			f["grant"] = v.Grant
		}
		out = append(out, base(v.At, 1, EventApprovalDecided, text, f))
	}
	if ap.Decided != nil {
		out = append(out, base(*ap.Decided, 1, EventApprovalClosed, "approval request "+ap.State, idf(map[string]any{"state": ap.State})))
	}
	return out
}

func rollbackEvents(tl *Timeline, i int) []event {
	rb := tl.Rollbacks[i]
	run := runAt(tl, rb.Requested)
	f := map[string]any{"rollback": i, "by": rb.By}
	text := "rollback requested by " + rb.By
	if rb.Inferred {
		f["inferred"] = true
		text = "rollback started by the task (" + rb.By + ")"
	}
	if rb.Reason != "" {
		f["reason"] = rb.Reason
		text += ": " + rb.Reason
	}
	out := []event{{at: rb.Requested, typ: EventRollbackRequested, run: run, fields: f, text: text}}

	type run1 struct {
		c *Call
		r CompensationRun
	}
	var runs []run1
	for _, c := range tl.Calls {
		if c.Compensation == nil {
			continue
		}
		for _, r := range c.Compensation.Runs {
			if r.Rollback == i {
				runs = append(runs, run1{c, r})
			}
		}
	}
	sort.SliceStable(runs, func(a, b int) bool { return runs[a].r.Started.Before(runs[b].r.Started) })
	for _, x := range runs {
		cp := x.c.Compensation
		f := map[string]any{"rollback": i, "call": x.c.ID, "tool": cp.Tool, "outcome": x.r.Outcome, "attempts": x.r.Attempts}
		if len(cp.Arguments) > 0 {
			f["arguments"] = cp.Arguments
		}
		text := fmt.Sprintf("undo %s (%s) with %s %s: %s", x.c.ID, x.c.Tool, cp.Tool, short(cp.Arguments), x.r.Outcome)
		if x.r.Error != "" {
			f["error"] = x.r.Error
			text += ": " + x.r.Error
		}
		at := x.r.Started
		if x.r.Finished != nil {
			at = *x.r.Finished
		}
		out = append(out, event{at: at, depth: 1, typ: EventCompensation, run: runAt(tl, at), fields: f, text: text})
	}
	if rb.Finished != nil || rb.State != "running" {
		at := rb.Requested
		if rb.Finished != nil {
			at = *rb.Finished
		}
		f := map[string]any{"rollback": i, "state": rb.State}
		text := "rollback finished"
		switch rb.State {
		case "running":
			text = "rollback still running"
		case api.StateRollbackFailed, "failed":
			text = "rollback FAILED"
		}
		if rb.Result != "" {
			f["result"] = rb.Result
			text += ": " + rb.Result
		}
		if len(rb.Compensated) > 0 {
			f["compensated"] = rb.Compensated
		}
		if len(rb.Remaining) > 0 {
			f["remaining"] = rb.Remaining
			text += "; left undone: " + strings.Join(rb.Remaining, ", ")
		}
		if rb.Joined {
			f["joined"] = true
			text += " (joined the rollback already running)"
		}
		out = append(out, event{at: at, depth: 1, typ: EventRollbackFinished, run: runAt(tl, at), fields: f, text: text})
	}
	return out
}

// shortLen bounds arguments and texts in the rendering (the JSON has them
// whole).
const shortLen = 160

func short(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	return clip(string(raw), shortLen)
}

func oneLine(s string) string { return clip(strings.Join(strings.Fields(s), " "), shortLen) }

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

func shortDigest(d string) string { return clip(d, 12) }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// findingWhere is "arguments" or "result".
func findingWhere(f api.Finding) string {
	if f.Where == "" {
		return "result"
	}
	return f.Where
}

// externalText is a line on the external decision point's part in a
// decision: its answer (and context) or why there was none.
func externalText(x *api.ExternalDecision) string {
	if x.Decision == nil {
		return fmt.Sprintf("external policy %s: no answer (%s: %s), on_error %s", x.URL, x.ErrorKind, x.Error, x.OnError)
	}
	answer := "deny"
	if *x.Decision {
		answer = "allow"
	}
	if x.Cached {
		answer += " (cached)"
	}
	text := fmt.Sprintf("external policy %s: %s", x.URL, answer)
	if len(x.Context) > 0 {
		text += " " + short(x.Context)
	}
	return text
}

// externalFields are the fields of the external decision point's part.
func externalFields(x *api.ExternalDecision) map[string]any {
	f := map[string]any{"url": x.URL, "request_sha256": x.RequestSHA256, "request_bytes": x.RequestBytes, "airlock_effect": x.Effect, "changed": x.Changed}
	if len(x.Request) > 0 {
		f["request"] = x.Request
	}
	if x.Decision != nil {
		f["decision"] = *x.Decision
		f["cached"] = x.Cached
	} else {
		f["error_kind"], f["error"], f["on_error"] = x.ErrorKind, x.Error, x.OnError
	}
	if len(x.Context) > 0 {
		f["context"] = x.Context
	}
	return f
}
