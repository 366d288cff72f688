package api

import (
	"encoding/json"
	"time"

	"github.com/airlock-run/airlock/plans"
)

// Activity names are wire names: they appear in workflow histories.
const (
	CallToolName = "CallTool"
)

// Error types of application errors returned by  Workflows branch
// on them with temporal.ApplicationError.Type().
const (
	// ErrTypeNotSent: the request never reached the upstream; retrying is safe.
	ErrTypeNotSent = "NotSent"
	// ErrTypeOutcomeUnknown: the request may have reached the upstream but no
	// answer came back; only idempotent tools may be retried.
	ErrTypeOutcomeUnknown = "OutcomeUnknown"
	// ErrTypeRejected: the upstream answered with a protocol error.
	ErrTypeRejected = "Rejected"
	// ErrTypeCancelled: the client that made the call cancelled it
	// (notifications/cancelled) while it ran; the upstream call was
	// cancelled too.
	ErrTypeCancelled = "Cancelled"
	// ErrTypeInternal: a bug or an unusable result; not retried.
	ErrTypeInternal = "Internal"
)

// CallToolInput is one attempt at running an upstream tool.
type CallToolInput struct {
	TaskID string
	// CallID is the call's idempotency key (the Update ID).
	CallID       string
	Attempt      int
	Server       string
	Tool         string
	Arguments    json.RawMessage
	Idempotent   bool
	ExposedName  string
	PolicyDigest string `json:",omitempty"`
	// ArgumentsRef, when set, names the arguments in the blob store
	// (large compensations); Arguments is then empty.
	ArgumentsRef string `json:",omitempty"`
	// ProgressToken is CallRequest.ProgressToken.
	ProgressToken any `json:",omitempty"`
	// Subject is CallRequest.Subject: the user the call runs as upstream.
	Subject *Subject `json:",omitempty"`
	// Roles are the roles of the task's principal: a role's guard
	// tightens the content guard of the result (issue 30 §1). Recorded
	// with the activity's input; a replay does not compare it.
	Roles []string `json:",omitempty"`
	// ResultKey is CallRequest.ResultKey.
	ResultKey []byte `json:",omitempty"`
}

// CallToolOutput carries the upstream's CallToolResult as JSON, so every
// content type passes through unchanged.
type CallToolOutput struct {
	Result  json.RawMessage
	IsError bool
	// ResultRef, instead of Result, names a large capture's result kept
	// in the blob store.
	ResultRef string `json:",omitempty"`
	// Exchanges are the sampling and elicitation requests the upstream
	// made during the call, with the client's answers (masked by the
	// tool's redact paths), in order; recorded in the task's history with
	// the result.
	Exchanges []Exchange `json:",omitempty"`
	// Findings are the secrets the worker's content guard found in the
	// result before it left the activity, and what it did with each
	// (internal/guard); Result is already redacted or blocked.
	Findings []Finding `json:",omitempty"`
	// ActedAs is who the call reached the upstream as (token exchange).
	ActedAs *ActedAs `json:",omitempty"`
	// Held, when set, is the clear result sealed and the approval to ask
	// before delivering it (guard.results: require_approval); Result is
	// then the redacted copy, which the history keeps.
	Held *HeldResult `json:",omitempty"`
}

// Exchange is one server-to-client request an upstream made during a call.
type Exchange struct {
	// Kind is "sampling" or "elicitation".
	Kind string
	// Request is the upstream's params, as JSON.
	Request json.RawMessage
	// Answer is the client's result, as JSON with the tool's redact paths
	// masked (sampling: paths into the result; elicitation: paths into the
	// content the user gave); empty when refused.
	Answer json.RawMessage `json:",omitempty"`
	// Refused says why airlock did not forward it, or the client's error.
	Refused string `json:",omitempty"`
}

// CallProgress is the heartbeat detail of a running call: the last progress
// its upstream reported, for a gateway in another process to relay.
type CallProgress struct {
	// CallID names the call (a gateway matches the pending activity by it).
	CallID   string
	Token    any     `json:",omitempty"`
	Progress float64 `json:",omitempty"`
	Total    float64 `json:",omitempty"`
	Message  string  `json:",omitempty"`
	// Seq counts the progress notifications so far.
	Seq int `json:",omitempty"`
	// Logs are the upstream's last log messages of the call (at most
	// MaxHeartbeatLogs), each numbered, for a gateway in another process
	// to relay the ones it has not seen.
	Logs []CallLog `json:",omitempty"`
	// Asks are the upstream's requests waiting for the client's answer,
	// for a gateway in another process to forward (mrtr.go).
	Asks []CallAsk `json:",omitempty"`
}

