// Package slack is the Slack approval channel: it posts each approval
// request to its group's channel with Approve and Deny buttons, rewrites
// the message as votes come in and once the request closes, and takes the
// approvers' clicks back, signed, over HTTP or Socket Mode. A click
// becomes a decision that approver delivers under approver's rules, so a
// Slack decision counts exactly as a CLI or web one.
//
// What lives here, by file:
//
//   - notifier.go: the Slack notifier (activities.Notifier) that posts and
//     updates the request messages, and how Slack's failures are
//     classified for Temporal's retries;
//   - render.go: Slack Block Kit rendering of an approval request (who
//     asks, which tool, its arguments with the manifest's redactions
//     applied, side effects, risk) with Approve and Deny buttons, of the
//     message once a request is decided, expired or escalated, and of a
//     failed rollback; a call that acts as its user (token exchange) says
//     whom, until when and whether the grant is held, and an approved one
//     that did not run (the user's grant was gone) is rewritten to say so;
//   - app.go: the Slack app's tokens and secrets from the configuration
//     (App) and its Web API clients;
//   - check.go: App.Check (airlock slack check), which verifies the
//     tokens, channels and users against Slack and says how to fix each
//     problem;
//   - manifest.go: Manifest, the Slack app manifest that makes the app
//     airlock needs, and its bot scopes;
//   - interactions.go: the interaction endpoint, which checks each
//     request's signature (signing secret and timestamp) before acting on a
//     click, and delivers clicks in the background, each once;
//   - socket.go: Socket Mode for workspaces that cannot receive HTTP;
//   - modal.go: what the modals share: a button on the request's message
//     opens one, and its submission is the decision;
//   - edits.go: the "Edit & approve" modal (views.open, then a signed
//     view_submission);
//   - grants.go: the one-click "Approve + next …" buttons;
//   - grant_form.go: the "Approve + grant…" modal that chooses a grant
//     within max_grant, and submitView, which answers both modals'
//     submissions, over HTTP and in the Socket Mode ack.
//
// Action IDs, block IDs, callback IDs and the Update IDs made from a click
// are wire names: Slack sends them back, and Update IDs are recorded in
// histories and the audit stream.
//
// Inside this package the name slack is github.com/slack-go/slack, the
// Slack API client; callers that use both name this package otherwise.
// Imports: approver (the decision rules), api, activities, and the
// libraries internal/redact, internal/auditstream, internal/identity and
// internal/config; never another channel (approver's doc says why).
package slack
