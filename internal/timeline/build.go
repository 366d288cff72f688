package timeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/redact"
)

// Options tune Build. The zero value (or nil) is fine.
type Options struct {
	// Redact maps exposed tool names ("server__tool") to the argument
	// paths to mask: the manifests' redact lists. The paths recorded with
	// a call's approval request are masked as well.
	Redact map[string][]string
}

// Build is the timeline of one run's history. For a task that continued as
// new, BuildChain over all its runs gives the whole task.
func Build(hist *historypb.History, opts *Options) (*Timeline, error) {
	return BuildChain([]*historypb.History{hist}, opts)
}

// BuildChain is the timeline of a task from the histories of its runs,
// oldest first, each run continuing the one before it.
func BuildChain(hists []*historypb.History, opts *Options) (*Timeline, error) {
	if len(hists) == 0 {
		return nil, errors.New("no history")
	}
	if opts == nil {
		opts = &Options{}
	}
	b := &builder{dc: converter.GetDefaultDataConverter(), opts: opts, tl: &Timeline{End: "running"},
		calls: map[string]*callState{}, programs: map[string]*programState{}}
	for i, h := range hists {
		if err := b.run(i, h); err != nil {
			return nil, err
		}
	}
	b.finish()
	return b.tl, nil
}

// localActivityMarker is the SDK's record of a local activity, in the
// marker's "data" detail; its result is in the "result" detail.
type localActivityMarker struct {
	ActivityType string
}

// Marker names and details written by the SDK.
const (
	markerLocalActivity = "LocalActivity"
	markerDetailData    = "data"
	markerDetailResult  = "result"
)

// callState is what the builder keeps about a call besides what it shows.
type callState struct {
	c *Call
	// rejudge is a second decision recorded for the call (its call ID
	// echoed): an approved call's re-judgement, or an edit's (decision.go).
	rejudge *decideMarker
	// args are the raw arguments; redact paths from the approval notice
	// join the manifest's.
	args   json.RawMessage
	redact []string
	// edit is an approver's edit of the arguments (edits.go).
	edit *api.ArgsEdit
	// Sequence numbers (across runs) for matching decisions to calls.
	accepted, done, executed int
	// recorded is the decision in the call's result (agent calls).
	recorded *api.Decision
	// external is the external policy point's part of a decision made on
	// the fast path (DecideAndCall), whose Decision is the call result's.
	external *api.ExternalDecision
	// prev is the call of an earlier run with the same ID.
	prev *callState
	// plan calls: the call's outcome is worked out from its events.
	plan        bool
	decideError string
	// text is the whole text of the call's result (Result.Text keeps
	// the start of it, once redacted values are masked).
	text    string
	undo    *compState
	capture *compState
	// prog is the program that made the call (programs.go).
	prog *programState
}

// compState holds the raw arguments of a capture or compensation.
type compState struct {
	tool string
	args json.RawMessage
}

// decideMarker is one recorded policy decision, not yet matched to a call.
type decideMarker struct {
	seq  int
	at   time.Time
	out  api.DecideOutput
	err  string
	used bool
}

// actRef says what a scheduled activity is.
type actRef struct {
	kind string // call, capture, undo
	cs   *callState
	try  int // index into Tries or Compensation.Runs
}

// updateRef says what an accepted Update is.
type updateRef struct {
	kind     string // call, vote, rollback, revoke, program, labels
	cs       *callState
	vote     int
	rollback int
	reset    int // the index of a reset_labels Update in LabelResets
	// ap is the request voted on (the call's, or the one about an
	// approver's edit); nil in refs made before edits existed.
	ap *Approval
	// prog is the program a run_program Update runs.
	prog *programState
}

type builder struct {
	dc   converter.DataConverter
	opts *Options
	tl   *Timeline

	seq     int // event counter across runs
	runN    int // 1-based
	calls   map[string]*callState
	order   []*callState
	decides []*decideMarker
	updates map[string]*updateRef
	acts    map[int64]*actRef
	// programs by ID (the latest with each ID), in progOrder as they
	// started (programs.go).
	programs  map[string]*programState
	progOrder []*programState

	// plans
	stepNext int        // the plan step the next PrepareStep prepares
	current  *callState // the plan call in progress

	// rollbacks
	rolling         int // index of the explicit rollback running, -1 if none
	inferred        int // index of the inferred rollback running, -1 if none
	cancelRequested bool
}

func (b *builder) problem(format string, args ...any) {
	b.tl.Problems = append(b.tl.Problems, fmt.Sprintf(format, args...))
}

