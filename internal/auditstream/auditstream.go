// Package auditstream writes airlock's audit stream: one JSON line per
// decision point (a policy decision, a tool call attempt, an approval
// requested, decided or closed, a compensation, a failed rollback, a
// refused HTTP caller, an operator's reset of a task's labels), for a
// SIEM or `jq`. Each line has "audit": true, "ts" (RFC 3339, UTC), "event"
// and the event's fields.
//
// The workflow history stays the record; this stream is a derived view,
// written by activities and services, never by workflow code, so a replay
// writes nothing twice. Argument values are never written: a call is
// identified by task, call ID and tool, and its arguments by their SHA-256
// (ArgsHash), which matches what the history holds without repeating it.
//
// A nil *Log writes nothing, so components work without one. It imports
// zerolog and the standard library only.
package auditstream

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Event names (the "event" field).
const (
	EventDecision          = "policy_decision"
	EventCall              = "call_executed"
	EventCompensation      = "compensation_run"
	EventApprovalRequested = "approval_requested"
	EventApprovalDecided   = "approval_decided"
	EventApprovalRefused   = "approval_refused"
	EventApprovalClosed    = "approval_closed"
	EventGrantRevoked      = "grant_revoked"
	EventLabelsReset       = "labels_reset"
	EventRollbackFailed    = "rollback_failed"
	EventAuthFailed        = "auth_failed"
)

// Destinations of Open other than a file.
const (
	Stdout = "stdout"
	Stderr = "stderr"
	Off    = "off"
)

// maxReason bounds the free-text fields (refusal reasons, errors).
const maxReason = 500

// Log writes audit lines. The zero value and nil write nothing.
type Log struct {
	l   *zerolog.Logger
	now func() time.Time
}

// New writes lines to w (safe for concurrent use; each line is one Write).
func New(w io.Writer) *Log {
	l := zerolog.New(zerolog.SyncWriter(w))
	return &Log{l: &l, now: time.Now}
}

