// Package approver is the approval service: how a person decides on a
// tool call that policy sends for approval. It holds the decision rules
// every channel applies, so each rule is written once; the channels are
// its subpackages:
//
//   - approver/slack: requests posted to Slack, signed clicks and modals
//     over HTTP or Socket Mode, airlock slack check and manifest;
//   - approver/web: the local /approvals page (an API-key login, a signed
//     session cookie, Approve and Deny);
//   - approver/webhook: requests posted as signed JSON to a bridge, and
//     the bridge's signed decisions back.
//
// What lives here, by file:
//
//   - decide.go: reading requests from the tasks and delivering a decision
//     to a task as the decide Update (Deliver), and Explain, which words a
//     delivery error for the person who decided;
//   - edits.go: approve with edits (edited arguments checked, masked values
//     restored, their own Update IDs);
//   - grants.go: approval grants (their Update IDs, revoking);
//   - local.go: the local decider (Local, Decision, Refusal, MayDecide,
//     AuthenticateKey, ChannelScope), behind the CLI (airlock approvals
//     approve|deny ID), the web page, the webhook and MCP;
//   - render.go: requests for a terminal (airlock approvals list|show) and
//     what the channels share with it (ExpiresIn, ShortDigest).
//
// A decision reaches the task's workflow as an Update, so clicks are
// idempotent and the workflow checks that the request is still open and
// that the decider may decide. Slack tokens and the signing secret stay in
// this service's configuration; they never enter workflow inputs, results or
// history. The service holds no state of its own, so it runs as many
// replicas as needed.
//
// Every decision it delivers, and every one refused, is written to the
// audit log (internal/auditstream) when one is configured.
//
// Imports go down: approver/slack, approver/web and approver/webhook
// import approver, never the other way round and never each other (what
// two channels share lives here; TestChannelsImportNoOtherChannel checks
// it). approver imports api (the wire contract) and the libraries
// internal/redact (masking arguments, escaping text for a terminal),
// internal/jsoncanon, internal/auditstream and internal/identity; its
// channels also import activities (the Notifier interface they implement)
// and internal/config. workflows, activities, the gateway and internal/
// must not import approver or its channels; cmd/airlock wires them. The
// test fixtures the packages share are in approver/internal/approvertest.
package approver