// MaxHeartbeatLogs bounds the log messages a heartbeat carries.
const MaxHeartbeatLogs = 16

// CallLog is one upstream log message (notifications/message) of a call.
type CallLog struct {
	Seq    int
	Level  string
	Logger string          `json:",omitempty"`
	Data   json.RawMessage `json:",omitempty"`
}

// Approval activity names (wire names).
const (
	NotifyApproversName = "NotifyApprovers"
	UpdateApprovalName  = "UpdateApprovalMessages"
	// DeliverApprovalNoticeName posts a request with one notifier, retried
	// by Temporal with backoff until the request expires: the delivery a
	// notifier failed in NotifyApprovers while the others succeeded.
	DeliverApprovalNoticeName = "DeliverApprovalNotice"
)

// ChannelNotice is the input of DeliverApprovalNotice: a notice for the
// notifier named Notifier (MessageRef.Notifier, "webhook:teams").
type ChannelNotice struct {
	Notifier string
	Notice   ApprovalNotice
}

// Delivery states of an approval request's notifications.
const (
	DeliveryDelivered = "delivered"
	DeliveryRetrying  = "retrying"
	DeliveryFailed    = "failed"
	// DeliveryAbandoned: the request closed before the delivery got
	// through, so it was stopped.
	DeliveryAbandoned = "abandoned"
)

// Delivery is how posting a request to one notifier went.
type Delivery struct {
	Notifier string
	Group    string
	State    string
	// Error is the first failure while retrying (and once delivered
	// after it), the last once failed.
	Error string `json:",omitempty"`
	// Since is when it first failed; At when it reached its state.
	Since time.Time `json:",omitempty"`
	At    time.Time
}

// ApprovalNotice is what approvers are shown about one request. Arguments
// are raw; notifiers mask Redact paths before showing them.
type ApprovalNotice struct {
	RequestID   string
	TaskID      string
	CallID      string
	Tool        string
	Principal   string
	Client      string `json:",omitempty"`
	Arguments   json.RawMessage
	Redact      []string `json:",omitempty"`
	SideEffects []string
	DataLevel   string
	Risk        string
	Rule        string `json:",omitempty"`
	Reason      string `json:",omitempty"`
	Digest      string
	// Group is the group notified by this notice (the escalation group on
	// an escalation).
	Group     string
	Quorum    int
	ExpiresAt time.Time
	// RequestedAt is when the request was made (zero from older workflow
	// code).
	RequestedAt time.Time `json:",omitempty"`
	Escalation  bool      `json:",omitempty"`
	// MaxGrant (approval grants): the grants an approver may make.
	MaxGrant *GrantBound `json:",omitempty"`
	// Program and Line: see ApprovalRequest.
	Program string `json:",omitempty"`
	Line    int    `json:",omitempty"`
	// ActsAs, ActsUntil, ActsHeld and NotRun: see ApprovalRequest (token
	// exchange: whom the call acts as; why an approved call did not run).
	ActsAs    string    `json:",omitempty"`
	ActsUntil time.Time `json:",omitempty"`
	ActsHeld  bool      `json:",omitempty"`
	NotRun    string    `json:",omitempty"`

	// Approve with edits (edits.go).
	ApprovalEdits

	// TaskURL is the task's page in the Temporal Web UI; notifiers set it
	// (it never enters history).
	TaskURL string `json:"-"`

	// Separate (changeDeliveries): NotifyApprovers reports a notifier
	// that failed as a MessageRef with Failed set instead of failing, and
	// the workflow retries that notifier alone (DeliverApprovalNotice).
	Separate bool `json:",omitempty"`

	// For updates: the request's state, its votes, and the messages to
	// update.
	State    string       `json:",omitempty"`
	Votes    []NoticeVote `json:",omitempty"`
	Messages []MessageRef `json:",omitempty"`
}

// NoticeVote is one decision, for showing who decided and when.
type NoticeVote struct {
	Approver string
	Approve  bool
	At       time.Time
	Via      string
	// Grant (approval grants): what the approval also granted.
	Grant string `json:",omitempty"`
}

// MessageRef locates a posted notification so it can be updated.
type MessageRef struct {
	Notifier string // "slack"
	Channel  string
	TS       string
	Group    string
	// Failed (ApprovalNotice.Separate): this notifier could not post;
	// the error. Nothing was posted, so there is nothing to update.
	Failed string `json:",omitempty"`
}

// NotifyRollbackFailedName is the wire name of the activity that tells
// people a rollback stopped with compensations left undone.
const NotifyRollbackFailedName = "NotifyRollbackFailed"

