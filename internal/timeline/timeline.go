package timeline

import (
	"encoding/json"
	"github.com/airlock-run/airlock/api"
	"time"
)

// Timeline is the audit view of one task. Its JSON field names are stable
// (airlock audit show --json prints it).
type Timeline struct {
	Task string `json:"task"`
	// Workflow is the workflow ID when it is not the task's (the rollback
	// of an ended task runs as rollback-<task>).
	Workflow string `json:"workflow,omitempty"`
	// Kind is "agent" (AgentTask), "plan" (Plan) or "rollback"
	// (RollbackTask: the rollback of a task that had ended).
	Kind      string   `json:"kind"`
	Principal string   `json:"principal"`
	Client    string   `json:"client,omitempty"`
	Roles     []string `json:"roles,omitempty"`
	DataLevel string   `json:"data_level,omitempty"`
	Limits    Limits   `json:"limits"`
	// Plan is the plan's name (plans only).
	Plan    string     `json:"plan,omitempty"`
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	// End is how the task ended: the workflow's final state (finished,
	// idle_timeout, deadline_exceeded, canceled, completed, stopped,
	// rolled_back, rollback_failed), continued_as_new when the last run
	// given continued as new, running when it has not ended, or failed,
	// terminated, timed_out when Temporal ended it.
	End string `json:"end"`
	// EndReason is Temporal's reason when it ended the task.
	EndReason string `json:"end_reason,omitempty"`
	// CallCount is the number of calls the task counted (from its result;
	// calls stopped by a limit are not counted).
	CallCount int `json:"call_count"`
	// Partial: the histories given start after the task's first run, so
	// what happened before is missing.
	Partial bool `json:"partial,omitempty"`

	Runs  []Run   `json:"runs"`
	Steps []Step  `json:"steps,omitempty"`
	Calls []*Call `json:"calls"`
	// Programs are the programs the task ran (code mode); their calls
	// are in Calls, each naming its program.
	Programs  []*Program `json:"programs,omitempty"`
	Rollbacks []Rollback `json:"rollbacks,omitempty"`
	// Requests are the finish and cancel requests the task received.
	Requests []Request `json:"requests,omitempty"`
	// Revocations are the approval grants revoked (grants.go).
	Revocations []Revocation `json:"revocations,omitempty"`
	// Undone lists the compensations a failed rollback left undone when
	// the task ended in rollback_failed (call IDs, top of the stack first).
	Undone []string `json:"undone,omitempty"`
	// Labels are the task's information-flow labels at the end of the
	// histories given (nil: none raised, or a task from before them);
	// LabelResets the operators' resets (labels.go).
	Labels      *api.Labels   `json:"labels,omitempty"`
	LabelResets []LabelsReset `json:"label_resets,omitempty"`
	// Problems are payloads that could not be decoded; the rest of the
	// timeline is still built.
	Problems []string `json:"problems,omitempty"`
}

// Limits are the task's limits at its start.
type Limits struct {
	MaxCalls    int        `json:"max_calls,omitempty"`
	Deadline    *time.Time `json:"deadline,omitempty"`
	IdleTimeout string     `json:"idle_timeout,omitempty"`
}

// Run is one run of the task's workflow (a new one after each
// continue-as-new).
type Run struct {
	ID      string     `json:"id"`
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	End     string     `json:"end"`
	Events  int        `json:"events"`
}

// Step is one step of a plan.
type Step struct {
	ID   string `json:"id"`
	Tool string `json:"tool"`
	// State is ok, failed, denied, skipped, or pending (not reached).
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	Call   string `json:"call,omitempty"`
}

// Call is one tool call, from request to result.
type Call struct {
	ID     string `json:"id"`
	Tool   string `json:"tool"`
	Server string `json:"server,omitempty"`
	// Step is the plan step that made the call (plans only).
	Step string `json:"step,omitempty"`
	// Program is the program that made the call (code mode), and Line
	// the line of its source that made it (0: not known).
	Program string `json:"program,omitempty"`
	Line    int    `json:"line,omitempty"`
	// Run is the run (1-based) the call was made in.
	Run int `json:"run"`
	// Repeat: the call ID was seen in an earlier run; the task answered
	// with the recorded result and ran nothing.
	Repeat bool `json:"repeat,omitempty"`
	// Arguments are redacted (see the package doc).
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Requested time.Time       `json:"requested"`
	Finished  *time.Time      `json:"finished,omitempty"`
	// DurationMS is Finished - Requested, in milliseconds.
	DurationMS int64     `json:"duration_ms,omitempty"`
	Decision   *Decision `json:"decision,omitempty"`
	Approval   *Approval `json:"approval,omitempty"`
	// Rejudged is the decision on the approved call, judged again before
	// it ran under the policy then in force (SEP-2848's re-evaluation).
	Rejudged     *Decision     `json:"rejudged,omitempty"`
	Capture      *Capture      `json:"capture,omitempty"`
	Tries        []Attempt     `json:"tries,omitempty"`
	Result       *Result       `json:"result,omitempty"`
	Compensation *Compensation `json:"compensation,omitempty"`
	// Locks are the resource locks the call and its compensation asked
	// for (locks.go).
	Locks []Lock `json:"locks,omitempty"`
	// Edit is an approver's change to the arguments (approve with edits);
	// EditApproval the request that asked another group about it.
	Edit         *Edit     `json:"edit,omitempty"`
	EditApproval *Approval `json:"edit_approval,omitempty"`
	// ResultApproval is the request to deliver the call's result, which
	// the content guard held (guard.results: require_approval).
	ResultApproval *Approval `json:"result_approval,omitempty"`
	// Exchanges are the sampling and elicitation requests the upstream
	// made during the call, with the client's answers as recorded (masked
	// by the tool's redact paths) or why they were refused.
	Exchanges []api.Exchange `json:"exchanges,omitempty"`
	// Findings are the secrets the content guard found in the call's
	// result, and what it did (redact, block); never the values.
	Findings []api.Finding `json:"findings,omitempty"`
	// Labels are the task's information-flow labels after the call, when
	// the call raised them.
	Labels *api.Labels `json:"labels,omitempty"`
}

