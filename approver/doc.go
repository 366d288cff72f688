// Package approver is the approval service: how a person decides on a
// tool call that policy sends for approval.
//
// What lives here, by file:
//
//   - decide.go: reading requests from the tasks and delivering a decision
//     to a task as the decide Update, shared by every path;
//   - edits.go: approve with edits, shared by every path (edited arguments
//     checked, masked values restored, their own Update IDs);
//   - grants.go: approval grants shared by every path (their Update IDs,
//     revoking);
//   - local.go: the local decider for use without Slack (Local, Decision,
//     Refusal, MayDecide, AuthenticateKey), behind the CLI (airlock approvals
//     approve|deny ID) and the local web page;
//   - render.go: requests for a terminal (airlock approvals list|show) and
//     what the web page shares with it (ExpiresIn, the short digest);
//   - web.go: the local web page (WebHandler): a login with an API key, a
//     signed session cookie, the pending requests with Approve and Deny;
//   - loginlimit.go: the web page's limit on failed logins, a token bucket
//     per client address;
//   - webhook.go: the webhook channel: WebhookNotifier posts requests and
//     their updates as signed JSON, WebhookDecisions takes signed decisions
//     back (SignWebhook, VerifyWebhook);
//   - slack.go: the Slack notifier (activities.Notifier) that posts and
//     updates the request messages;
//   - slack_render.go: Slack Block Kit rendering of an approval request
//     (who asks, which tool, its arguments with the manifest's redactions
//     applied, side effects, risk) with Approve and Deny buttons, and of the
//     message once a request is decided, expired or escalated;
//   - slack_setup.go: the Slack app's tokens and secrets from the
//     configuration;
//   - slack_check.go: SlackApp.Check (airlock slack check), which verifies
//     the tokens, channels and users against Slack and says how to fix each
//     problem;
//   - slack_manifest.go: SlackManifest, the Slack app manifest that makes
//     the app airlock needs, and its bot scopes;
//   - interactions.go: the Slack interaction endpoint, which checks each
//     request's signature (signing secret and timestamp) before acting on a
//     click;
//   - socket.go: Socket Mode for workspaces that cannot receive HTTP;
//   - slack_modal.go: what the Slack modals share: a button on the
//     request's message opens one, and its submission is the decision;
//   - slack_edits.go: the Slack "Edit & approve" modal (views.open, then a
//     signed view_submission);
//   - slack_grants.go: the one-click "Approve + next …" buttons in Slack;
//   - slack_grant_form.go: the "Approve + grant…" modal that chooses a grant
//     within max_grant, and submitView, which answers both modals'
//     submissions, over HTTP and in the Socket Mode ack.
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
// Imports go down: it may import api (the wire contract), activities (the
// Notifier interface it implements), and the libraries internal/redact
// (masking arguments, escaping text for a terminal), internal/auditstream,
// internal/identity and internal/config. workflows, activities, the gateway
// and internal/ must not import it; cmd/airlock wires it.
package approver
