// Package workflows holds airlock's durable workflows: AgentTask, the
// agent-driven task whose every tool call is an Update; Plan, the
// declarative multi-step task; RollbackTask, the rollback of a task that
// has ended; PrincipalGrants, the approval grants that span a principal's
// tasks; ResourceLock, one lock across tasks; Limiter, one rate-limit
// window shared by tasks; and the call pipeline they
// share (policy decision, approval grants and wait, capture, execute,
// compensation) with its stack of pending compensations (compensation.go:
// capture, compensate, roll back). edits.go is approve with edits: an
// approver's edited arguments are judged again by policy, may go to
// another approver group, and are what runs.
//
// What lives here, by file:
//
//   - agent_task.go: AgentTask and its run loop (turns, continue-as-new,
//     the end), with the ledger of the calls it ran;
//   - call.go: the call pipeline (callTool: validateCall, admit,
//     decideCall, approve, judgedRoute, runCall, execute, record);
//   - plan.go: Plan, and a plan's steps through the same pipeline;
//   - rollback_task.go: RollbackTask, a task in its own right (the
//     rollback of a task that has ended), named like agent_task.go;
//   - fastpath.go: the fast path (decide and run in one local activity);
//   - program.go, program_host.go: code mode, the run_program Update (an
//     agent's program, run by a ProgramRunner, whose every tool call is a
//     callTool), and the host the interpreter drives;
//   - approval.go, edits.go, grants.go, cancel.go, mrtr.go, state.go,
//     limits.go, locks.go, compensation.go: the task's side of approvals, approve
//     with edits, approval grants, call cancellation, sampling and
//     elicitation, task-scoped state, rate limits and budgets, resource
//     locks, and capture, compensation and rollback;
//   - aux_lock.go, aux_grants.go, aux_limiter.go: the auxiliary workflows,
//     ResourceLock, PrincipalGrants and Limiter, one per lock key,
//     principal or shared window, which tasks signal or update;
//   - versions.go: every GetVersion change ID.
//
// The auxiliary workflows are named aux_<feature>.go, one file each: the
// prefix sets them apart from the task's side of the same feature (locks.go
// asks aux_lock.go's workflow for a lock, grants.go asks aux_grants.go's,
// limits.go aux_limiter.go's), and lists them together. Their registered
// names (api.LockWorkflowName, api.PrincipalGrantsName, api.LimiterName)
// are wire names and do not follow the files.
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
