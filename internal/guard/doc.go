// Package guard is airlock's content guard: it finds secrets (private
// keys, cloud and service tokens), personal data (e-mail addresses,
// payment cards, IBANs, phone numbers) and prompt-injection markers in
// text, in MCP tool results (result.go), in a call's JSON arguments
// (arguments.go) and in tool definitions (description.go), and redacts
// them, blocks the result or records them (annotate) (issue 30 §1). The
// worker inspects results before they leave its activity and the gateway
// inspects arguments before the call enters its task, so that neither the
// workflow history, the audit stream nor the model holds a value under
// redact or block.
//
// The rules are small documented sets of RE2 expressions (rules.go,
// personal.go, injection.go), linear in the input. It imports the MCP SDK
// (for the result and tool types), internal/jsoncanon (to refuse repeated
// keys) and the standard library (a library: not api; its callers — the
// worker and the gateway — turn its Findings into api.Findings, logs and
// metrics); it never logs.
package guard
