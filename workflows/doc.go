// Package workflows holds airlock's durable workflows: AgentTask, the
// agent-driven task whose every tool call is an Update; Plan, the
// declarative multi-step task; RollbackTask, the rollback of a task that
// has ended; PrincipalGrants, the approval grants that span a principal's
// tasks; ResourceLock, one lock across tasks; and the call pipeline they
// share (policy decision, approval grants and wait, capture, execute,
// compensation) with its stack of pending compensations (compensation.go:
// capture, compensate, roll back). edits.go is approve with edits: an
// approver's edited arguments are judged again by policy, may go to
// another approver group, and are what runs.
//
// Everything here must replay deterministically: no clocks but
// workflow.Now, no goroutines, no map-order iteration, no I/O. Manifests and
// policy reach the workflow as values inside its inputs; activities are
// called by their wire names. Every change to workflow logic is behind
// workflow.GetVersion, and versions.go lists every change ID with the
// feature it guards and the first recorded history (testdata) that holds
// it; TestChangeIDs keeps that list, the GetVersion calls and testdata in
// step.
//
// This package imports the wire contract (api) and the deterministic
// libraries whose values it evaluates (internal/policy, manifests, plans,
// internal/redact for masking an edit's changes), never activities, the roles or anything that does I/O.
package workflows
