package api

import (
	"encoding/json"
	"time"
)

// TaskInput starts (or continues) an AgentTask.
type TaskInput struct {
	TaskID    string
	Principal string
	// Client is the MCP client's name and version, for operators.
	Client string `json:",omitempty"`
	Limits Limits
	// Identity is the principal's grants at the task's start (policy
	// decisions use them). Nil in tasks started before identity existed.
	Identity *Identity `json:",omitempty"`
	// RollbackOnDeny rolls the task back when one of its calls is denied
	// (by policy or by approvers).
	RollbackOnDeny bool `json:",omitempty"`
	// RollbackNotify is the approver group told when a rollback fails.
	RollbackNotify string `json:",omitempty"`
	// Carried is the state handed over by continue-as-new; nil on a new task.
	Carried *Carried `json:",omitempty"`

	// Task-scoped state (task-state, state.go): its size limit and schema.
	// Nil: the default limit, no schema.
	State *StateConfig `json:",omitempty"`
	// Rate limits and budget (issue 16 §3; nil: none configured).
	Quota *Quota `json:",omitempty"`
}

// Identity is what the policy knows of the task's principal.
type Identity struct {
	Name        string
	Roles       []string `json:",omitempty"`
	Permissions []string `json:",omitempty"`
	DataLevel   string
	SlackUserID string   `json:",omitempty"`
	AllowTools  []string `json:",omitempty"`
}

// Limits bound a task.
type Limits struct {
	MaxCalls int
	// Deadline is absolute; the zero time means no deadline.
	Deadline    time.Time
	IdleTimeout time.Duration
	// ContinueAsNewAfter is the number of calls in one run after which the
	// task continues as new (default 500; history stays well under
	// Temporal's limits and its 2000-updates-per-run cap).
	ContinueAsNewAfter int `json:",omitempty"`
}

// Carried is the task state that survives continue-as-new.
type Carried struct {
	StartedAt    time.Time
	LastActivity time.Time
	Calls        int
	ToolsUsed    []string
	Recent       []CallRecord
	Runs         int
	// Pending compensations and recent finished ones.
	Compensations  []CompensationEntry `json:"Saga,omitempty"`
	Undone         []CompensationEntry `json:",omitempty"`
	Rollbacks      int                 `json:",omitempty"`
	RollbackFailed bool                `json:",omitempty"`
	// Ledger records every call the task has run, in all its runs (nil
	// in tasks from before it).
	Ledger *CallLedger `json:",omitempty"`

	// State is the task's state document (task-state; nil when unused).
	State json.RawMessage `json:",omitempty"`
	// Grants (approval grants) the task has made, active or recently
	// closed.
	Grants []Grant `json:",omitempty"`
	// Rate limits and budget (issue 16 §3): the budget spent and the
	// task's own windows.
	Quota *QuotaState `json:",omitempty"`
	// Programs (code mode, issue 27) are the results of programs that
	// finished in earlier runs, newest last, so that a program sent again
	// with the same ID is answered, not run again (Temporal deduplicates
	// Update IDs within a run only). Bounded: see workflows' programsKept.
	Programs []ProgramResult `json:",omitempty"`
	// Labels are the task's information-flow labels (labels.go).
	Labels *Labels `json:",omitempty"`
}