// Open opens a destination as the audit.log setting names it: "stdout",
// "stderr", "off" (nil Log), or a file path, appended to (created 0600,
// its directory 0700). Close the returned closer at exit (a no-op for
// stdout, stderr and off).
func Open(dest string, stdout, stderr io.Writer) (*Log, io.Closer, error) {
	switch dest {
	case Off:
		return nil, nopCloser{}, nil
	case Stdout:
		return New(stdout), nopCloser{}, nil
	case Stderr:
		return New(stderr), nopCloser{}, nil
	case "":
		return nil, nil, errors.New("audit log: no destination; use stdout, stderr, off or a file path")
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
		return nil, nil, fmt.Errorf("audit log %s: %w", dest, err)
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("audit log: %w", err)
	}
	return New(f), f, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// ArgsHash is the hex SHA-256 of a call's arguments as sent, so a line can
// be matched with the history (and two calls with the same arguments with
// each other) without the values.
func ArgsHash(args []byte) string {
	if len(args) == 0 {
		return ""
	}
	sum := sha256.Sum256(args)
	return hex.EncodeToString(sum[:])
}

func (a *Log) event(name string) *zerolog.Event {
	if a == nil || a.l == nil {
		return nil // zerolog's methods on a nil event do nothing
	}
	return a.l.Log().Bool("audit", true).Str("ts", a.now().UTC().Format(time.RFC3339Nano)).Str("event", name)
}

// Decision is one policy decision (the Decide activity).
type Decision struct {
	Task, Call, Tool, Principal string
	Effect, Check, Rule         string
	PolicyVersion               string
	Group                       string // the approver group, for require_approval
	Args                        []byte // hashed, never written
	// Findings are the content guard's findings in the arguments, each
	// "rule at path: action" (never the value).
	Findings []string
	// External is the external policy decision point's part, when it was
	// asked (issue 30 §3).
	External *External
}

// External is what an external policy decision point was asked and
// answered. The request is written as its digest (it holds the
// arguments); the answer's context is written as the PDP sent it.
type External struct {
	URL, RequestSHA256 string
	// Decision is "allow", "deny", or "" when there was no answer (ErrorKind).
	Decision  string
	Context   []byte // a JSON object, or nil
	Cached    bool
	ErrorKind string
	OnError   string
	Changed   bool
}

// Decision writes a policy_decision line. The decision's reason is left
// out: reasons may quote argument values (a path outside the roots).
func (a *Log) Decision(d Decision) {
	e := a.event(EventDecision).Str("task", d.Task).Str("call", d.Call).Str("tool", d.Tool).Str("principal", d.Principal).
		Str("effect", d.Effect).Str("check", d.Check).Str("rule", d.Rule).Str("policy_version", d.PolicyVersion).
		Str("group", d.Group).Str("args_sha256", ArgsHash(d.Args))
	if len(d.Findings) > 0 {
		e = e.Strs("findings", d.Findings)
	}
	if x := d.External; x != nil && e != nil {
		ed := zerolog.Dict().Str("url", x.URL).Str("request_sha256", x.RequestSHA256).Bool("changed", x.Changed)
		if x.Decision != "" {
			ed = ed.Str("decision", x.Decision).Bool("cached", x.Cached)
		} else {
			ed = ed.Str("error", x.ErrorKind).Str("on_error", x.OnError)
		}
		if len(x.Context) > 0 {
			ed = ed.RawJSON("context", x.Context)
		}
		e = e.Dict("external", ed)
	}
	e.Send()
}

// Call is one attempt at running a tool (the CallTool activity).
type Call struct {
	Task, Call, Tool string
	Attempt          int
	// Result is "ok", "tool_error" (the tool ran and reported an error) or
	// "error" (see ErrorType).
	Result string
	// ErrorType is the activity error type (NotSent, OutcomeUnknown,
	// Rejected, Internal) when Result is "error".
	ErrorType string
	Duration  time.Duration
	Args      []byte // hashed, never written
	// Findings are the content guard's findings in the result, each
	// "rule at path: action" (never the value).
	Findings []string
}

// Call writes a call_executed line, or compensation_run for a
// compensation (a call whose ID starts with "undo-").
func (a *Log) Call(c Call, compensation bool) {
	name := EventCall
	if compensation {
		name = EventCompensation
	}
	e := a.event(name).Str("task", c.Task).Str("call", c.Call).Str("tool", c.Tool).Int("attempt", c.Attempt).
		Str("result", c.Result).Float64("duration_seconds", c.Duration.Seconds()).Str("args_sha256", ArgsHash(c.Args))
	if c.ErrorType != "" {
		e = e.Str("error_type", c.ErrorType)
	}
	if len(c.Findings) > 0 {
		e = e.Strs("findings", c.Findings)
	}
	e.Send()
}

// ApprovalRequest is an approval request announced to a group (the
// NotifyApprovers activity).
type ApprovalRequest struct {
	Request, Task, Call, Tool, Principal string
	Group                                string
	Quorum                               int
	Rule                                 string
	Digest                               string
	ExpiresAt                            time.Time
	Escalation                           bool
	// Posted is how many messages the notifiers posted (0: decided
	// locally only); NotifyError says why posting failed, if it did.
	Posted      int
	NotifyError string
}

// ApprovalRequested writes an approval_requested line.
func (a *Log) ApprovalRequested(r ApprovalRequest) {
	e := a.event(EventApprovalRequested).Str("task", r.Task).Str("call", r.Call).Str("request", r.Request).Str("tool", r.Tool).
		Str("principal", r.Principal).Str("group", r.Group).Int("quorum", r.Quorum).Str("rule", r.Rule).Str("digest", r.Digest).
		Str("expires_at", r.ExpiresAt.UTC().Format(time.RFC3339Nano)).Bool("escalation", r.Escalation).Int("posted", r.Posted)
	if r.NotifyError != "" {
		e = e.Str("notify_error", truncate(r.NotifyError))
	}
	e.Send()
}

// ApprovalDecision is one person's decision as delivered to the task (the
// approver's Slack, CLI and web paths).
type ApprovalDecision struct {
	Request  string
	Approver string
	Approve  bool
	Via      string // slack, cli, web
	UpdateID string
	// State is the request's state after the decision (pending, approved,
	// denied), when it was recorded.
	State string
	// Refused says why the decision did not count (the workflow's
	// validator, or a local check); the line is then approval_refused.
	Refused string
	// EditDigest is the digest of the arguments an approver edited and
	// approved (approve with edits).
	EditDigest string
	// Grant is what an approval also granted ("3 calls", approval grants).
	Grant string
}

// ApprovalDecision writes approval_decided, or approval_refused when
// d.Refused is set.
func (a *Log) ApprovalDecision(d ApprovalDecision) {
	name := EventApprovalDecided
	if d.Refused != "" {
		name = EventApprovalRefused
	}
	task, _, _ := strings.Cut(d.Request, "~") // api.SplitRequestID; this package imports no airlock package
	decision := "deny"
	if d.Approve {
		decision = "approve"
	}
	e := a.event(name).Str("task", task).Str("request", d.Request).Str("approver", d.Approver).Str("decision", decision).
		Str("via", d.Via).Str("update_id", d.UpdateID)
	if d.Refused != "" {
		e = e.Str("reason", truncate(d.Refused))
	} else {
		e = e.Str("state", d.State)
	}
	if d.EditDigest != "" {
		e = e.Str("edit_digest", d.EditDigest)
	}
	if d.Grant != "" {
		e = e.Str("grant", d.Grant)
	}
	e.Send()
}

// ApprovalOutcome is how an approval request ended (the
// UpdateApprovalMessages activity).
type ApprovalOutcome struct {
	Request, Task, Call, Tool, Principal string
	// Outcome is approved, denied, expired or canceled.
	Outcome   string
	Approvers []string // who voted, in order
	Waited    time.Duration
}

// ApprovalClosed writes an approval_closed line.
func (a *Log) ApprovalClosed(o ApprovalOutcome) {
	a.event(EventApprovalClosed).Str("task", o.Task).Str("call", o.Call).Str("request", o.Request).Str("tool", o.Tool).
		Str("principal", o.Principal).Str("outcome", o.Outcome).Strs("approvers", o.Approvers).
		Float64("waited_seconds", o.Waited.Seconds()).Send()
}

// RollbackFailure is a rollback that stopped with compensations undone
// (the NotifyRollbackFailed activity).
type RollbackFailure struct {
	Task, Principal, Group, RequestedBy string
	// Remaining are the call IDs whose compensations did not run.
	Remaining []string
	Tools     []string // their tools, in the same order
}

// RollbackFailed writes a rollback_failed line.
func (a *Log) RollbackFailed(r RollbackFailure) {
	a.event(EventRollbackFailed).Str("task", r.Task).Str("principal", r.Principal).Str("group", r.Group).
		Str("requested_by", r.RequestedBy).Int("remaining", len(r.Remaining)).Strs("calls", r.Remaining).Strs("tools", r.Tools).Send()
}

// AuthFailure is an HTTP request refused for its credentials.
type AuthFailure struct {
	// Channel is where it came: "mcp" (the gateway's endpoint; the
	// default), "web" (a login on the approvals page), "slack" (an
	// interaction whose signature did not verify) or "webhook" (a decision
	// from a webhook approval channel).
	Channel string
	Status  int // 401, 403, or 429 for a rate-limited login
	// Principal is who the credentials name (403: a session of another
	// principal), "" when they name nobody.
	Principal string
	Reason    string
	Method    string
	Path      string
	Remote    string
}

// AuthFailed writes an auth_failed line.
func (a *Log) AuthFailed(f AuthFailure) {
	ch := f.Channel
	if ch == "" {
		ch = "mcp"
	}
	a.event(EventAuthFailed).Str("channel", ch).Int("status", f.Status).Str("principal", f.Principal).Str("reason", truncate(f.Reason)).
		Str("method", f.Method).Str("path", f.Path).Str("remote", f.Remote).Send()
}

func truncate(s string) string {
	if len(s) <= maxReason {
		return s
	}
	return strings.ToValidUTF8(s[:maxReason], "") + "…"
}
