// Package timeline turns the recorded history of a task (an AgentTask or a
// Plan, across its continue-as-new runs) into an audit trail: who asked
// for what, the policy decision and its rule, who approved and when, what
// ran and how it ended, and what was undone.
//
// What lives here:
//
//   - Build and BuildChain: pure functions from Temporal history events to
//     a Timeline, decoding payloads with the SDK's default data converter
//     into the wire types of package api;
//   - Render: the timeline for people, one line per event;
//   - Export and Verify: the timeline as JSON lines, one record per event,
//     chained by SHA-256 so that an altered, reordered or removed record is
//     found (see export.go for the exact scheme);
//   - SEP3004Exporter and VerifySEP3004: the same events as records of the
//     SEP-3004 draft (sep3004.go): canonical JSON, a previous_hash chain,
//     the outcome enum, airlock's fields as the "airlock" extension, an
//     Ed25519 receipt per record when a key is given, and a seal that
//     counts them;
//   - FetchRuns: the histories of a task's runs from Temporal.
//
// Programs (code mode) are shown as one block each: the program's source,
// its calls (IDs <program>/<n>, each with the line that made it) under it,
// and how it ended (programs.go). The source is masked where its calls
// pass values at redact paths. Render escapes control characters in every
// line it writes.
//
// Arguments are redacted before they reach a Timeline: the manifests'
// redact paths for the tool (Options.Redact, and the paths recorded with an
// approval request) are masked, and, at any depth, members named _meta or
// named like a credential (token, secret, password, authorization, api key,
// cookie, credential, private key) are removed. The history holds no Slack
// tokens, signing secrets or upstream credentials (they stay in process
// configuration); the second rule is a defence against a caller who puts
// one in a tool's arguments.
//
// The package may import api (wire types), internal/redact (the masking
// and scrubbing of arguments), internal/policy (effect and check names)
// internal/jsoncanon (RFC 8785 canonical JSON), internal/signkey (the
// receipt key's ID), golang.org/x/text (Unicode NFC, which the draft
// requires of protected strings) and the Temporal SDK; nothing in airlock's request path imports it.
package timeline
