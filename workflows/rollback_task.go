package workflows

import (
	"errors"

	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// RollbackTask holds an ended task's compensations and runs them when its
// rollback Update arrives (started together with it, Update-with-Start).
// It ends once the rollback succeeded, or when an operator finishes it
// after a rollback that failed.
func RollbackTask(ctx workflow.Context, in api.RollbackTaskInput) (api.TaskResult, error) {
	if len(in.Compensations) == 0 {
		return api.TaskResult{}, errors.New("nothing to roll back: the task left no pending compensation")
	}
	t := newTask(ctx, api.TaskInput{TaskID: in.TaskID, Principal: in.Principal, RollbackNotify: in.RollbackNotify})
	t.compensations = in.Compensations
	if err := t.registerShared(ctx); err != nil {
		return api.TaskResult{}, err
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx, api.SAPrincipal.ValueSet(in.Principal), api.SAStatus.ValueSet(api.StateRunning))
	done := func() bool {
		return t.finish || (t.rollbacks > 0 && t.rolling == nil && t.state != api.StateRollbackFailed)
	}
	if err := workflow.Await(ctx, done); err != nil {
		ctx = t.cancel(ctx)
		_ = workflow.Await(ctx, done)
	}
	if t.state == api.StateRollbackFailed {
		return t.end(ctx, api.StateRollbackFailed)
	}
	if t.rollbacks == 0 {
		return t.end(ctx, api.StateFinished)
	}
	return t.end(ctx, api.StateRolledBack)
}
