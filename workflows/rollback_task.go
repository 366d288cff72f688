package workflows

import (
	"errors"

	"go.temporal.io/sdk/workflow"
)

// RollbackTaskName is the wire name of the workflow that rolls back a task
// that has ended (a completed plan, a finished agent task): the task's
// own workflow can no longer run anything.
const RollbackTaskName = "RollbackTask"

// RollbackTaskID is the workflow ID of the rollback of an ended task; one
// per task, so an ended task is rolled back at most once.
func RollbackTaskID(task string) string { return "rollback-" + task }

// RollbackTaskInput carries what the ended task left to undo.
type RollbackTaskInput struct {
	// TaskID is the ended task's; compensations keep its idempotency keys.
	TaskID    string
	Principal string
	// Saga is the ended task's stack of pending compensations, oldest
	// first, as its status query reports it.
	Saga           []SagaEntry
	RollbackNotify string `json:",omitempty"`
}

// RollbackTask holds an ended task's compensations and runs them when its
// rollback Update arrives (started together with it, Update-with-Start).
// It ends once the rollback succeeded, or when an operator finishes it
// after a rollback that failed.
func RollbackTask(ctx workflow.Context, in RollbackTaskInput) (TaskResult, error) {
	if len(in.Saga) == 0 {
		return TaskResult{}, errors.New("nothing to roll back: the task left no pending compensation")
	}
	t := newTask(ctx, TaskInput{TaskID: in.TaskID, Principal: in.Principal, RollbackNotify: in.RollbackNotify})
	t.saga = in.Saga
	if err := t.registerShared(ctx); err != nil {
		return TaskResult{}, err
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx, SAPrincipal.ValueSet(in.Principal), SAStatus.ValueSet(StateRunning))
	done := func() bool {
		return t.finish || (t.rollbacks > 0 && t.rolling == nil && t.state != StateRollbackFailed)
	}
	if err := workflow.Await(ctx, done); err != nil {
		ctx = t.cancel(ctx)
		_ = workflow.Await(ctx, done)
	}
	if t.state == StateRollbackFailed {
		return t.end(ctx, StateRollbackFailed)
	}
	if t.rollbacks == 0 {
		return t.end(ctx, StateFinished)
	}
	return t.end(ctx, StateRolledBack)
}
