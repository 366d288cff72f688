package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// Approval wire names.
const (
	// UpdateDecide delivers an approver's decision on one request. Its
	// validator rejects unknown, closed, changed and expired requests,
	// approvers outside the group and self-approval; rejected decisions
	// leave no trace in history.
	UpdateDecide = "decide"
	// QueryApprovals returns the task's approval requests.
	QueryApprovals = "approvals"
)

// SAApproval is "pending" while a task waits for an approval, else "none".
var SAApproval = temporal.NewSearchAttributeKeyKeyword("AirlockApproval")

// Approval states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalExpired  = "expired"
	// ApprovalWithdrawn: the client cancelled the call while it waited
	// (SignalCancelCall); nobody may decide on it any more.
	ApprovalWithdrawn = "withdrawn"
)

// ApprovalRequest is one call waiting for people. It is bound to the call
// by Digest: a decision made on another digest is refused.
type ApprovalRequest struct {
	// ID is "<task ID>~<call ID>"; it is all a Slack button carries.
	ID        string
	TaskID    string
	CallID    string
	Tool      string
	Server    string
	Principal string // who asked
	Client    string `json:",omitempty"`
	// ActsAs, for an upstream that acts as the user (token exchange), is
	// the user the call will act as, and ActsUntil when their sign-in
	// ends: approved after that, the call does not run.
	ActsAs    string    `json:",omitempty"`
	ActsUntil time.Time `json:",omitempty"`
	// ActsHeld: the provider holds the user's grant (offline: true), so
	// approved after ActsUntil the call still runs as them, with a fresh
	// exchange, unless the grant is revoked by then.
	ActsHeld bool `json:",omitempty"`
	// NotRun, set after the request was approved, says why the call did
	// not run after all: the user's grant was gone when it was to run
	// (refresh revoked, user disabled, sign-in ended without a held
	// grant; tasks since changeGrantGoneNotice). The approver's messages
	// are updated to say it.
	NotRun    string `json:",omitempty"`
	Arguments json.RawMessage
	// Digest is the hex SHA-256 of (task, call ID, tool, canonical args,
	// policy version).
	Digest        string
	PolicyVersion string
	Rule          string `json:",omitempty"`
	Reason        string `json:",omitempty"`
	SideEffects   []string
	DataLevel     string
	Risk          string
	Redact        []string `json:",omitempty"`

	Group     string
	Quorum    int
	Approvers []string // principals who may decide (the group's members)
	// EscalateTo names a second group notified at EscalateAt.
	EscalateTo string    `json:",omitempty"`
	EscalateAt time.Time `json:",omitempty"`
	ExpiresAt  time.Time
	OnTimeout  string // "deny" or "approve"

	RequestedAt time.Time
	State       string
	Votes       []Vote
	DecidedAt   time.Time `json:",omitempty"`
	Escalated   bool      `json:",omitempty"`
	// Messages are the notifications posted (Slack channel and ts).
	Messages []MessageRef `json:",omitempty"`
	// Deliveries say how posting went, per notifier and group (tasks
	// since changeDeliveries).
	Deliveries []Delivery `json:",omitempty"`

	// Approve with edits (edits.go).
	ApprovalEdits
	// Approval grants (grant.go): the most an approval may also grant
	// (nil: once only), the arguments a grant is bound to, and the grant
	// this request's approval made.
	MaxGrant  *GrantBound `json:",omitempty"`
	GrantArgs []string    `json:",omitempty"`
	GrantID   string      `json:",omitempty"`

	// Program and Line (code mode, issue 27): the call is the program's
	// and made at that line of its source (the source is in the task's
	// history: the program's run_program Update).
	Program string `json:",omitempty"`
	Line    int    `json:",omitempty"`
}

// Vote is one approver's decision.
type Vote struct {
	Approver string
	Approve  bool
	At       time.Time
	Via      string // slack, cli, web
	Comment  string `json:",omitempty"`
	// Grant (approval grants): what the approver also granted.
	Grant *GrantAsk `json:",omitempty"`
}