// decode decodes the first payload into v.
func (b *builder) decode(p *commonpb.Payloads, v any) error {
	if p == nil || len(p.GetPayloads()) == 0 {
		return errors.New("no payload")
	}
	return b.dc.FromPayload(p.GetPayloads()[0], v)
}

func (b *builder) run(i int, h *historypb.History) error {
	evs := h.GetEvents()
	if len(evs) == 0 {
		return fmt.Errorf("history %d has no events", i+1)
	}
	first := evs[0]
	if first.GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED {
		return fmt.Errorf("history %d does not begin with the workflow's start (event 1 is %s); fetch the whole history", i+1, first.GetEventType())
	}
	b.runN = i + 1
	b.updates = map[string]*updateRef{}
	b.acts = map[int64]*actRef{}
	b.rolling, b.inferred = -1, -1
	if err := b.started(i, first); err != nil {
		return err
	}
	for _, ev := range evs[1:] {
		b.seq++
		b.event(ev)
	}
	r := &b.tl.Runs[len(b.tl.Runs)-1]
	r.Events = len(evs)
	b.closeInferred()
	return nil
}

func (b *builder) started(i int, ev *historypb.HistoryEvent) error {
	a := ev.GetWorkflowExecutionStartedEventAttributes()
	at := ev.GetEventTime().AsTime()
	tl := b.tl
	wt := a.GetWorkflowType().GetName()
	if i > 0 {
		prev := tl.Runs[len(tl.Runs)-1]
		if c := a.GetContinuedExecutionRunId(); c != prev.ID {
			return fmt.Errorf("history %d (run %s) does not continue run %s (it continues %q); give the runs of one task, oldest first", i+1, a.GetOriginalExecutionRunId(), prev.ID, c)
		}
	}
	tl.Runs = append(tl.Runs, Run{ID: a.GetOriginalExecutionRunId(), Started: at, End: "running"})
	tl.End, tl.Ended = "running", nil
	if i > 0 {
		return nil // the input only carries state over
	}
	var in api.TaskInput
	switch wt {
	case api.AgentTaskName:
		tl.Kind = "agent"
		if err := b.decode(a.GetInput(), &in); err != nil {
			return fmt.Errorf("decoding the task's input: %w", err)
		}
		tl.Client = in.Client
		if in.Carried != nil {
			tl.Labels = in.Carried.Labels
			tl.Partial = true
			at = in.Carried.StartedAt
		}
	case api.PlanName:
		tl.Kind = "plan"
		var pin api.PlanInput
		if err := b.decode(a.GetInput(), &pin); err != nil {
			return fmt.Errorf("decoding the plan's input: %w", err)
		}
		in = api.TaskInput{TaskID: pin.TaskID, Principal: pin.Principal, Identity: pin.Identity, Limits: pin.Limits}
		if pin.Plan != nil {
			tl.Plan = pin.Plan.Name
			for _, s := range pin.Plan.Steps {
				tl.Steps = append(tl.Steps, Step{ID: s.ID, Tool: s.Tool, State: api.StepPending})
			}
		}
	case api.RollbackTaskName:
		tl.Kind = "rollback"
		var rin api.RollbackTaskInput
		if err := b.decode(a.GetInput(), &rin); err != nil {
			return fmt.Errorf("decoding the rollback's input: %w", err)
		}
		in = api.TaskInput{TaskID: rin.TaskID, Principal: rin.Principal}
		// The calls it undoes ran in the ended task's history.
		for _, e := range rin.Compensations {
			b.newCall(e.CallID, e.Tool, e.At)
		}
	default:
		return fmt.Errorf("workflow type %q is not an airlock task (%s, %s or %s)", wt, api.AgentTaskName, api.PlanName, api.RollbackTaskName)
	}
	tl.Task, tl.Principal, tl.Started = in.TaskID, in.Principal, at.UTC()
	if tl.Task == "" {
		tl.Task = a.GetWorkflowId()
	}
	if w := a.GetWorkflowId(); w != tl.Task && w != "" {
		tl.Workflow = w
	}
	if id := in.Identity; id != nil {
		tl.Roles, tl.DataLevel = id.Roles, id.DataLevel
	}
	tl.Limits = Limits{MaxCalls: in.Limits.MaxCalls}
	if dl := in.Limits.Deadline; !dl.IsZero() {
		dl = dl.UTC()
		tl.Limits.Deadline = &dl
	}
	if it := in.Limits.IdleTimeout; it > 0 {
		tl.Limits.IdleTimeout = it.String()
	}
	return nil
}