// RollbackNotice says which compensations of a task remain undone.
type RollbackNotice struct {
	TaskID string
	// TaskURL: see ApprovalNotice.TaskURL.
	TaskURL     string `json:"-"`
	Principal   string
	Group       string
	RequestedBy string
	Reason      string
	Remaining   []RemainingCompensation
}

// RemainingCompensation is one compensation that did not run (or failed).
type RemainingCompensation struct {
	CallID       string
	Tool         string          // the call's tool
	Compensation string          `json:"Undo,omitempty"` // the compensation's tool
	Arguments    json.RawMessage `json:",omitempty"`
	// ArgumentsRef names large arguments kept in the blob store.
	ArgumentsRef string `json:",omitempty"`
	State        string
	Reason       string `json:",omitempty"`
}

// DecideName is the wire name of the policy decision (a local activity:
// it is quick, and its result is recorded in the history as a marker).
const DecideName = "Decide"

// DecideInput is one call to judge.
type DecideInput struct {
	TaskID string
	// CallID is the call's idempotency key (for captures: call.id, call.slug).
	CallID     string `json:",omitempty"`
	Principal  Principal
	AllowTools []string
	// Tool is the exposed name ("server__tool").
	Tool      string
	Arguments json.RawMessage
	// Calls counts the task's calls before this one.
	Calls   int
	Elapsed time.Duration
	// Labels are the task's information-flow labels before this call
	// (nil in tasks that keep none).
	Labels *Labels `json:",omitempty"`
	// Findings are the gateway's findings in Arguments (CallRequest).
	Findings []Finding `json:",omitempty"`
	// Recheck: the call was judged before with the same arguments (an
	// approved call judged again before it runs), so the worker's
	// findings in them were counted already (airlock_guard_findings_total
	// counts each once).
	Recheck bool `json:",omitempty"`
}

// DecideOutput is a decision and, when it requires approval, who approves
// and under what timers. Its JSON is a superset of Verdict's, so
// decisions recorded before approvals existed still decode.
type DecideOutput struct {
	Verdict
	Approval *ApprovalSpec `json:",omitempty"`
	// Capture is the pre-image read to make before the call runs (nil: the
	// tool declares none). CaptureError says why it could not be computed;
	// the call must then not run, since it could not be undone.
	Capture      *ToolCall `json:",omitempty"`
	CaptureError string    `json:",omitempty"`
	// Compensable: the tool declares a compensation; once the call has run,
	// the workflow asks PlanCompensation for it.
	Compensable bool `json:",omitempty"`
	// CallID echoes the input's, so that an audit of the history can tie
	// the recorded decision (a marker) to its call.
	CallID string `json:",omitempty"`

	// Resource locks (issue 16 §4): the locks the call takes, their keys
	// evaluated from its arguments, and how long it waits for them.
	Locks       []LockKey     `json:",omitempty"`
	LockTimeout time.Duration `json:",omitempty"`

	// Route is the tool the worker's catalog resolved and judged, for a
	// call it did not deny: the workflow runs exactly this rather than
	// the gateway's copy in the CallRequest (changeJudgedRoute), so a
	// reload between the two cannot judge one declaration and run
	// another. Nil in decisions recorded before it.
	Route *Route `json:",omitempty"`

	// Findings are the content guard's findings in the call's arguments,
	// the gateway's and the worker's (issue 30 §1): the recorded answer
	// to what the policy saw as findings.
	Findings []Finding `json:",omitempty"`
	// External is what the external policy decision point was asked and
	// answered (issue 30 §3), when one is configured and was consulted.
	External *ExternalDecision `json:",omitempty"`
}

// ApprovalSpec is what the worker resolves for a require_approval
// decision: from the manifest's approval block and the approver groups.
type ApprovalSpec struct {
	Approvers         []string
	Timeout           time.Duration
	EscalateAfter     time.Duration `json:",omitempty"`
	EscalateTo        string        `json:",omitempty"`
	EscalateApprovers []string      `json:",omitempty"`
	OnTimeout         string
	Redact            []string `json:",omitempty"`
	SideEffects       []string
	DataLevel         string
	Risk              string
	// NoEdits: the tool's manifest says approval.edits: false, so an
	// approver may not change the arguments (approve with edits).
	NoEdits bool `json:",omitempty"`
	// Approval grants: the manifest's approval.max_grant and grant_args.
	MaxGrant  *GrantBound `json:",omitempty"`
	GrantArgs []string    `json:",omitempty"`
}

// CheckPin is the Decision.Check of a call refused because the upstream's
// tool definition no longer matches its pin.
const CheckPin = "pin"

