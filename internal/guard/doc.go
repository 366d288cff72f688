// Package guard is airlock's content guard: it finds secrets (private
// keys, cloud and service tokens), personal data and prompt-injection
// markers in text, in MCP tool results and in tool definitions, and
// redacts them, blocks the result or records them (annotate), before the
// result leaves the worker's activity, so that neither the workflow
// history, the audit stream nor the model ever holds a value it redacted
// (issue 30 §1).
//
// The rules are small documented sets of RE2 expressions (rules.go,
// personal.go, injection.go), linear in the input. It imports the MCP SDK
// (for the result and tool types) and the standard library (a library:
// not api; the worker and the gateway turn its Findings into
// api.Findings, logs and metrics); it never logs.
package guard