func (b *builder) event(ev *historypb.HistoryEvent) {
	at := ev.GetEventTime().AsTime().UTC()
	switch ev.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
		b.updateAccepted(at, ev.GetWorkflowExecutionUpdateAcceptedEventAttributes())
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
		b.updateCompleted(at, ev.GetWorkflowExecutionUpdateCompletedEventAttributes())
	case enumspb.EVENT_TYPE_MARKER_RECORDED:
		b.marker(at, ev.GetMarkerRecordedEventAttributes())
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
		b.activityScheduled(at, ev.GetEventId(), ev.GetActivityTaskScheduledEventAttributes())
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
		a := ev.GetActivityTaskCompletedEventAttributes()
		b.activityClosed(at, a.GetScheduledEventId(), a.GetResult(), nil, "")
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
		a := ev.GetActivityTaskFailedEventAttributes()
		b.activityClosed(at, a.GetScheduledEventId(), nil, a.GetFailure(), "")
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
		a := ev.GetActivityTaskTimedOutEventAttributes()
		b.activityClosed(at, a.GetScheduledEventId(), nil, a.GetFailure(), string(api.OutcomeUnknown))
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
		a := ev.GetActivityTaskCanceledEventAttributes()
		b.activityClosed(at, a.GetScheduledEventId(), nil, nil, "canceled")
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
		switch a := ev.GetWorkflowExecutionSignaledEventAttributes(); a.GetSignalName() {
		case api.SignalFinish:
			b.tl.Requests = append(b.tl.Requests, Request{Type: "finish", At: at})
		case api.SignalLockGrant:
			b.lockSignal(at, a) // locks.go
		case api.SignalStopProgram:
			b.programStopSignal(at, a) // programs.go
		}
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
		b.cancelRequested = true
		b.tl.Requests = append(b.tl.Requests, Request{Type: "cancel", At: at})
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
		var res api.TaskResult
		if err := b.decode(ev.GetWorkflowExecutionCompletedEventAttributes().GetResult(), &res); err != nil {
			b.problem("task result: %v", err)
		}
		b.tl.CallCount = res.Calls
		for _, e := range res.Undone {
			b.tl.Undone = append(b.tl.Undone, e.CallID)
		}
		b.closed(at, res.State, "")
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
		b.closed(at, "continued_as_new", "")
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
		b.closed(at, "failed", ev.GetWorkflowExecutionFailedEventAttributes().GetFailure().GetMessage())
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
		b.closed(at, "terminated", ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason())
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
		b.closed(at, "timed_out", "")
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
		b.closed(at, api.StateCanceled, "")
	}
}

func (b *builder) closed(at time.Time, end, reason string) {
	r := &b.tl.Runs[len(b.tl.Runs)-1]
	r.Ended, r.End = &at, end
	b.tl.Ended, b.tl.End, b.tl.EndReason = &at, end, reason
}

// call returns the call with this ID, creating it when the history has
// not shown it yet.
func (b *builder) call(id, tool string, at time.Time) *callState {
	if cs, ok := b.calls[id]; ok {
		return cs
	}
	return b.newCall(id, tool, at)
}

func (b *builder) newCall(id, tool string, at time.Time) *callState {
	cs := &callState{c: &Call{ID: id, Tool: tool, Run: b.runN, Requested: at}, accepted: b.seq}
	if prev, ok := b.calls[id]; ok && prev.c.Run < b.runN {
		cs.prev = prev // a repeat, or a call ID reused after it left the task's memory
	}
	b.calls[id] = cs
	b.order = append(b.order, cs)
	return cs
}

