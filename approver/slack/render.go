package slack

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/redact"
)

// Slack interaction wire names: the buttons' action IDs and the prefix of
// the actions block's ID, which carries the request's digest.
const (
	ActionApprove = "approve"
	ActionDeny    = "deny"
	// BlockIDPrefix + digest is the actions block's block_id: a click
	// carries it back, so the decision names what the approver saw.
	BlockIDPrefix = "airlock:"
)

// Mask replaces a redacted argument in a Slack message.
const Mask = "•••"

// MaxArgs bounds the arguments shown in a message (a section's text
// may hold 3000 characters).
const MaxArgs = 2500

// slackArguments renders arguments as indented JSON with the redact paths
// masked, cut to MaxArgs characters.
func slackArguments(args json.RawMessage, paths []string) string {
	s, err := redact.Indent(args, paths, Mask)
	if err != nil {
		// Nothing could be masked in it: show nothing.
		return fmt.Sprintf("(%d bytes of arguments withheld: not one JSON value)", len(args))
	}
	return slackTruncate(s, MaxArgs)
}

// slackTruncate cuts s to at most n characters, saying how much was cut.
func slackTruncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	total := utf8.RuneCountInString(s)
	cut := 0
	for i := range s {
		if cut == n {
			return s[:i] + fmt.Sprintf("\n… (%d more characters not shown)", total-n)
		}
		cut++
	}
	return s
}

// slackEscape escapes text for Slack's mrkdwn: &, < and > would otherwise make
// mentions (<!channel>) and links out of what an agent wrote.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// slackCode puts text in a mrkdwn code block that the text cannot close.
func slackCode(s string) string {
	return "```" + strings.ReplaceAll(slackEscape(s), "```", "`\u200b`\u200b`") + "```"
}

// slackPlain makes plain text for a header (at most 150 characters).
func slackPlain(s string, n int) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, slackClip(s, n), false, false)
}

func slackClip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func slackMd(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
}

// slackTime shows t in each reader's time zone, with a UTC fallback.
func slackTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("<!date^%d^{date_short_pretty} {time_secs}|%s>", t.Unix(), t.UTC().Format(time.RFC3339))
}

