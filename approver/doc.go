// Package approver is the approval service: how a person decides on a
// tool call that policy sends for approval.
//
// What lives here:
//
//   - Slack Block Kit rendering of an approval request (who asks, which
//     tool, its arguments with the manifest's redactions applied, side
//     effects, risk) with Approve and Deny buttons;
//   - the Slack interaction endpoint, which checks each request's signature
//     (signing secret and timestamp) before acting on a click, and Socket
//     Mode for workspaces that cannot receive HTTP;
//   - updates of the message once a request is decided, expired or
//     escalated, showing the outcome and who decided;
//   - the local approval path for use without Slack: the CLI
//     (airlock approvals approve|deny ID) and a local web page.
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
// It may import workflows (wire names and types), manifests and
// internal/auditstream; workflows and activities must not import it.
package approver