func (b *builder) updateAccepted(at time.Time, a *historypb.WorkflowExecutionUpdateAcceptedEventAttributes) {
	in := a.GetAcceptedRequest().GetInput()
	id := a.GetAcceptedRequest().GetMeta().GetUpdateId()
	if id == "" {
		id = a.GetProtocolInstanceId()
	}
	switch in.GetName() {
	case api.UpdateCallTool:
		var req api.CallRequest
		if err := b.decode(in.GetArgs(), &req); err != nil {
			b.problem("call_tool update %s: %v", id, err)
			req.CallID = id
		}
		b.closeInferred()
		cs := b.newCall(req.CallID, req.Tool, at)
		cs.c.Server, cs.args = req.Server, req.Arguments
		b.updates[id] = &updateRef{kind: "call", cs: cs}
	case api.UpdateDecide:
		var d api.DecideRequest
		if err := b.decode(in.GetArgs(), &d); err != nil {
			b.problem("decide update %s: %v", id, err)
			return
		}
		callID := callOfRequest(b.tl.Task, d.RequestID)
		cs := b.callOrProgram(callID, "", at)
		ap := b.approval(cs, d.RequestID)
		ap.Votes = append(ap.Votes, Vote{Approver: d.Approver, Approve: d.Approve, At: at, Via: d.Via, Comment: d.Comment})
		if !d.Grant.Empty() {
			ap.Votes[len(ap.Votes)-1].Grant = d.Grant.String()
		}
		b.updates[id] = &updateRef{kind: "vote", cs: cs, vote: len(ap.Votes) - 1, ap: ap}
	case api.UpdateRollback:
		var req api.RollbackRequest
		if err := b.decode(in.GetArgs(), &req); err != nil {
			b.problem("rollback update %s: %v", id, err)
		}
		b.closeInferred()
		b.tl.Rollbacks = append(b.tl.Rollbacks, Rollback{By: req.By, Reason: req.Reason, Requested: at, State: "running"})
		i := len(b.tl.Rollbacks) - 1
		if b.rolling < 0 {
			b.rolling = i
		}
		b.updates[id] = &updateRef{kind: "rollback", rollback: i}
	case api.UpdateRevokeGrant:
		b.revokeRequested(id, in.GetArgs(), at)
	case api.UpdateRunProgram:
		b.programAccepted(at, id, in.GetArgs())
	case api.UpdateResetLabels:
		b.labelsResetAccepted(at, id, in.GetArgs()) // labels.go
	}
}

// repeated reports that an answered call repeated a call of an earlier
// run: the task answered with the recorded result, at once, having run
// nothing and decided nothing.
func (b *builder) repeated(cs *callState) bool {
	p := cs.prev
	if p == nil || p.c.Result == nil || len(cs.c.Tries) > 0 || cs.c.Capture != nil || cs.c.Approval != nil {
		return false
	}
	for _, d := range b.decides {
		if d.seq > cs.accepted && d.seq < cs.done && !d.used {
			return false
		}
	}
	return cs.c.Result.Outcome == p.c.Result.Outcome && cs.c.Result.Attempts == p.c.Result.Attempts
}

func (b *builder) approval(cs *callState, id string) *Approval {
	if api.IsEditRequestID(id) { // the request about an approver's edit
		if cs.c.EditApproval == nil {
			cs.c.EditApproval = &Approval{ID: id, State: api.ApprovalPending}
		}
		return cs.c.EditApproval
	}
	if _, ok := api.CallOfResultApprovalID(id); ok { // the request to deliver its result
		if cs.c.ResultApproval == nil {
			cs.c.ResultApproval = &Approval{ID: id, State: api.ApprovalPending}
		}
		return cs.c.ResultApproval
	}
	if cs.c.Approval == nil {
		cs.c.Approval = &Approval{ID: id, State: api.ApprovalPending}
	}
	return cs.c.Approval
}

func (b *builder) updateCompleted(at time.Time, a *historypb.WorkflowExecutionUpdateCompletedEventAttributes) {
	ref := b.updates[a.GetMeta().GetUpdateId()]
	if ref == nil {
		return
	}
	fail := a.GetOutcome().GetFailure()
	switch ref.kind {
	case "call":
		cs := ref.cs
		cs.done = b.seq
		cs.c.Finished = &at
		if fail != nil {
			cs.c.Result = &Result{Outcome: string(api.OutcomeFailed), Reason: fail.GetMessage()}
			return
		}
		var res api.CallResult
		if err := b.decode(a.GetOutcome().GetSuccess(), &res); err != nil {
			b.problem("result of call %s: %v", cs.c.ID, err)
			return
		}
		cs.recorded = res.Decision
		b.setEdit(cs, res.Edit)
		b.callLabels(cs, res.Labels) // labels.go
		cs.c.Result = &Result{Outcome: string(res.Outcome), Reason: res.Reason, Attempts: res.Attempts,
			IsError: res.Outcome == api.OutcomeToolError}
		if len(res.Result) > 0 {
			cs.text = api.ResultText(res.Result)
		}
		if res.Repeat != nil || b.repeated(cs) {
			// Answered from the task's memory: the call that ran is the
			// earlier one, which compensations and rollbacks refer to.
			// (Tasks with a call ledger say so in the result; older ones
			// are recognised by the answer matching the earlier call's.)
			cs.c.Repeat = true
			if cs.prev != nil {
				b.calls[cs.c.ID] = cs.prev
			}
		}
	case "vote":
		ap := ref.ap
		v := &ap.Votes[ref.vote]
		if fail != nil {
			v.Result = "refused: " + fail.GetMessage()
			return
		}
		var res api.DecideResult
		if err := b.decode(a.GetOutcome().GetSuccess(), &res); err != nil {
			b.problem("decision of %s: %v", v.Approver, err)
			return
		}
		v.Result = res.Message
		if res.State != "" && res.State != api.ApprovalPending {
			ap.State = res.State
			if ap.Decided == nil {
				ap.Decided = &at
			}
		}
	case "revoke":
		b.revokeCompleted(ref, fail, a.GetOutcome().GetSuccess())
	case "labels":
		b.labelsResetCompleted(ref, fail, a.GetOutcome().GetSuccess())
	case "program":
		b.programCompleted(at, ref.prog, a.GetOutcome().GetSuccess(), fail)
	case "rollback":
		rb := &b.tl.Rollbacks[ref.rollback]
		rb.Finished = &at
		if b.rolling == ref.rollback {
			b.rolling = -1
		}
		if fail != nil {
			rb.State, rb.Result = "failed", fail.GetMessage()
			return
		}
		var res api.RollbackResult
		if err := b.decode(a.GetOutcome().GetSuccess(), &res); err != nil {
			b.problem("rollback result: %v", err)
			return
		}
		rb.State, rb.Result, rb.Joined = res.State, res.Reason, res.Joined
		rb.Compensated, rb.Remaining = nil, nil
		for _, e := range res.Compensated {
			rb.Compensated = append(rb.Compensated, e.CallID)
			if !res.Joined {
				b.compensationEntry(e)
			}
		}
		for _, e := range res.Remaining {
			rb.Remaining = append(rb.Remaining, e.CallID)
			if !res.Joined {
				b.compensationEntry(e)
			}
		}
	}
}