// PrepareStepName is the wire name of the local activity that evaluates a
// plan step's when and arguments and resolves its tool on the worker.
const PrepareStepName = "PrepareStep"

// StepResult is what later steps see of an earlier one (steps.<id>).
type StepResult struct {
	Outcome string
	Reason  string          `json:",omitempty"`
	Result  json.RawMessage `json:",omitempty"` // CallToolResult JSON
}

// StepInput is one step to prepare.
type StepInput struct {
	TaskID  string
	Plan    string
	Step    plans.Step
	Vars    map[string]any        `json:",omitempty"`
	Results map[string]StepResult `json:",omitempty"`
	// State is the task's state document when the step is prepared
	// (task-state): expressions read it as state.<key>.
	State json.RawMessage `json:",omitempty"`
	// Principal and AllowTools are who runs a program step (set for
	// program steps only): its tool table is the tools they may use.
	Principal  *Principal `json:",omitempty"`
	AllowTools []string   `json:",omitempty"`
}

// StepOutput is the prepared call, or why the step is skipped or failed.
type StepOutput struct {
	Call *ToolCall `json:",omitempty"`
	// Program is a program step's request (plan_program.go).
	Program *ProgramRequest `json:",omitempty"`
	Skip    bool            `json:",omitempty"`
	Reason  string          `json:",omitempty"`
	Error   string          `json:",omitempty"`
}

// PlanCompensationName is the wire name of the local activity that computes
// a successful call's compensation from its arguments, result and captured
// pre-image.
const PlanCompensationName = "PlanCompensation"

// CompensationInput is a finished call whose tool declares a compensation.
type CompensationInput struct {
	TaskID    string
	CallID    string
	Tool      string // exposed name
	Arguments json.RawMessage
	// Result is the call's CallToolResult JSON (nil when its outcome is
	// unknown).
	Result json.RawMessage `json:",omitempty"`
	// Before is the capture's CallToolResult JSON; nil when the tool has no
	// capture or the capture tool returned an error (before is then null).
	Before json.RawMessage `json:",omitempty"`
	// BeforeRef, instead of Before, names a large capture in the blob
	// store.
	BeforeRef string `json:",omitempty"`
}

// CompensationOutput is the computed compensation. Exactly one of
// Compensation, Skipped and Error is set.
type CompensationOutput struct {
	Compensation *ToolCall `json:"Undo,omitempty"`
	// Skipped says why nothing needs undoing (every when was false).
	Skipped string `json:",omitempty"`
	// Error says why the compensation could not be computed; the entry
	// stays on the stack of pending compensations, and a rollback reports it as undone.
	Error string `json:",omitempty"`
	// CallID echoes the input's (for audits of the history).
	CallID string `json:",omitempty"`
}

// DecideAndCallName is the wire name of the fast path's local activity: the
// policy decision and, when policy allows the call outright and the tool
// is idempotent, low-risk and needs no capture or compensation, the call
// itself, both in the workflow task that accepted the call.
const DecideAndCallName = "DecideAndCall"

// DecideAndCallInput is one call to judge and, if the worker finds it may
// take the fast path, to run.
type DecideAndCallInput struct {
	Decide DecideInput
	Call   CallToolInput
}

// DecideAndCallOutput is the recorded decision and, when Ran, the call's
// result (Call) or why it failed (ErrorType, one of the ErrType
// constants, and Error). When not Ran the workflow continues the regular
// pipeline with the decision.
type DecideAndCallOutput struct {
	Decision  DecideOutput
	Ran       bool            `json:",omitempty"`
	Call      *CallToolOutput `json:",omitempty"`
	ErrorType string          `json:",omitempty"`
	Error     string          `json:",omitempty"`
}

// GuardProgramName is the wire name of the content guard's inspection of
// a program's return value and output (a local activity, at the
// program's end; changeProgramGuard).
const GuardProgramName = "GuardProgram"

// GuardProgramInput is a program's result to inspect, and the roles of
// the task's principal (a role's guard.results tightens the
// configuration's).
type GuardProgramInput struct {
	TaskID, ProgramID string
	Result            json.RawMessage `json:",omitempty"`
	Output            string          `json:",omitempty"`
	Roles             []string        `json:",omitempty"`
}

// GuardProgramOutput is the result as the guard leaves it: Result and
// Output redacted, the findings (paths "result…", "output"), or Withheld
// (why nothing of it is shown: a finding under block, or a result the
// guard could not read).
type GuardProgramOutput struct {
	Result   json.RawMessage `json:",omitempty"`
	Output   string          `json:",omitempty"`
	Findings []Finding       `json:",omitempty"`
	Withheld string          `json:",omitempty"`
}
