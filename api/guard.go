package api

import "strings"

// Finding is one secret or piece of personal data the content guard
// found (issue 30 §1): which rule matched, where, and what was done. The
// value itself is never recorded.
type Finding struct {
	// Rule names the kind ("aws-access-key", "private-key", "email", …;
	// the rules are internal/guard's).
	Rule string
	// Path is where it was: in a result, a path into the CallToolResult
	// ("content[0].text", "structuredContent.env.token"); in arguments, a
	// JSONPath ("$.env.KEY"), a key holding a finding written masked.
	Path string
	// Action is what the guard did: "redact" (the value replaced by a
	// marker, the rest delivered), "block" (the result replaced by an
	// error result; the call refused), "require_approval" (the call sent
	// to an approver) or "annotate" (delivered unchanged, recorded).
	Action string
	// Where is "arguments" for a finding in the call's arguments
	// (FindingsInArguments); empty for one in its result (and in every
	// finding recorded before arguments were inspected).
	Where string `json:",omitempty"`
}

// FindingsInArguments is the Where of a finding in a call's arguments.
const FindingsInArguments = "arguments"

// CheckGuard is the Decision.Check of a call the content guard refused
// (a finding under block) or sent to approval (require_approval).
const CheckGuard = "guard"

// SealedResult is a tool result sealed (internal/seal: X25519, HKDF,
// AES-GCM) to the gateway's held-result key (CallRequest.ResultKey), so
// that the task's history holds only ciphertext: a result the content
// guard holds for an approver under guard.results: require_approval.
type SealedResult struct {
	Peer   []byte
	Sealed []byte
}

// HeldResult is what the CallTool activity returns beside the redacted
// result when it holds a result for approval (issue 30 §1,
// require_approval for results): the clear result sealed, and the
// approval the worker's policy asks for (who, why: the findings, masked).
// The workflow waits for the approval; approved, its CallResult carries
// the sealed result (CallResult.Held), which the gateway opens and
// delivers; denied or expired, the model gets an error naming the
// findings.
type HeldResult struct {
	SealedResult
	// Reason is the approval's reason: that the call ran, and the kinds
	// and paths of the findings, never a value.
	Reason string
	// Group and Quorum say who must approve; PolicyVersion is the
	// policy that named them; Approval is the request's spec.
	Group         string
	Quorum        int
	PolicyVersion string
	Approval      *ApprovalSpec
}

// ResultApprovalCallID is the call ID of the approval request that holds
// the result of call (guard.results: require_approval): "<call ID>/result",
// so that it never meets the call's own approval request.
func ResultApprovalCallID(callID string) string { return callID + resultApprovalSuffix }

const resultApprovalSuffix = "/result"

// CallOfResultApprovalID is the call whose result approval's call ID id
// is; ok is false (and call is id) when id is no result approval's.
func CallOfResultApprovalID(id string) (call string, ok bool) {
	return strings.CutSuffix(id, resultApprovalSuffix)
}