func (b *builder) marker(at time.Time, a *historypb.MarkerRecordedEventAttributes) {
	if a.GetMarkerName() != markerLocalActivity {
		return
	}
	var m localActivityMarker
	if err := b.decode(a.GetDetails()[markerDetailData], &m); err != nil {
		b.problem("local activity marker: %v", err)
		return
	}
	failed := ""
	if f := a.GetFailure(); f != nil {
		failed = failureText(f)
	}
	result := a.GetDetails()[markerDetailResult]
	switch m.ActivityType {
	case api.DecideName:
		d := &decideMarker{seq: b.seq, at: at, err: failed}
		if failed == "" {
			if err := b.decode(result, &d.out); err != nil {
				b.problem("policy decision: %v", err)
				return
			}
		}
		if cs, ok := b.calls[d.out.CallID]; ok && d.out.CallID != "" && cs.c.Decision != nil && cs.rejudge == nil {
			cs.rejudge = d // and kept among the decisions, as before it was shown
		}
		// Recorded since Decide echoes the call ID: exact.
		if cs, ok := b.calls[d.out.CallID]; ok && d.out.CallID != "" && cs.c.Decision == nil {
			b.decides = append(b.decides, d)
			b.assignDecision(cs, d)
			return
		}
		if b.programDecided(d) { // a program's call: seen first here
			return
		}
		b.decides = append(b.decides, d)
		if b.tl.Kind == "plan" && b.current != nil && b.current.c.Decision == nil {
			b.assignDecision(b.current, d)
		}
	case api.DecideAndCallName:
		// The fast path: the decision is taken from the call's result;
		// what the call exchanged with the client is only here.
		var out api.DecideAndCallOutput
		if failed != "" || b.decode(result, &out) != nil {
			return
		}
		b.programFastCall(at, out) // a program's call: its only record
		if cs, ok := b.calls[out.Decision.CallID]; ok && out.Decision.CallID != "" {
			cs.external = out.Decision.External
		}
		if out.Call == nil {
			return
		}
		if cs, ok := b.calls[out.Decision.CallID]; ok && out.Decision.CallID != "" {
			if cs.prog == nil { // a program's call got them with its decision
				cs.c.Findings = append(cs.c.Findings, out.Decision.Findings...)
			}
			cs.c.Exchanges = append(cs.c.Exchanges, out.Call.Exchanges...)
			cs.c.Findings = append(cs.c.Findings, out.Call.Findings...)
		}
	case api.PrepareStepName:
		b.prepareStep(at, result, failed)
	case api.PlanCompensationName:
		var out api.CompensationOutput
		if failed == "" {
			if err := b.decode(result, &out); err != nil {
				b.problem("compensation: %v", err)
				return
			}
		}
		cs := b.compensated(out.CallID)
		if cs == nil {
			b.problem("a compensation recorded at %s matches no call", at.Format(time.RFC3339Nano))
			return
		}
		comp := b.compensation(cs, at)
		comp.Recorded = at
		switch {
		case failed != "":
			comp.Error = "the compensation could not be computed: " + failed
		case out.Skipped != "":
			comp.State, comp.Reason = "skipped", out.Skipped
		case out.Error != "":
			comp.Error = "the compensation could not be computed: " + out.Error
		case out.Compensation != nil:
			cs.undo = &compState{tool: out.Compensation.Tool, args: storedArgs(out.Compensation.Arguments, out.Compensation.ArgumentsRef)}
		}
	}
}

