package api

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
