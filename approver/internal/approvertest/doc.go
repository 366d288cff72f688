// Package approvertest holds what the tests of approver and of its channels
// (approver/slack, approver/web, approver/webhook) share: a Temporal client
// that serves approval requests from memory, a pending request, principals
// with API keys, and a reader of audit lines. It imports no airlock package
// but the contract (api) and the libraries the fixtures are made of, so
// every one of those packages' tests may import it.
//
// What lives here, by file:
//
//   - approvertest.go: FakeTemporal, Request, Directory and AuditLines.
package approvertest
