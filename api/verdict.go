package api

import (
	"encoding/json"

	"github.com/airlock-run/airlock/manifests"
)

// The policy's vocabulary lives here, not in internal/policy, so that the
// wire types that carry it (DecideInput, DecideOutput, Decision) and every
// role that reads them share one set of words without importing the engine.

// Effect is what a decision lets happen to a call.
type Effect string

const (
	Allow           Effect = "allow"
	Deny            Effect = "deny"
	RequireApproval Effect = "require_approval"
)

// Valid reports whether e is one of the three effects.
func (e Effect) Valid() bool { return e == Allow || e == Deny || e == RequireApproval }

// The checks of the policy (internal/policy's Decide), in order;
// Verdict.Check names the one that decided. The workflow adds its own
// (CheckPin, CheckLock, CheckGrant, the limit checks).
const (
	CheckAllowlist  = "allowlist"
	CheckPermission = "permission"
	CheckDataLevel  = "data_level"
	CheckSize       = "size"
	CheckJSON       = "json"
	CheckSchema     = "schema"
	CheckPath       = "path"
	CheckRule       = "rule"
	CheckDefault    = "default"
	// CheckError means the policy could not judge the call (a malformed
	// allowlist glob, a rule that failed to evaluate, a missing approver
	// group, an internal error). It always denies.
	CheckError = "error"
)

// Principal is who makes the call.
type Principal struct {
	Name        string
	Roles       []string
	Permissions []string
	DataLevel   manifests.DataLevel
	SlackUserID string `json:",omitempty"`
}

// Verdict is the policy's answer on one call, as the Decide activity
// returns it (embedded in DecideOutput). A call records it as a Decision,
// whose JSON differs (PolicyVersion for Version, Reason omitted when
// empty); Recorded converts.
type Verdict struct {
	Effect Effect
	// Check names the step that decided (the Check* constants).
	Check string
	// Rule is the rule's name when Check is "rule", and when Check is
	// "error" because a rule failed.
	Rule string `json:",omitempty"`
	// Reason is written for the model: what failed and what would allow
	// the call.
	Reason string
	// Version is the Version of the policy that decided.
	Version string
	// Group and Quorum say who must approve a require_approval decision.
	Group  string `json:",omitempty"`
	Quorum int    `json:",omitempty"`
}

// Recorded is the Decision a call records for v.
func (v Verdict) Recorded() Decision {
	return Decision{Effect: v.Effect, Check: v.Check, Rule: v.Rule, Reason: v.Reason,
		PolicyVersion: v.Version, Group: v.Group, Quorum: v.Quorum}
}

// CheckExternal is the check of a decision that the external policy
// decision point made stricter, or that it denied because it could not be
// asked (issue 30 §3; ExternalDecision).
const CheckExternal = "external"

// ExternalDecision is what the external policy decision point (AuthZEN
// 1.0) was asked about a call and what it answered, recorded with the
// decision. The external point can only make a decision stricter: an
// answer false denies a call airlock would allow or send to approval; an
// answer true leaves airlock's decision as it is.
type ExternalDecision struct {
	// URL is the evaluation endpoint asked.
	URL string
	// Request is the evaluation request as sent, when it is at most
	// MaxRecordedExternalRequest bytes; RequestSHA256 digests it always.
	Request       json.RawMessage `json:",omitempty"`
	RequestSHA256 string
	RequestBytes  int
	// Decision is the answer (nil when none could be had: see Error).
	Decision *bool `json:",omitempty"`
	// Context is the answer's context object (reason_admin, reason_user…).
	Context json.RawMessage `json:",omitempty"`
	// Cached: the answer was reused within its Cache-Control max-age.
	Cached bool `json:",omitempty"`
	// ErrorKind (timeout, transport, status, malformed) and Error say why
	// there was no answer.
	ErrorKind string `json:",omitempty"`
	Error     string `json:",omitempty"`
	// OnError is the fail mode applied to an error: "deny" or "allow".
	OnError string `json:",omitempty"`
	// Changed: the external point's answer (or its failure) changed the
	// effect airlock had decided.
	Changed bool `json:",omitempty"`
	// Effect is what airlock itself had decided before asking.
	Effect Effect
}

// MaxRecordedExternalRequest bounds the evaluation request recorded in a
// decision; a larger one (large arguments) is recorded by its digest.
const MaxRecordedExternalRequest = 16 << 10
