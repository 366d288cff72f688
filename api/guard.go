package api

// Finding is one secret the worker's content guard found in a tool's
// result (issue 30 §1): which rule matched, where (the result's JSON
// path, e.g. "content[0].text" or "structuredContent.env.token"), and
// what was done. The value itself is never recorded.
type Finding struct {
	// Rule names the kind of secret ("aws-access-key", "private-key", …;
	// the rules are internal/guard's).
	Rule string
	// Path is where in the CallToolResult it was.
	Path string
	// Action is what the guard did: "redact" (the value replaced by a
	// marker, the rest delivered) or "block" (the whole result replaced
	// by an error result).
	Action string
}
