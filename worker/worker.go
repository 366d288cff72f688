// Package worker registers airlock's workflows and activities on a Temporal
// worker: registration and worker options; what the workflows and
// activities do lives in their own packages. orphans.go is what a worker
// that is the only one of its Temporal (airlock dev) does at start-up:
// it ends the activities its previous process was running when it died.
//
// It imports the workflows, the activities, api and the Temporal SDK; only
// commands and tests import it.
package worker

import (
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/workflows"
)

// Options configure a worker.
type Options struct {
	// TaskQueue defaults to api.DefaultTaskQueue.
	TaskQueue string
	// MaxConcurrentCalls bounds tool calls run at once by this worker
	// (default 64).
	MaxConcurrentCalls int
	// Identity is the worker's identity (default: the SDK's, pid@host).
	// The only worker of its Temporal server uses SoleIdentity.
	Identity string
}

// New returns a worker with every workflow and activity registered under
// its wire name. Start it with Start or Run.
func New(c client.Client, acts *activities.Activities, opts Options) sdkworker.Worker {
	tq := opts.TaskQueue
	if tq == "" {
		tq = api.DefaultTaskQueue
	}
	conc := opts.MaxConcurrentCalls
	if conc <= 0 {
		conc = 64
	}
	w := sdkworker.New(c, tq, sdkworker.Options{
		MaxConcurrentActivityExecutionSize: conc,
		// Finish calls in flight on shutdown rather than abandoning them
		// to the heartbeat timeout.
		WorkerStopTimeout: 10 * time.Second,
		Identity:          opts.Identity,
	})
	Register(w, acts)
	return w
}

// Registry is the part of a worker (or replayer) that takes registrations.
type Registry interface {
	RegisterWorkflowWithOptions(w interface{}, options workflow.RegisterOptions)
	RegisterActivityWithOptions(a interface{}, options activity.RegisterOptions)
}

// Register registers workflows and activities under their wire names.
func Register(r Registry, acts *activities.Activities) {
	RegisterWorkflows(r)
	r.RegisterActivityWithOptions(acts.CallTool, activity.RegisterOptions{Name: api.CallToolName})
	r.RegisterActivityWithOptions(acts.Decide, activity.RegisterOptions{Name: api.DecideName})
	r.RegisterActivityWithOptions(acts.DecideAndCall, activity.RegisterOptions{Name: api.DecideAndCallName})
	r.RegisterActivityWithOptions(acts.NotifyApprovers, activity.RegisterOptions{Name: api.NotifyApproversName})
	r.RegisterActivityWithOptions(acts.UpdateApprovalMessages, activity.RegisterOptions{Name: api.UpdateApprovalName})
	r.RegisterActivityWithOptions(acts.PlanCompensation, activity.RegisterOptions{Name: api.PlanCompensationName})
	r.RegisterActivityWithOptions(acts.NotifyRollbackFailed, activity.RegisterOptions{Name: api.NotifyRollbackFailedName})
	r.RegisterActivityWithOptions(acts.PrepareStep, activity.RegisterOptions{Name: api.PrepareStepName})
}

// WorkflowRegistry takes workflow registrations (workers and replayers).
type WorkflowRegistry interface {
	RegisterWorkflowWithOptions(w interface{}, options workflow.RegisterOptions)
}

// RegisterWorkflows registers the workflows only (for replayers).
func RegisterWorkflows(r WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(workflows.AgentTask, workflow.RegisterOptions{Name: api.AgentTaskName})
	r.RegisterWorkflowWithOptions(workflows.Plan, workflow.RegisterOptions{Name: api.PlanName})
	r.RegisterWorkflowWithOptions(workflows.RollbackTask, workflow.RegisterOptions{Name: api.RollbackTaskName})
}
