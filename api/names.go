// Package api is the wire contract airlock's roles share: the inputs and
// results of workflows, Updates, queries and activities, the approval
// requests and their vote counting, and the wire names (workflows, updates,
// signals, queries, activities, search attributes, error types) that appear
// in workflow histories.
//
// api owns the vocabulary: the policy's Effect, check names, Principal and
// Verdict (verdict.go; internal/policy imports them from here), and the
// grammars of the wire identifiers built from others, such as a request
// ID task~call (ids.go, taskid.go).
//
// Every other airlock package may import api; api imports, of airlock, only
// the schemas whose types it carries (plans' Step, manifests for SpecFor and
// Principal's data level) and internal/jsoncanon (the one canonical form of
// arguments that digests and grants compare): never the policy engine, a
// role or the workflows. imports_test.go keeps it so. Wire names are
// constants and must never change: recorded histories name them.
package api

import (
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
)

// Wire names.
const (
	AgentTaskName = "AgentTask"

	// UpdateCallTool runs one tool call; its Update ID is the call's
	// idempotency key.
	UpdateCallTool = "call_tool"
	// SignalFinish asks the task to finish once in-flight calls complete.
	SignalFinish = "finish"
	// SignalCancelCall (a CancelCall) cancels one call of the task: a
	// running call's activity is cancelled (its upstream call with it), a
	// call waiting for approval withdraws its request; the call is
	// recorded as cancelled. The gateway sends it when the client that made
	// the call sends notifications/cancelled.
	SignalCancelCall = "cancel_call"
	// QueryStatus returns the task's Status.
	QueryStatus = "status"
	// QueryCall answers a call ID the task has already run, as a retry of
	// it would be answered (a CallResult with Repeat set, for calls of
	// earlier runs too); it fails for a call the task does not know.
	QueryCall = "call"
	// QueryProgram answers a program ID the task has run (ProgramDone),
	// in this run or an earlier one: for airlock_await of a program whose
	// Update is not the current run's.
	QueryProgram = "program"

	// DefaultTaskQueue is the task queue workers poll by default.
	DefaultTaskQueue = "airlock"
)

// Search attributes, registered on the namespace at start-up.
var (
	SAPrincipal = temporal.NewSearchAttributeKeyKeyword("AirlockPrincipal")
	SAStatus    = temporal.NewSearchAttributeKeyKeyword("AirlockStatus")
	SATools     = temporal.NewSearchAttributeKeyKeywordList("AirlockTools")
)

// SearchAttributes lists the attributes the namespace must have, with types.
func SearchAttributes() map[string]enumspb.IndexedValueType {
	return map[string]enumspb.IndexedValueType{
		SAPrincipal.GetName(): enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SAStatus.GetName():    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SATools.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST,
		SAApproval.GetName():  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	}
}

// Size bounds of Update inputs, checked by the validators: an Update that
// is accepted is written to the history, where one payload may not exceed
// 2 MB, and a task whose history cannot take a workflow task's result is
// stuck. Validators reject before anything is written.
const (
	MaxArgumentBytes = 1 << 20
	MaxReasonBytes   = 4 << 10
)

// Error types of the application errors with which the call_tool Update's
// validator rejects a call. Callers branch on them with errors.As and
// temporal.ApplicationError.Type(), never on the message.
const (
	// ErrTypeContinuingAsNew: the task is about to continue as new; callers
	// retry the same Update, which then reaches the next run.
	ErrTypeContinuingAsNew = "ContinuingAsNew"
	// ErrTypeFinishing: the task is finishing and takes no new calls; the
	// caller starts a new task.
	ErrTypeFinishing = "Finishing"
	// ErrTypeProgramRanBefore: the run_program Update's program ran in
	// an earlier run of the task, which no longer holds its result; the
	// error's details are one Repeat naming the run whose history holds
	// it (its Update's completion), for the gateway to read it there.
	ErrTypeProgramRanBefore = "ProgramRanBefore"
)

// ErrContinuingAsNew starts the message of an Update rejected with
// ErrTypeContinuingAsNew.
const ErrContinuingAsNew = "task is continuing as new, retry the call"

// Task states as shown in the status query and the AirlockStatus attribute.
const (
	StateRunning  = "running"
	StateFinished = "finished"
	StateDeadline = "deadline_exceeded"
	StateIdle     = "idle_timeout"
	StateCanceled = "canceled"
)
