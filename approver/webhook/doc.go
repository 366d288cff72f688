// Package webhook is the webhook approval channel, for a bridge to a chat
// tool airlock has no channel of its own for: requests, their updates and
// failed rollbacks are posted to the bridge as signed JSON, and the bridge
// posts signed decisions back to DecisionPath, where they are decided
// through approver.Local like a CLI or web decision.
//
// What lives here, by file:
//
//   - webhook.go: the signature both directions carry (Sign, Verify), the
//     channels read from the configuration (Channel, Channels), Notifier
//     (activities.Notifier) and the events it posts, and Decisions, the
//     handler of the bridge's decisions.
//
// Header names, event names, JSON fields, DecisionPath and the error
// types are the bridge's contract: they do not change.
//
// Imports: approver (the decision rules), api, activities, and the
// libraries internal/redact, internal/auditstream, internal/identity and
// internal/config; never another channel.
package webhook