// Approvals counts the approving votes.
func (r ApprovalRequest) Approvals() int {
	n := 0
	for _, v := range r.Votes {
		if v.Approve {
			n++
		}
	}
	return n
}

// Denials counts the denying votes. The first one closes the request, so
// there is at most one.
func (r ApprovalRequest) Denials() int { return len(r.Votes) - r.Approvals() }

// Approvals counts the approving votes the notice carries.
func (n ApprovalNotice) Approvals() int {
	c := 0
	for _, v := range n.Votes {
		if v.Approve {
			c++
		}
	}
	return c
}

// Denials counts the denying votes the notice carries.
func (n ApprovalNotice) Denials() int { return len(n.Votes) - n.Approvals() }

// DecideRequest is the argument of UpdateDecide.
type DecideRequest struct {
	RequestID string
	// Digest must be the request's: the approver decided on what they saw.
	Digest   string
	Approver string // principal name
	Approve  bool
	Via      string
	Comment  string `json:",omitempty"`

	// Approve with edits (edits.go): Arguments, set only with Approve,
	// are the arguments the approver wants run instead of the request's,
	// as JSON text (a string keeps the request comparable).
	Arguments string `json:",omitempty"`
	// Grant (approval grants): an approval that also covers later calls
	// of the tool, within the request's MaxGrant.
	Grant *GrantAsk `json:",omitempty"`
	// Nonce is fresh for each delivery and echoed in DecideResult.Nonce:
	// Temporal answers a repeated Update ID with the first delivery's
	// outcome, so a different nonce tells the caller its decision is a
	// repeat that recorded nothing.
	Nonce string `json:",omitempty"`
}

// DecideResult answers the approver.
type DecideResult struct {
	RequestID string
	State     string
	// Message says what the decision did ("approved: 1 of 2 approvals").
	Message string
	// Approver and Approve are the vote this Update recorded. Temporal
	// answers a repeated Update ID with the first outcome, so a caller
	// compares them with what it asked for. Empty Approver: a result
	// recorded before these fields existed.
	Approver string `json:",omitempty"`
	Approve  bool   `json:",omitempty"`

	// Approve with edits (edits.go): EditDigest is the digest of the
	// edited arguments this decision recorded ("" when it edited nothing).
	EditDigest string `json:",omitempty"`
	// EditRefused, with EditDigest, says why policy refused the edited
	// call (nothing ran); EditEffect is what policy said of it (allow,
	// deny, require_approval; "" when the task's workflow predates it).
	EditRefused string `json:",omitempty"`
	EditEffect  string `json:",omitempty"`
	// Nonce is the DecideRequest.Nonce of the delivery that recorded
	// this outcome.
	Nonce string `json:",omitempty"`
}

// RequestDigest binds an approval to exactly one call: the task, the call
// ID, the tool, the arguments in canonical form (jsoncanon.Canonical: the
// form the upstream is sent, numbers as written) and the policy version.
// Two calls that differ only past 2^53 have different digests. Arguments
// that are not canonical JSON (a repeated key) are hashed as they are.
func RequestDigest(taskID, callID, tool string, args json.RawMessage, policyVersion string) string {
	canon := args
	if b, err := jsoncanon.Canonical(args); err == nil {
		canon = b
	}
	return digestParts(taskID, callID, tool, canon, policyVersion)
}

// LegacyRequestDigest is RequestDigest as task runs recorded before exact
// numbers (workflows' changeExactNumbers) computed it: the arguments
// decoded into float64 and re-encoded, so 9007199254740993 hashed as
// 9007199254740992. Only those runs use it.
func LegacyRequestDigest(taskID, callID, tool string, args json.RawMessage, policyVersion string) string {
	canon := args
	var v any
	if err := json.Unmarshal(args, &v); err == nil {
		if b, err := json.Marshal(v); err == nil { // map keys sorted
			canon = b
		}
	}
	return digestParts(taskID, callID, tool, canon, policyVersion)
}

func digestParts(taskID, callID, tool string, canon []byte, policyVersion string) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(taskID), []byte(callID), []byte(tool), canon, []byte(policyVersion)} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}
