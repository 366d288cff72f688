package api

import (
	"time"
)

// Compensation wire names.
const (
	// UpdateRollback rolls the task back: the compensations of its
	// successful calls run in reverse order. A second request while one
	// runs joins it; entries already undone never run again.
	UpdateRollback = "rollback"
)

// Task states added by rollback.
const (
	// StateRollbackFailed: a compensation failed for good; the task keeps
	// what remains undone and waits for an operator to retry the rollback
	// (airlock tasks rollback) or to finish the task.
	StateRollbackFailed = "rollback_failed"
	// StateRolledBack: a plan (or a cancelled task) was rolled back.
	StateRolledBack = "rolled_back"
)

// CompensationEntry states.
const (
	// CompensationPending: not run yet.
	CompensationPending = "pending"
	// CompensationDone: the compensation ran and succeeded.
	CompensationDone = "done"
	// CompensationFailed: the compensation ran and failed (or could not be
	// computed); a later rollback retries it.
	CompensationFailed = "failed"
	// CompensationUnknown: the compensation may or may not have taken
	// effect and its tool is not idempotent, so it is never re-run
	// automatically; a person must check.
	CompensationUnknown = "unknown"
)

// CompensationEntry is one compensable call on the task's stack of pending
// compensations, with the concrete compensation the worker computed right
// after the call.
type CompensationEntry struct {
	// CallID is the call this entry undoes; the compensation runs as call
	// CompensationID(CallID), "undo-<CallID>".
	CallID string
	Tool   string
	At     time.Time
	// Compensation is the compensation; nil when it could not be computed
	// (Error). Its JSON name is the older "Undo".
	Compensation *ToolCall `json:"Undo,omitempty"`
	Error        string    `json:",omitempty"`
	State        string
	// Reason is why the last attempt failed, or the compensation's outcome.
	Reason string `json:",omitempty"`
	// Tries counts rollbacks that ran this entry.
	Tries    int       `json:",omitempty"`
	Finished time.Time `json:",omitempty"`

	// Locks the call took (issue 16 §4): its compensation takes them too,
	// waiting at most LockTimeout.
	Locks       []LockKey     `json:",omitempty"`
	LockTimeout time.Duration `json:",omitempty"`

	// Subject, for a call that acted as its user (token exchange), is the
	// call's sealed grant: the compensation acts as the same user, with a
	// fresh exchange when it runs (the held grant of offline: true once
	// the access token has expired), or fails UserGrant, nothing run.
	Subject *Subject `json:",omitempty"`
}

// RollbackRequest asks a task to roll back.
type RollbackRequest struct {
	// By is who asked: a principal, "operator", "plan", "cancel" or "deny".
	By     string
	Reason string `json:",omitempty"`
	// Principal, when set, must be the task's own (agents roll back only
	// their own tasks).
	Principal string `json:",omitempty"`
}

// RollbackResult reports a rollback.
type RollbackResult struct {
	TaskID string
	// State is StateRolledBack, StateRollbackFailed, or "nothing" when the
	// stack was empty.
	State string
	// Compensated lists the entries undone by this rollback, in the order
	// they ran.
	Compensated []CompensationEntry `json:",omitempty"`
	// Remaining lists what is still not undone, top of the stack first.
	Remaining []CompensationEntry `json:",omitempty"`
	Reason    string              `json:",omitempty"`
	// Joined: this request found a rollback running and waited for it.
	Joined bool `json:",omitempty"`
}

// RollbackNothing is RollbackResult.State when there was nothing to undo.
const RollbackNothing = "nothing"