func (b *builder) activityScheduled(at time.Time, id int64, a *historypb.ActivityTaskScheduledEventAttributes) {
	switch a.GetActivityType().GetName() {
	case api.CallToolName:
		var in api.CallToolInput
		if err := b.decode(a.GetInput(), &in); err != nil {
			b.problem("tool call: %v", err)
			return
		}
		b.toolScheduled(at, id, in)
	case api.RequestLockName:
		b.lockRequested(at, a) // locks.go
	case api.NotifyApproversName:
		var n api.ApprovalNotice
		if err := b.decode(a.GetInput(), &n); err != nil {
			b.problem("approval notice: %v", err)
			return
		}
		callID, _ := api.CallOfResultApprovalID(n.CallID) // a request to deliver its result
		cs := b.programCall(callID, at)
		if cs == nil {
			cs = b.call(callID, n.Tool, at)
		} else if cs.c.Tool == "" {
			cs.c.Tool = n.Tool
		}
		b.programNoticed(cs, n)
		cs.redact = append(cs.redact, n.Redact...)
		ap := b.approval(cs, n.RequestID)
		if n.Escalation {
			ap.EscalatedTo, ap.EscalatedAt = n.Group, &at
			return
		}
		ap.Group, ap.Quorum, ap.Digest, ap.Expires = n.Group, n.Quorum, n.Digest, n.ExpiresAt.UTC()
		if ap.Requested.IsZero() {
			ap.Requested = at
		}
	case api.UpdateApprovalName:
		var n api.ApprovalNotice
		if err := b.decode(a.GetInput(), &n); err != nil {
			b.problem("approval notice: %v", err)
			return
		}
		callID, _ := api.CallOfResultApprovalID(n.CallID) // a request to deliver its result
		cs := b.callOrProgram(callID, n.Tool, at)
		ap := b.approval(cs, n.RequestID)
		if n.State != "" {
			ap.State = n.State
		}
		if ap.Decided == nil && ap.State != api.ApprovalPending {
			ap.Decided = &at
		}
	case api.NotifyRollbackFailedName:
		var n api.RollbackNotice
		if err := b.decode(a.GetInput(), &n); err != nil {
			b.problem("rollback notice: %v", err)
			return
		}
		i := b.rolling
		if i < 0 {
			i = b.inferred
		}
		if i < 0 {
			return
		}
		rb := &b.tl.Rollbacks[i]
		rb.State, rb.Result = api.StateRollbackFailed, n.Reason
		if rb.Inferred && n.RequestedBy != "" {
			rb.By = n.RequestedBy
		}
		rb.Remaining = nil
		for _, r := range n.Remaining {
			rb.Remaining = append(rb.Remaining, r.CallID)
		}
	}
}

func (b *builder) toolScheduled(at time.Time, id int64, in api.CallToolInput) {
	cid := in.CallID
	if _, ok := b.calls[cid]; !ok {
		b.programCall(cid, at) // a program's call first seen running
	}
	if cs, ok := b.calls[cid]; ok && cs.done == 0 && (!cs.plan || cs == b.current) {
		c := cs.c
		if cs.prog != nil && len(cs.args) == 0 {
			cs.args = in.Arguments
		}
		if cs.prog != nil && c.Tool == "" {
			c.Tool = in.ExposedName
		}
		c.Tries = append(c.Tries, Attempt{N: in.Attempt, Started: at, Outcome: "running"})
		b.acts[id] = &actRef{kind: "call", cs: cs, try: len(c.Tries) - 1}
		if c.Server == "" {
			c.Server = in.Server
		}
		return
	}
	if base, ok := api.CallOfCaptureID(cid); ok {
		cs := b.call(base, "", at)
		cs.capture = &compState{tool: in.ExposedName, args: in.Arguments}
		cs.c.Capture = &Capture{Tool: in.ExposedName, At: at, Outcome: "running"}
		b.acts[id] = &actRef{kind: "capture", cs: cs}
		return
	}
	if base, ok := api.CallOfCompensationID(cid); ok {
		cs := b.call(base, "", at)
		i := b.rolling
		if i < 0 {
			i = b.inferRollback(at)
		}
		comp := b.compensation(cs, at)
		if cs.undo == nil {
			cs.undo = &compState{tool: in.ExposedName, args: storedArgs(in.Arguments, in.ArgumentsRef)}
		}
		if n := len(comp.Runs); n > 0 && comp.Runs[n-1].Rollback == i && in.Attempt > 1 {
			// the workflow retrying the compensation within one rollback
			comp.Runs[n-1].Attempts, comp.Runs[n-1].Finished, comp.Runs[n-1].Outcome = in.Attempt, nil, "running"
		} else {
			comp.Runs = append(comp.Runs, CompensationRun{Rollback: i, Started: at, Outcome: "running", Attempts: in.Attempt})
		}
		rb := &b.tl.Rollbacks[i]
		b.programRollback(rb, base)
		if !slices.Contains(rb.Compensated, base) {
			rb.Compensated = append(rb.Compensated, base)
		}
		b.acts[id] = &actRef{kind: "undo", cs: cs, try: len(comp.Runs) - 1}
		return
	}
	// A call the history did not announce (a partial history).
	cs := b.call(cid, in.ExposedName, at)
	cs.args = in.Arguments
	cs.c.Tries = append(cs.c.Tries, Attempt{N: in.Attempt, Started: at, Outcome: "running"})
	b.acts[id] = &actRef{kind: "call", cs: cs, try: len(cs.c.Tries) - 1}
}

