package api

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Resource locks (issue 16 §4): a manifest may declare the locks a call of
// a tool takes (manifests.Tool.Locks). The worker's Decide evaluates their
// keys (DecideOutput.Locks); the task's workflow acquires them, in sorted
// order, from one ResourceLock workflow per key before the call's capture
// and execution, and releases them when the call ends.
//
// The protocol, all by workflow signals so that it is durable on both
// sides:
//
//	task  --RequestLock activity (SignalWithStart)--> lock: SignalLockRequest
//	lock  --SignalExternalWorkflow--> task: SignalLockGrant (granted, or queued behind Holders)
//	task  --SignalExternalWorkflow--> lock: SignalLockRelease (held or given up waiting)
//
// The lock workflow checks that its holders' task runs are still open
// (LockOwnersName) and releases the locks of a run that closed without
// releasing them (terminated, say).
const (
	// LockWorkflowName is the workflow that serialises one lock key.
	LockWorkflowName = "ResourceLock"
	// SignalLockRequest (a LockRequest) asks a lock workflow for its key.
	SignalLockRequest = "lock_request"
	// SignalLockRelease (a LockRelease) releases a held lock or withdraws
	// a queued request.
	SignalLockRelease = "lock_release"
	// SignalLockGrant (a LockGrant) tells a task that its request was
	// granted, or that it is queued behind the holders it names.
	SignalLockGrant = "lock_grant"
	// QueryLock returns a lock workflow's LockState.
	QueryLock = "lock_state"
	// RequestLockName is the activity that delivers a LockRequest to the
	// key's lock workflow, starting it if needed (SignalWithStart).
	RequestLockName = "RequestLock"
	// LockOwnersName is the local activity that tells a lock workflow which
	// of its holders' task runs have closed.
	LockOwnersName = "LockOwnersClosed"

	// LockExclusive and LockShared are the lock modes: one exclusive holder,
	// or any number of shared holders (readers/writer).
	LockExclusive = "exclusive"
	LockShared    = "shared"

	// CheckLock is the Decision.Check of a call whose lock keys could not
	// be computed from its arguments.
	CheckLock = "lock"

	// OutcomeLocked: the call did not run because it could not get one of
	// its locks within its lock timeout; the reason names the lock and the
	// task holding it.
	OutcomeLocked Outcome = "locked"

	// DefaultLockTimeout is how long a call waits for its locks when its
	// manifest sets no lock_timeout.
	DefaultLockTimeout = 30 * time.Second
)

// LockKey is one lock a call takes.
type LockKey struct {
	Key  string
	Mode string // LockExclusive or LockShared
}

// LockOwner identifies a request: the task's workflow run and the call.
type LockOwner struct {
	WorkflowID string
	RunID      string
	TaskID     string
	CallID     string
	Tool       string `json:",omitempty"`
}

// ID is the owner's identity within a lock: one call of one task.
func (o LockOwner) ID() string { return o.WorkflowID + "\x00" + o.CallID }

// LockRequest asks for Key in Mode on behalf of Owner.
type LockRequest struct {
	Key   string
	Mode  string
	Owner LockOwner
	// At is when the task asked (workflow time).
	At time.Time
}

// LockRelease releases Owner's hold on Key, or withdraws its request.
type LockRelease struct {
	Key   string
	Owner LockOwner
}

// LockGrant answers a LockRequest: Granted, or queued behind Holders.
type LockGrant struct {
	Key     string
	CallID  string
	Granted bool
	Holders []LockOwner `json:",omitempty"`
}

// LockHolder is a granted request and when it was granted.
type LockHolder struct {
	LockRequest
	Since time.Time
}

// LockInput starts (or continues) a lock workflow.
type LockInput struct {
	Key string
	// State carried across continue-as-new.
	Holders []LockHolder  `json:",omitempty"`
	Queue   []LockRequest `json:",omitempty"`
	// CheckEvery is how often the workflow checks that its holders' task
	// runs are open (default DefaultLockCheck).
	CheckEvery time.Duration `json:",omitempty"`
}

// DefaultLockCheck is how often a lock workflow checks its holders.
const DefaultLockCheck = 10 * time.Second

// LockState is what QueryLock returns.
type LockState struct {
	Key     string
	Holders []LockHolder
	Queue   []LockRequest
}

// LockOwnersInput lists the holders a lock workflow checks.
type LockOwnersInput struct {
	Owners []LockOwner
}

// LockOwnersOutput lists (by LockOwner.ID) the owners whose task run has
// closed.
type LockOwnersOutput struct {
	Closed []string `json:",omitempty"`
}

// TaskLock is one lock a task holds or waits for (Status.Locks).
type TaskLock struct {
	Key    string
	Mode   string
	CallID string
	Tool   string
	// State is "held" or "waiting".
	State string
	Since time.Time
	// Holders, while waiting: the tasks the lock workflow said hold it.
	Holders []LockOwner `json:",omitempty"`
}

// TaskLock states.
const (
	LockHeld    = "held"
	LockWaiting = "waiting"
)

// LockWorkflowID is the workflow ID of key's lock workflow: a digest, so
// that any key (a path, a URL) makes a valid ID of bounded length.
func LockWorkflowID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "airlock-lock-" + hex.EncodeToString(sum[:16])
}
