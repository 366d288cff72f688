package api

import (
	"time"

	"github.com/airlock-run/airlock/plans"
)

// PlanName is the wire name of the Plan workflow.
const PlanName = "Plan"

// Plan and step states.
const (
	// StateCompleted: every step ran (or was skipped or continued past).
	StateCompleted = "completed"
	// StateStopped: a step failed or was denied and its on_failure said
	// stop; nothing was rolled back.
	StateStopped = "stopped"

	StepPending = "pending"
	StepRunning = "running"
	StepOK      = "ok"
	StepSkipped = "skipped"
	StepFailed  = "failed"
	StepDenied  = "denied"
)

// PlanInput starts a Plan: a declared sequence of tool calls driven by the
// workflow, each through the same pipeline as an agent's call.
type PlanInput struct {
	TaskID    string
	Principal string
	Identity  *Identity `json:",omitempty"`
	Plan      *plans.Plan
	// Vars are the plan's vars with the command line's overrides applied.
	Vars           map[string]any `json:",omitempty"`
	Limits         Limits
	RollbackNotify string `json:",omitempty"`
	// A scheduled plan's input serves every run: TaskID is empty (each run
	// is its workflow ID) and its deadline is DeadlineAfter from the run's
	// start, since Limits.Deadline is absolute.
	DeadlineAfter time.Duration `json:",omitempty"`
	// Schedule names the schedule that starts it ("" when run by hand).
	Schedule string `json:",omitempty"`

	// State configures the plan's task-scoped state (task-state; nil: the
	// default limit, no schema).
	State *StateConfig `json:",omitempty"`
	// Rate limits and budget (issue 16 §3; nil: none configured).
	Quota *Quota `json:",omitempty"`
}

// PlanStatus is a plan's progress, part of Status.
type PlanStatus struct {
	Name  string
	Steps []StepStatus
}

// StepStatus is one step's progress.
type StepStatus struct {
	ID      string
	Tool    string
	State   string
	Outcome Outcome `json:",omitempty"`
	Reason  string  `json:",omitempty"`
	CallID  string  `json:",omitempty"`
	// Program is a program step's result (its calls, value, output).
	Program *ProgramResult `json:",omitempty"`
}

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
	// Compensations is the ended task's stack of pending compensations,
	// oldest first, as its status query reports it.
	Compensations  []CompensationEntry `json:"Saga"`
	RollbackNotify string              `json:",omitempty"`
}