func (b *builder) activityClosed(at time.Time, scheduled int64, result *commonpb.Payloads, fail *failurepb.Failure, outcome string) {
	ref := b.acts[scheduled]
	if ref == nil {
		return
	}
	var out api.CallToolOutput
	errText := ""
	switch {
	case outcome != "":
		if fail != nil {
			errText = failureText(fail)
		}
	case fail != nil:
		outcome, errText = failureOutcome(fail), failureText(fail)
	default:
		if err := b.decode(result, &out); err != nil {
			b.problem("tool result: %v", err)
		}
		outcome = string(api.OutcomeOK)
		if out.IsError {
			outcome = string(api.OutcomeToolError)
		}
	}
	cs := ref.cs
	switch ref.kind {
	case "call":
		t := &cs.c.Tries[ref.try]
		t.Finished, t.Outcome, t.Error = &at, outcome, errText
		cs.executed = b.seq
		cs.c.Exchanges = append(cs.c.Exchanges, out.Exchanges...)
		cs.c.Findings = append(cs.c.Findings, out.Findings...)
		if (cs.plan || cs.prog != nil) && len(out.Result) > 0 {
			cs.text = api.ResultText(out.Result)
		}
		if cs.prog != nil && !cs.prog.done && (outcome == string(api.OutcomeOK) || outcome == string(api.OutcomeToolError)) {
			// Until the program's result says how the call ended.
			cs.c.Result = &Result{Outcome: outcome, Attempts: len(cs.c.Tries), IsError: outcome == string(api.OutcomeToolError)}
			cs.c.Finished = &at
		}
	case "capture":
		c := cs.c.Capture
		c.Outcome, c.Error = outcome, errText
	case "undo":
		comp := cs.c.Compensation
		r := &comp.Runs[ref.try]
		r.Finished, r.Outcome, r.Error = &at, outcome, errText
		switch api.Outcome(outcome) {
		case api.OutcomeOK:
			comp.State, comp.Reason = api.CompensationDone, ""
		case api.OutcomeUnknown:
			comp.State, comp.Reason = api.CompensationUnknown, errText
		case api.OutcomeToolError:
			comp.State, comp.Reason = api.CompensationFailed, "reported an error: "+summary(api.ResultText(out.Result))
		default:
			comp.State, comp.Reason = api.CompensationFailed, errText
		}
	}
}

// failureOutcome maps an activity failure to the call outcome the
// workflow gives it.
func failureOutcome(f *failurepb.Failure) string {
	if f.GetTimeoutFailureInfo() != nil {
		return string(api.OutcomeUnknown)
	}
	switch f.GetApplicationFailureInfo().GetType() {
	case api.ErrTypeNotSent:
		return string(api.OutcomeUnavailable)
	case api.ErrTypeOutcomeUnknown:
		return string(api.OutcomeUnknown)
	case api.ErrTypeRejected:
		return string(api.OutcomeRejected)
	}
	return string(api.OutcomeFailed)
}

func failureText(f *failurepb.Failure) string {
	msg := f.GetMessage()
	if t := f.GetApplicationFailureInfo().GetType(); t != "" {
		msg = t + ": " + msg
	}
	if ti := f.GetTimeoutFailureInfo(); ti != nil {
		msg = "timeout (" + strings.ToLower(strings.TrimPrefix(ti.GetTimeoutType().String(), "TIMEOUT_TYPE_")) + ")"
	}
	return summary(msg)
}