// CallRequest asks the task to run one tool call. The gateway fills the
// tool's manifest facts in, so the workflow decides from recorded values.
type CallRequest struct {
	// CallID is the idempotency key; it is also the Update ID.
	CallID string
	// Tool is the exposed name ("server__tool").
	Tool         string
	Server       string
	UpstreamTool string
	Arguments    json.RawMessage
	// ArgumentsRef names arguments kept in the worker's blob store (large
	// compensations); Arguments is then empty.
	ArgumentsRef string `json:",omitempty"`
	Spec         ToolSpec
	// Principal is the caller; only the task's own principal may call in it.
	Principal string `json:",omitempty"`
	// ProgressToken is the client's _meta.progressToken (a string or a
	// number; nil: none), sent upstream with the call so that a worker in
	// any process can report the upstream's progress (api.CallProgress).
	ProgressToken any `json:",omitempty"`
	// Findings are what the gateway's content guard found in the
	// arguments before it sent the call (issue 30 §1): those under redact
	// or block are already replaced by markers in Arguments, so the
	// history never holds their values. The worker adds its own.
	Findings []Finding `json:",omitempty"`
	// ResultKey is the gateway's X25519 public key for held results
	// (guard.results: require_approval): the worker seals a result it
	// holds for an approver to it, so that the history holds only
	// ciphertext and the gateway can deliver the result once approved.
	// Set only when the caller's guard asks for approval of results.
	ResultKey []byte `json:",omitempty"`
	// Subject, for a call to an upstream that acts as the user
	// (server.http.auth.token_exchange), is the caller's token sealed to
	// the worker, with who it names (api.Subject).
	Subject *Subject `json:",omitempty"`
}

// Outcome classifies how a call ended.
type Outcome string

const (
	// OutcomeOK: the tool ran and returned a result.
	OutcomeOK Outcome = "ok"
	// OutcomeToolError: the tool ran and reported an error (isError).
	OutcomeToolError Outcome = "tool_error"
	// OutcomeLimit: a task limit (calls, deadline) stopped the call.
	OutcomeLimit Outcome = "limit"
	// OutcomeUnavailable: the upstream could not be reached; the call did
	// not run.
	OutcomeUnavailable Outcome = "unavailable"
	// OutcomeUnknown: the call may or may not have run (the worker or the
	// connection died mid-call and the tool is not idempotent).
	OutcomeUnknown Outcome = "unknown"
	// OutcomeRejected: the upstream refused the request (protocol error).
	OutcomeRejected Outcome = "rejected"
	// OutcomeFailed: airlock failed to run the call (internal error).
	OutcomeFailed Outcome = "failed"
	// OutcomeDenied: policy did not let the call run.
	OutcomeDenied Outcome = "denied"
	// OutcomeCancelled: the client cancelled the call while it ran
	// (notifications/cancelled); it may have partly taken effect.
	OutcomeCancelled Outcome = "cancelled"
)

// CancelCall is the payload of SignalCancelCall.
type CancelCall struct {
	CallID string
	// Reason says who cancelled and how (recorded with the call).
	Reason string `json:",omitempty"`
}

// Decision is the policy decision recorded with a call.
type Decision struct {
	Effect Effect
	// Check is the step that decided (allowlist, permission, data_level,
	// size, json, schema, path, rule, default, error).
	Check  string
	Rule   string `json:",omitempty"`
	Reason string `json:",omitempty"`
	// PolicyVersion identifies the policy that decided.
	PolicyVersion string
	Group         string `json:",omitempty"`
	Quorum        int    `json:",omitempty"`
	// Grant (approval grants) is the grant that allowed the call (Check
	// CheckGrant).
	Grant string `json:",omitempty"`
}

// CallResult is the answer to a CallRequest.
type CallResult struct {
	CallID  string
	Tool    string
	Outcome Outcome
	// Reason explains any outcome but ok, in words the model can act on.
	Reason string `json:",omitempty"`
	// Result is the upstream's CallToolResult JSON (ok and tool_error).
	Result json.RawMessage `json:",omitempty"`
	// ResultRef names a large capture's result in the worker's blob store
	// (captures only; Result is then empty).
	ResultRef string `json:",omitempty"`
	Attempts  int
	// Decision is the policy decision (nil in calls before policy existed).
	Decision *Decision `json:",omitempty"`
	// Repeat is set when the call ID had already run in the task, which
	// answered without running the tool again.
	Repeat *Repeat `json:",omitempty"`
	// Edit: an approver changed the arguments before approving; what ran
	// (or was refused) is the edited call (edits.go).
	Edit *ArgsEdit `json:",omitempty"`

	// Limit says which rate limit or budget refused the call (outcome
	// limit; issue 16 §3).
	Limit *LimitHit `json:",omitempty"`

	// Labels are the task's information-flow labels after this call, set
	// when the call raised them (so the call's record in the history says
	// which call raised what).
	Labels *Labels `json:",omitempty"`

	// Held is the call's result sealed to the gateway's held-result key,
	// after an approver approved delivering it (guard.results:
	// require_approval); Result is then the redacted copy the history
	// keeps. The gateway opens Held and delivers it instead of Result.
	Held *SealedResult `json:",omitempty"`
}