func slackList(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// slackRequestBlocks is what every message about a request shows: who asks for
// what, why it needs approval, and the arguments (masked).
func slackRequestBlocks(n api.ApprovalNotice) []slack.Block {
	who := "*" + slackEscape(n.Principal) + "*"
	if n.Client != "" {
		who += " (client " + slackEscape(n.Client) + ")"
	}
	required := "risk default"
	if n.Rule != "" {
		required = "rule `" + slackEscape(n.Rule) + "`"
	}
	if _, held := api.CallOfResultApprovalID(n.CallID); held {
		required = "content guard (`guard.results: require_approval`)"
	}
	quorum := max(n.Quorum, 1)
	fields := []*slack.TextBlockObject{
		slackMd("*Tool*\n`" + slackEscape(n.Tool) + "`"),
		slackMd("*Requested by*\n" + who),
		slackMd("*Task*\n" + slackTaskLink(n.TaskID, n.TaskURL)),
		slackMd("*Side effects*\n" + slackEscape(slackList(n.SideEffects))),
		slackMd("*Data level*\n" + slackEscape(n.DataLevel)),
		slackMd("*Risk*\n" + slackEscape(n.Risk)),
		slackMd("*Required by*\n" + required),
		slackMd(fmt.Sprintf("*Approvals needed*\n%d from group `%s`", quorum, slackEscape(n.Group))),
		slackMd("*Expires*\n" + slackTime(n.ExpiresAt)),
	}
	blocks := []slack.Block{slack.NewSectionBlock(nil, fields, nil)}
	if n.ActsAs != "" { // token exchange: whom the call acts as, until when, whether the grant is held
		note := approver.ActsAsNote("*"+slackEscape(redact.VisibleLine(n.ActsAs))+"*", n.ActsUntil, n.ActsHeld, false, slackTime)
		blocks = append(blocks, slack.NewSectionBlock(slackMd("*Acts as*\nRuns as "+slackClip(note, 2800)), nil, nil))
	}
	if b := slackProgramContext(n); b != nil { // code mode: the call is a program's
		blocks = append(blocks, b)
	}
	if n.Reason != "" {
		blocks = append(blocks, slack.NewSectionBlock(slackMd("*Why approval is needed*\n"+slackClip(slackEscape(n.Reason), 2800)), nil, nil))
	}
	blocks = append(blocks, slack.NewSectionBlock(slackMd("*Arguments*\n"+slackCode(slackArguments(n.Arguments, n.Redact))), nil, nil))
	return blocks
}

// slackProgramContext is the context line of a program's call: "from
// program `<ID>`, line <N>" (nil for a call the agent made directly). The
// ID is cut (approver.ShownProgram), kept on one line, mrkdwn-escaped,
// and its backticks shown as ˋ so it cannot close its code span.
func slackProgramContext(n api.ApprovalNotice) slack.Block {
	if n.Program == "" {
		return nil
	}
	id := strings.ReplaceAll(redact.VisibleLine(approver.ShownProgram(n.Program)), "`", "ˋ")
	text := "from program `" + slackEscape(id) + "`"
	if n.Line > 0 {
		text += fmt.Sprintf(", line %d", n.Line)
	}
	return slack.NewContextBlock("", slackMd(text))
}

func slackRequestContext(n api.ApprovalNotice, extra string) slack.Block {
	digest := n.Digest
	if len(digest) > 12 {
		digest = digest[:12]
	}
	text := fmt.Sprintf("Request `%s` · digest `%s`", slackEscape(n.RequestID), slackEscape(digest))
	if extra != "" {
		text += " · " + extra
	}
	return slack.NewContextBlock("", slackMd(text))
}

// RenderRequest is the message asking a group to decide: the request and
// Approve/Deny buttons. A button's value is only the request ID; the
// digest rides in the actions block's ID.
func RenderRequest(n api.ApprovalNotice) (fallback string, blocks []slack.Block) {
	title := "Approval needed: " + n.Tool
	fallback = fmt.Sprintf("Approval needed: %s requested by %s (request %s)", n.Tool, n.Principal, n.RequestID)
	if _, held := api.CallOfResultApprovalID(n.CallID); held { // the call ran; its result waits
		title = "Deliver the result of " + n.Tool + "?"
		fallback = fmt.Sprintf("The result of %s (requested by %s) is held: approve delivering it? (request %s)", n.Tool, n.Principal, n.RequestID)
	}
	if n.Escalation {
		title = "Escalated: approval needed: " + n.Tool
		fallback = "Escalated: " + fallback
	}
	blocks = []slack.Block{slack.NewHeaderBlock(slackPlain(title, 150))}
	if n.Escalation {
		blocks = append(blocks, slack.NewSectionBlock(slackMd(fmt.Sprintf(
			":rotating_light: *Escalated to `%s`*: nobody decided in time. Members of `%s` may now decide too.",
			slackEscape(n.Group), slackEscape(n.Group))), nil, nil))
	}
	if note := slackEditNote(n); note != "" { // approve with edits (edits.go)
		blocks = append(blocks, slack.NewSectionBlock(slackMd(note), nil, nil))
	}
	blocks = append(blocks, slackRequestBlocks(n)...)
	if votes := slackVotes(n.Votes); votes != "" {
		blocks = append(blocks, slack.NewSectionBlock(slackMd("*Decisions so far*\n"+votes), nil, nil))
	}
	approve := slack.NewButtonBlockElement(ActionApprove, n.RequestID, slackPlain("Approve", 75)).WithStyle(slack.StylePrimary)
	deny := slack.NewButtonBlockElement(ActionDeny, n.RequestID, slackPlain("Deny", 75)).WithStyle(slack.StyleDanger)
	// Approve, the grants the tool allows (the most, then a form to choose
	// less), Deny, then Edit & approve.
	buttons := append([]slack.BlockElement{approve}, slackGrantButtons(n)...) // approval grants
	// A chosen grant (grant_form.go).
	if b := grantFormButton(n); b != nil {
		buttons = append(buttons, b)
	}
	buttons = append(buttons, deny)
	if !n.NoEdits { // approve with edits (edits.go)
		buttons = append(buttons, editButton(n))
	}
	blocks = append(blocks,
		slack.NewActionBlock(BlockIDPrefix+n.Digest, buttons...),
		slackRequestContext(n, ""))
	return fallback, blocks
}

// RenderOutcome is a request's message once decided: the outcome, who
// decided and when, and no buttons.
func RenderOutcome(n api.ApprovalNotice) (fallback string, blocks []slack.Block) {
	var title, summary string
	approvals := n.Approvals()
	switch {
	case n.State == api.ApprovalApproved && n.Edit != nil && n.Edit.Refused != "": // approve with edits: policy refused the edit
		title = "Edit refused: " + n.Tool
		summary = fmt.Sprintf(":no_entry: *Edit refused by policy*: %s approved with edited arguments, but %s. *Nothing ran*, neither the original nor the edited call.",
			slackEscape(n.Edit.By), slackEscape(n.Edit.Refused))
	case n.State == api.ApprovalApproved && n.NotRun != "": // token exchange: the user's grant was gone when the call was to run
		title = "Approved, did not run: " + n.Tool
		summary = fmt.Sprintf(":no_entry: *Approved, but the call did not run*: %s. *Nothing ran*; the agent was told.",
			slackClip(slackEscape(n.NotRun), 2000))
	case n.State == api.ApprovalApproved:
		title = "Approved: " + n.Tool
		summary = fmt.Sprintf(":white_check_mark: *Approved* (%d of %d approvals)", approvals, max(n.Quorum, 1))
		if approvals == 0 {
			summary = ":white_check_mark: *Approved automatically* when the request expired (approval.on_timeout: approve)"
		}
	case n.State == api.ApprovalDenied:
		title = "Denied: " + n.Tool
		summary = ":no_entry: *Denied*"
		if n.Denials() == 0 {
			summary = ":no_entry: *Denied*: the request was closed without a deny vote (the task ended)"
		}
	case n.State == api.ApprovalExpired:
		title = "Expired: " + n.Tool
		summary = fmt.Sprintf(":hourglass: *Expired* at %s: nobody decided in time, so the call was denied", slackTime(n.ExpiresAt))
	default:
		title = "Request " + n.State + ": " + n.Tool
		summary = "*" + slackEscape(n.State) + "*"
	}
	fallback = fmt.Sprintf("%s (request %s)", title, n.RequestID)
	if votes := slackVotes(n.Votes); votes != "" {
		summary += "\n" + votes
	}
	if note := slackEditNote(n); note != "" { // approve with edits (edits.go)
		summary += "\n" + note
	}
	blocks = []slack.Block{slack.NewHeaderBlock(slackPlain(title, 150)), slack.NewSectionBlock(slackMd(summary), nil, nil)}
	blocks = append(blocks, slackRequestBlocks(n)...)
	blocks = append(blocks, slackRequestContext(n, "closed"))
	return fallback, blocks
}

// slackVotes lists decisions: "bob approved via slack at <time>".
func slackVotes(votes []api.NoticeVote) string {
	var lines []string
	for _, v := range votes {
		verb := "approved"
		if !v.Approve {
			verb = "denied"
		}
		via := ""
		if v.Via != "" {
			via = " via " + slackEscape(v.Via)
		}
		line := fmt.Sprintf("• *%s* %s%s at %s", slackEscape(v.Approver), verb, via, slackTime(v.At))
		if v.Grant != "" { // approval grants
			line += ", and also " + slackEscape(v.Grant) + " of this tool"
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// RenderRollbackFailed is the alert that a rollback stopped with
// compensations left undone: what remains, top of the stack first, and
// what an operator can do.
func RenderRollbackFailed(n api.RollbackNotice) (fallback string, blocks []slack.Block) {
	fallback = fmt.Sprintf("Rollback failed: task %s has %d change(s) left undone", n.TaskID, len(n.Remaining))
	blocks = []slack.Block{
		slack.NewHeaderBlock(slackPlain("Rollback failed: "+n.TaskID, 150)),
		slack.NewSectionBlock(nil, []*slack.TextBlockObject{
			slackMd("*Task*\n" + slackTaskLink(n.TaskID, n.TaskURL)),
			slackMd("*Principal*\n" + slackEscape(n.Principal)),
			slackMd("*Requested by*\n" + slackEscape(n.RequestedBy)),
			slackMd(fmt.Sprintf("*Left undone*\n%d", len(n.Remaining))),
		}, nil),
		slack.NewSectionBlock(slackMd("*Why*\n"+slackClip(slackEscape(n.Reason), 2800)), nil, nil),
	}
	var lines []string
	for i, r := range n.Remaining {
		if i == 10 {
			lines = append(lines, fmt.Sprintf("… and %d more", len(n.Remaining)-i))
			break
		}
		undo := "no compensation"
		switch {
		case r.Compensation != "" && r.ArgumentsRef != "":
			undo = "`" + slackEscape(r.Compensation) + "` with large arguments kept in the worker's blob store (" + slackEscape(r.ArgumentsRef) + ")"
		case r.Compensation != "":
			undo = "`" + slackEscape(r.Compensation) + "` " + slackCode(slackTruncate(string(r.Arguments), 300))
		}
		lines = append(lines, fmt.Sprintf("• call `%s` (`%s`), %s: %s", slackEscape(r.CallID), slackEscape(r.Tool), slackEscape(r.State), undo))
	}
	if len(lines) > 0 {
		blocks = append(blocks, slack.NewSectionBlock(slackMd(slackClip(strings.Join(lines, "\n"), 2900)), nil, nil))
	}
	blocks = append(blocks, slack.NewContextBlock("", slackMd(fmt.Sprintf(
		"Retry with `airlock tasks rollback %s`, or fix by hand and `airlock tasks finish %s`.", slackEscape(n.TaskID), slackEscape(n.TaskID)))))
	return fallback, blocks
}

// slackTaskLink shows a task ID, linked to its history in the Temporal Web
// UI when there is one.
func slackTaskLink(task, url string) string {
	if url == "" {
		return "`" + slackEscape(task) + "`"
	}
	return "<" + url + "|" + slackEscape(task) + ">"
}