// Decision is the policy decision on a call.
type Decision struct {
	// At is when the decision was recorded; zero when the history has the
	// decision only in the call's result.
	At            *time.Time `json:"at,omitempty"`
	Effect        api.Effect `json:"effect"`
	Check         string     `json:"check"`
	Rule          string     `json:"rule,omitempty"`
	Reason        string     `json:"reason,omitempty"`
	PolicyVersion string     `json:"policy_version,omitempty"`
	Group         string     `json:"group,omitempty"`
	Quorum        int        `json:"quorum,omitempty"`
	// Grant is the approval grant that allowed the call (check grant).
	Grant string `json:"grant,omitempty"`
	// External is what the external policy decision point was asked and
	// answered (issue 30 §3).
	External *api.ExternalDecision `json:"external,omitempty"`
}

// Approval is a call's approval request and the decisions on it.
type Approval struct {
	ID        string    `json:"id"`
	Group     string    `json:"group"`
	Quorum    int       `json:"quorum"`
	Digest    string    `json:"digest"`
	Requested time.Time `json:"requested"`
	Expires   time.Time `json:"expires"`
	// EscalatedTo is the group the request was escalated to, at
	// EscalatedAt.
	EscalatedTo string     `json:"escalated_to,omitempty"`
	EscalatedAt *time.Time `json:"escalated_at,omitempty"`
	// State is pending, approved, denied or expired.
	State   string     `json:"state"`
	Decided *time.Time `json:"decided,omitempty"`
	Votes   []Vote     `json:"votes,omitempty"`
}

// Vote is one approver's decision.
type Vote struct {
	Approver string    `json:"approver"`
	Approve  bool      `json:"approve"`
	At       time.Time `json:"at"`
	// Via is the channel: slack, cli or web.
	Via     string `json:"via"`
	Comment string `json:"comment,omitempty"`
	// Result is what the task answered ("approved: 1 of 1 approvals").
	Result string `json:"result,omitempty"`
	// Grant is what the approval also granted ("2 calls within 1h0m0s").
	Grant string `json:"grant,omitempty"`
}

// Capture is the pre-image read before a call, so it can be undone.
type Capture struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	At        time.Time       `json:"at"`
	Outcome   string          `json:"outcome"`
	Error     string          `json:"error,omitempty"`
}

// Attempt is one execution of a call's tool.
type Attempt struct {
	N        int        `json:"n"`
	Started  time.Time  `json:"started"`
	Finished *time.Time `json:"finished,omitempty"`
	Outcome  string     `json:"outcome"`
	Error    string     `json:"error,omitempty"`
}

// Result is how a call ended.
type Result struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	// Text is the first 200 characters of the result's text.
	Text     string `json:"text,omitempty"`
	IsError  bool   `json:"is_error,omitempty"`
	Attempts int    `json:"attempts"`
}

// Compensation is how a call is undone: recorded right after the call ran,
// run by rollbacks.
type Compensation struct {
	// Tool and Arguments (redacted) are the compensating call; empty when
	// it could not be computed (Error).
	Tool      string          `json:"tool,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Recorded  time.Time       `json:"recorded"`
	Error     string          `json:"error,omitempty"`
	// State is pending, done, failed, unknown (may have run; not re-run),
	// or skipped (nothing to undo).
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Runs are the times a rollback ran it.
	Runs []CompensationRun `json:"runs,omitempty"`
}

// CompensationRun is one rollback's run of a compensation.
type CompensationRun struct {
	// Rollback is the index of the rollback in Timeline.Rollbacks.
	Rollback int        `json:"rollback"`
	Started  time.Time  `json:"started"`
	Finished *time.Time `json:"finished,omitempty"`
	Outcome  string     `json:"outcome"`
	Attempts int        `json:"attempts"`
	Error    string     `json:"error,omitempty"`
}

// Rollback is one rollback of the task.
type Rollback struct {
	// By is who asked: a principal, "operator", or, for rollbacks the task
	// started itself, "cancel", "deny" or "plan".
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	// Inferred: no rollback request is in the history (the task rolled
	// itself back); By is inferred from what preceded it.
	Inferred  bool       `json:"inferred,omitempty"`
	Requested time.Time  `json:"requested"`
	Finished  *time.Time `json:"finished,omitempty"`
	// State is rolled_back, rollback_failed, nothing, or running.
	State  string `json:"state"`
	Result string `json:"result,omitempty"`
	// Compensated are the calls this rollback undid, in the order it ran
	// them; Remaining what it left undone (top of the stack first).
	Compensated []string `json:"compensated,omitempty"`
	Remaining   []string `json:"remaining,omitempty"`
	// Joined: the request found a rollback running and waited for it.
	Joined bool `json:"joined,omitempty"`
}

// Request is a finish or cancel request.
type Request struct {
	// Type is "finish" or "cancel".
	Type string    `json:"type"`
	At   time.Time `json:"at"`
}

// Call returns the call with the given ID (the first one, when a later
// run repeated it), or nil.
func (tl *Timeline) Call(id string) *Call {
	for _, c := range tl.Calls {
		if c.ID == id {
			return c
		}
	}
	return nil
}
