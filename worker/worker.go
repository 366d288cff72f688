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
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/metrics"
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
	// StopTimeout is how long Stop lets tool calls in flight finish
	// before it cancels them (default 10s); a cancelled call is retried on
	// another worker when its heartbeat times out.
	StopTimeout time.Duration
	// BuildID identifies the build (airlock's version). With it the worker
	// reports its Worker Deployment Version, DeploymentName + BuildID, to
	// Temporal (visible on its pollers and in the histories it writes).
	BuildID string
	// DeploymentName is the Worker Deployment (default
	// DefaultDeploymentName).
	DeploymentName string
	// Versioning opts into Temporal's worker versioning: VersioningOff
	// (or ""), VersioningAutoUpgrade or VersioningPinned. It needs BuildID.
	Versioning string
	// Interceptors wrap the worker's workflows and activities (tests
	// inject faults through them).
	Interceptors []interceptor.WorkerInterceptor
}

// DefaultDeploymentName is the Worker Deployment airlock's workers belong
// to unless told otherwise.
const DefaultDeploymentName = "airlock"

// The worker versioning modes (Options.Versioning).
const (
	// VersioningOff: tasks go to any worker of the task queue; the build
	// ID is only reported.
	VersioningOff = "off"
	// VersioningAutoUpgrade: a task moves to the workers of the
	// deployment's current version at its next workflow task. Safe
	// because every workflow change is behind workflow.GetVersion.
	VersioningAutoUpgrade = "auto-upgrade"
	// VersioningPinned: a task stays on the build that started it; old
	// workers must run until their tasks end.
	VersioningPinned = "pinned"
)

// programDeadlockTimeout is the workers' deadlock detection timeout (see
// New).
const programDeadlockTimeout = 5 * time.Second

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
	stop := opts.StopTimeout
	if stop <= 0 {
		stop = 10 * time.Second
	}
	w := sdkworker.New(c, tq, sdkworker.Options{
		MaxConcurrentActivityExecutionSize: conc,
		// Finish calls in flight on shutdown rather than abandoning them
		// to the heartbeat timeout.
		WorkerStopTimeout: stop,
		Identity:          opts.Identity,
		DeploymentOptions: deploymentOptions(opts),
		Interceptors:      opts.Interceptors,
		// A program (code mode) computes on its workflow coroutine between
		// two tool calls: bounded by its step limit (~0.1 s, ~0.4 s on a
		// loaded machine) and its memory cap, but one step of an O(n)
		// builtin (sorted, join of what fits in 64 MiB) may take longer in
		// the wasm guest. The SDK's 1 s default would then fail the
		// workflow task on every retry and wedge the task; 5 s keeps a
		// margin and stays under the 10 s workflow-task timeout.
		DeadlockDetectionTimeout: programDeadlockTimeout,
	})
	Register(w, acts)
	// Programs are counted where they end, in the task (workflows).
	workflows.ObservePrograms(metrics.ObserveProgram)
	// Resource locks (issue 16 §4) need the client: their activities start
	// and inspect other workflows.
	locks := &activities.Locks{Client: c}
	w.RegisterActivityWithOptions(locks.RequestLock, activity.RegisterOptions{Name: api.RequestLockName})
	w.RegisterActivityWithOptions(locks.LockOwnersClosed, activity.RegisterOptions{Name: api.LockOwnersName})
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
	r.RegisterActivityWithOptions(acts.GuardProgram, activity.RegisterOptions{Name: api.GuardProgramName})
	r.RegisterActivityWithOptions(acts.DecideAndCall, activity.RegisterOptions{Name: api.DecideAndCallName})
	r.RegisterActivityWithOptions(acts.NotifyApprovers, activity.RegisterOptions{Name: api.NotifyApproversName})
	r.RegisterActivityWithOptions(acts.UpdateApprovalMessages, activity.RegisterOptions{Name: api.UpdateApprovalName})
	r.RegisterActivityWithOptions(acts.DeliverApprovalNotice, activity.RegisterOptions{Name: api.DeliverApprovalNoticeName})
	r.RegisterActivityWithOptions(acts.PlanCompensation, activity.RegisterOptions{Name: api.PlanCompensationName})
	r.RegisterActivityWithOptions(acts.NotifyRollbackFailed, activity.RegisterOptions{Name: api.NotifyRollbackFailedName})
	r.RegisterActivityWithOptions(acts.PrepareStep, activity.RegisterOptions{Name: api.PrepareStepName})
	// Approval grants across a principal's tasks.
	r.RegisterActivityWithOptions(acts.AddPrincipalGrant, activity.RegisterOptions{Name: api.AddPrincipalGrantName})
	r.RegisterActivityWithOptions(acts.UsePrincipalGrant, activity.RegisterOptions{Name: api.UsePrincipalGrantName})
	r.RegisterActivityWithOptions(acts.TakeLimits, activity.RegisterOptions{Name: api.TakeLimitsName})
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
	r.RegisterWorkflowWithOptions(workflows.ResourceLock, workflow.RegisterOptions{Name: api.LockWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.PrincipalGrants, workflow.RegisterOptions{Name: api.PrincipalGrantsName})
	r.RegisterWorkflowWithOptions(workflows.Limiter, workflow.RegisterOptions{Name: api.LimiterName})
}

// deploymentOptions is the worker's Worker Deployment Version and whether
// it takes part in versioning (the SDK refuses UseVersioning without a
// build ID; cmd/airlock checks that first).
func deploymentOptions(opts Options) sdkworker.DeploymentOptions {
	if opts.BuildID == "" {
		return sdkworker.DeploymentOptions{}
	}
	name := opts.DeploymentName
	if name == "" {
		name = DefaultDeploymentName
	}
	d := sdkworker.DeploymentOptions{Version: sdkworker.WorkerDeploymentVersion{DeploymentName: name, BuildID: opts.BuildID}}
	switch opts.Versioning {
	case VersioningAutoUpgrade:
		d.UseVersioning, d.DefaultVersioningBehavior = true, workflow.VersioningBehaviorAutoUpgrade
	case VersioningPinned:
		d.UseVersioning, d.DefaultVersioningBehavior = true, workflow.VersioningBehaviorPinned
	}
	return d
}