// Repeat says where a repeated call ran.
type Repeat struct {
	// Run is the number of the run whose history records the call (1 for
	// the task's first; 0 when unknown: it ran before the task kept a
	// ledger); RunID is its run ID.
	Run   int    `json:",omitempty"`
	RunID string `json:",omitempty"`
	// Held: the task still held the call's result, and Result is it.
	// Otherwise Result (and Reason) say that the call ran, its outcome,
	// and where its result is recorded; the gateway then reads the result
	// itself from run RunID's history (gateway/history.go), and answers
	// with it, Held, when it can.
	Held bool `json:",omitempty"`
}

// CallRecord is the short trace of a call kept in the task state.
type CallRecord struct {
	CallID   string
	Tool     string
	Outcome  Outcome
	Reason   string `json:",omitempty"`
	Started  time.Time
	Finished time.Time
	Attempts int
	Decision *Decision `json:",omitempty"`
	// result is kept for dedup of retried call IDs across continue-as-new.
	Result json.RawMessage `json:",omitempty"`
	// ResultDropped: the result was too large to carry across
	// continue-as-new; a repeat of the call is told so.
	ResultDropped bool `json:",omitempty"`
	// Edit: see CallResult.Edit.
	Edit *ArgsEdit `json:",omitempty"`
	// Held: see CallResult.Held (a repeat is delivered the approved
	// result as the first answer was).
	Held *SealedResult `json:",omitempty"`
}

// Status is the answer of the status query.
type Status struct {
	TaskID       string
	Principal    string
	Client       string `json:",omitempty"`
	State        string
	StartedAt    time.Time
	LastActivity time.Time
	Deadline     time.Time `json:",omitempty"`
	Calls        int
	MaxCalls     int
	InFlight     []string // call IDs running now
	ToolsUsed    []string
	Recent       []CallRecord // newest last, without results
	Runs         int
	// Compensations is the stack of pending compensations, oldest first.
	Compensations []CompensationEntry `json:"Saga,omitempty"`
	// Undone lists recent compensations that ran.
	Undone      []CompensationEntry `json:",omitempty"`
	Rollbacks   int                 `json:",omitempty"`
	RollingBack bool                `json:",omitempty"`
	// Ended: the task has ended (its pending compensations can no longer
	// run).
	Ended bool `json:",omitempty"`
	// Plan is the plan's progress (plans only).
	Plan *PlanStatus `json:",omitempty"`

	// Locks are the resource locks the task's calls hold and wait for
	// (issue 16 §4).
	Locks []TaskLock `json:",omitempty"`
	// TaskState is the task's state document (task-state; nil when unused).
	TaskState json.RawMessage `json:",omitempty"`
	// Grants (approval grants) the task has made.
	Grants []Grant `json:",omitempty"`
	// Budget and Spent are the task's budget of cost units and what it
	// has spent (issue 16 §3; Budget 0: none).
	Budget int `json:",omitempty"`
	Spent  int `json:",omitempty"`
	// Programs are the task's running programs (code mode, issue 27).
	Programs []ProgramStatus `json:",omitempty"`
	// Labels are the task's information-flow labels (nil in tasks
	// started before them).
	Labels *Labels `json:",omitempty"`
}

// TaskResult is returned when a task ends.
type TaskResult struct {
	TaskID string
	State  string
	Calls  int
	// Undone lists the compensations a failed rollback left undone (top of
	// the stack first), when the task ends in rollback_failed.
	Undone []CompensationEntry `json:",omitempty"`
}
