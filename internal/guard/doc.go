// Package guard is airlock's content guard: it finds secrets (private
// keys, cloud and service tokens) in text and in MCP tool results, and
// redacts them or blocks the result, before the result leaves the worker's
// activity, so that neither the workflow history, the audit stream nor the
// model ever holds the value (issue 30 §1; the first slice: secrets in
// results only).
//
// The rules are a small documented set of RE2 expressions (rules.go),
// linear in the input. It imports the MCP SDK (for the result type) and
// the standard library (a library: not api; the worker turns its Findings
// into api.Findings); it never logs.
package guard
