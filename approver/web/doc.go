// Package web is the local approvals page (/approvals on the gateway or
// airlock dev): a person logs in with their API key and approves or denies
// the pending requests they may decide, with edits or a grant when the
// tool allows. It keeps no state but a signing secret, and decides through
// approver.Local, so a decision on the page counts exactly as one on the
// CLI.
//
// What lives here, by file:
//
//   - web.go: the page (Handler): a login with an API key, a signed
//     session cookie, CSRF tokens and the same-origin check, the pending
//     requests with Approve, Deny, Edit arguments and the grant fields;
//   - loginlimit.go: the limit on failed logins, a token bucket per key
//     (web.go keys it by client address, or by a browser that has logged
//     in before).
//
// Imports: approver (the decision rules), api, and the libraries
// internal/redact, internal/auditstream and internal/identity; never
// another channel.
package web
