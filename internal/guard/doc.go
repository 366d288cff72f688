// Package guard is airlock's content guard: it finds secrets (private
// keys, cloud and service tokens) and personal data (e-mail addresses,
// payment cards, IBANs, phone numbers) in text, in MCP tool results
// (result.go) and in a call's JSON arguments (arguments.go), and redacts
// them, blocks the result or records them (issue 30 §1). The worker
// inspects results before they leave its activity and the gateway
// inspects arguments before the call enters its task, so that neither the
// workflow history, the audit stream nor the model holds a value under
// redact or block.
//
// The rules are a small documented set of RE2 expressions (rules.go,
// personal.go), linear in the input. It imports the MCP SDK (for the
// result type), internal/jsoncanon (to refuse repeated keys) and the
// standard library (a library: not api; its callers turn its Findings
// into api.Findings); it never logs.
package guard
