// Package workflows holds airlock's durable workflows: AgentTask, the
// agent-driven task whose every tool call is an Update, and the call
// pipeline it runs (policy decision, approval wait, capture, execute,
// compensation). Later: Plan, the declarative multi-step task.
//
// Everything here must replay deterministically: no clocks but
// workflow.Now, no goroutines, no map-order iteration, no I/O. Manifests and
// policy reach the workflow as values inside its inputs. This package may
// import activities (for wire types and names) and manifests (types only).
//
// Workflow, update, signal, query and search-attribute names are wire names:
// they are constants here and must never change.
package workflows

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
	// QueryStatus returns the task's Status.
	QueryStatus = "status"

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

// ErrContinuingAsNew starts the message of an Update rejected because the
// task is about to continue as new; callers retry the same Update, which
// then reaches the next run.
const ErrContinuingAsNew = "task is continuing as new, retry the call"

// Task states as shown in the status query and the AirlockStatus attribute.
const (
	StateRunning  = "running"
	StateFinished = "finished"
	StateDeadline = "deadline_exceeded"
	StateIdle     = "idle_timeout"
	StateCanceled = "canceled"
)