// summaryLen is how much of a result's text a timeline keeps.
const summaryLen = 200

// summary is the first summaryLen characters of s.
func summary(s string) string {
	r := []rune(s)
	if len(r) <= summaryLen {
		return s
	}
	return string(r[:summaryLen]) + "…"
}

// finish matches decisions to calls, works out what the history leaves
// implicit, and redacts arguments.
func (b *builder) finish() {
	b.finishPlanCall()
	b.closeInferred()
	b.matchDecisions()
	b.grantDecisions()
	secrets := map[*programState][]string{}
	for _, ps := range b.progOrder {
		secrets[ps] = b.sourceSecrets(ps)
	}
	for _, cs := range b.order {
		c := cs.c
		if c.Decision == nil && cs.recorded != nil {
			d := cs.recorded
			c.Decision = &Decision{Effect: d.Effect, Check: d.Check, Rule: d.Rule, Reason: d.Reason,
				PolicyVersion: d.PolicyVersion, Group: d.Group, Quorum: d.Quorum, External: cs.external}
		}
		if c.Finished != nil {
			c.DurationMS = c.Finished.Sub(c.Requested).Milliseconds()
		}
		if ap := c.Approval; ap != nil && ap.State == api.ApprovalPending && c.Result != nil {
			// Closed without a decisive vote and without a notice update.
			if c.Result.Outcome == string(api.OutcomeDenied) {
				ap.State = api.ApprovalExpired
			} else {
				ap.State = api.ApprovalApproved
			}
			ap.Decided = c.Finished
		}
		paths := append(slices.Clone(b.opts.Redact[c.Tool]), cs.redact...)
		s := b.redact(cs, paths, secrets[cs.prog])
		if cs.prog != nil {
			secrets[cs.prog] = append(secrets[cs.prog], s...)
		}
		if st := b.step(c.Step); st != nil && c.Result != nil && c.Result.Outcome != string(api.OutcomeOK) {
			st.Reason = c.Result.Reason
		}
		b.tl.Calls = append(b.tl.Calls, c)
	}
	if b.tl.Calls == nil {
		b.tl.Calls = []*Call{}
	}
	for _, ps := range b.progOrder {
		b.maskProgram(ps, secrets[ps])
	}
}

// redact masks the call's arguments at the redact paths and, wherever
// else the call's values show (its result, errors, capture and
// compensation), the values found at those paths: a tool may echo a
// redacted argument back. It returns those values.
//
// extra are more values to mask (a program's, from its source).
func (b *builder) redact(cs *callState, paths []string, extra []string) []string {
	c := cs.c
	secrets := append(redact.ValuesAt(cs.args, paths), b.finishEdit(cs, paths)...)
	finishRejudged(cs)
	if len(extra) > 0 {
		secrets = append(secrets, extra...)
		slices.SortFunc(secrets, func(x, y string) int { return len(y) - len(x) }) // longest first
	}
	c.Arguments = redact.Arguments(cs.args, paths)
	if r := c.Result; r != nil {
		r.Text = summary(redact.MaskValues(cs.text, secrets))
		r.Reason = redact.MaskValues(r.Reason, secrets)
	}
	for i := range c.Tries {
		c.Tries[i].Error = redact.MaskValues(c.Tries[i].Error, secrets)
	}
	if cp := c.Capture; cp != nil {
		if cs.capture != nil {
			cp.Arguments = redact.MaskJSON(redact.Arguments(cs.capture.args, b.opts.Redact[cs.capture.tool]), secrets)
		}
		cp.Error = redact.MaskValues(cp.Error, secrets)
	}
	if cp := c.Compensation; cp != nil {
		if cs.undo != nil {
			cp.Tool = cs.undo.tool
			cp.Arguments = redact.MaskJSON(redact.Arguments(cs.undo.args, b.opts.Redact[cs.undo.tool]), secrets)
		}
		cp.Reason, cp.Error = redact.MaskValues(cp.Reason, secrets), redact.MaskValues(cp.Error, secrets)
		for i := range cp.Runs {
			cp.Runs[i].Error = redact.MaskValues(cp.Runs[i].Error, secrets)
		}
	}
	return secrets
}

// storedArgs shows arguments kept in the worker's blob store by their
// reference (the history holds only that).
func storedArgs(args json.RawMessage, ref string) json.RawMessage {
	if ref == "" {
		return args
	}
	b, _ := json.Marshal(map[string]string{"stored_in_blob_store": ref})
	return b
}
