package timeline

// Programs (code mode, issue 27): a run_program Update runs an agent's
// Starlark program in the task, and each tool call it makes goes through
// the call pipeline with the ID <program>/<n>. The history has no call_tool
// Update for those calls: a call is first seen at its policy decision (a
// Decide or DecideAndCall marker naming its ID), its approval notice or its
// CallTool activity, and the program's result (ProgramResult) lists every
// call with its tool, line and outcome. The timeline shows the program as
// one block with its calls under it.

import (
	"encoding/json"
	"slices"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/redact"
)

// Event types of programs.
const (
	EventProgramStarted       = "program_started"
	EventProgramStopRequested = "program_stop_requested"
	EventProgramFinished      = "program_finished"
	// EventProgramRunning ends the block of a program that has not
	// ended (at its latest event).
	EventProgramRunning = "program_running"
)

// Program is one program the task ran. Its source, output, error and
// result are masked where the arguments of its calls show in them (see
// maskProgram).
type Program struct {
	ID        string `json:"id"`
	Principal string `json:"principal,omitempty"`
	// Run is the run (1-based) the program started in.
	Run    int    `json:"run"`
	Source string `json:"source"`
	// Tools are the exposed names of the tools it was given.
	Tools  []string      `json:"tools,omitempty"`
	Atomic bool          `json:"atomic,omitempty"`
	Limits ProgramLimits `json:"limits"`
	// Repeat: the program's ID had run before; the task answered with
	// its recorded result.
	Repeat    bool       `json:"repeat,omitempty"`
	Requested time.Time  `json:"requested"`
	Finished  *time.Time `json:"finished,omitempty"`
	// DurationMS is Finished - Requested, in milliseconds.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// Outcome is ok, error, invalid, limit or stopped (api.ProgramOutcome),
	// running when it has not ended, failed when the Update failed.
	Outcome string          `json:"outcome"`
	Result  json.RawMessage `json:"result,omitempty"`
	Output  string          `json:"output,omitempty"`
	Error   string          `json:"error,omitempty"`
	Line    int             `json:"line,omitempty"`
	Steps   int64           `json:"steps,omitempty"`
	// Calls are the IDs of its calls (in Timeline.Calls), in the order
	// they started.
	Calls      []string `json:"calls"`
	RolledBack []string `json:"rolled_back,omitempty"`
	// Stops are the stop_program requests it received.
	Stops []ProgramStop `json:"stops,omitempty"`
	// Findings are what the content guard found in its return value and
	// output (api.ProgramResult.Findings); Withheld why it withheld them.
	Findings []api.Finding `json:"findings,omitempty"`
	Withheld string        `json:"withheld,omitempty"`
}

// ProgramLimits are the limits a program ran with (those a reader of the
// audit asks about; the history has them all).
type ProgramLimits struct {
	MaxCalls int    `json:"max_calls"`
	MaxSteps int64  `json:"max_steps"`
	Timeout  string `json:"timeout"`
}

// ProgramStop is a request to stop a running program.
type ProgramStop struct {
	At     time.Time `json:"at"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

// programState is what the builder keeps about a program.
type programState struct {
	p   *Program
	req api.ProgramRequest
	// done: its result is in; calls: its calls by n.
	done  bool
	calls map[int]*callState
}

// Program returns the program with the given ID (the first one, when a
// later run repeated it), or nil.
func (tl *Timeline) Program(id string) *Program {
	for _, p := range tl.Programs {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// programAccepted starts a program: its request is the Update's input.
func (b *builder) programAccepted(at time.Time, id string, args *commonpb.Payloads) {
	var req api.ProgramRequest
	if err := b.decode(args, &req); err != nil {
		b.problem("run_program update %s: %v", id, err)
	}
	if req.ProgramID == "" {
		req.ProgramID = id
	}
	b.closeInferred()
	p := &Program{ID: req.ProgramID, Principal: req.Principal, Run: b.runN, Source: req.Source, Atomic: req.Atomic,
		Limits:    ProgramLimits{MaxCalls: req.Limits.MaxCalls, MaxSteps: req.Limits.MaxSteps, Timeout: req.Limits.Timeout.String()},
		Requested: at, Outcome: "running", Calls: []string{}}
	for _, t := range req.Tools {
		p.Tools = append(p.Tools, t.Name)
	}
	if prev := b.programs[req.ProgramID]; prev != nil && prev.done {
		p.Repeat = true
	}
	ps := &programState{p: p, req: req, calls: map[int]*callState{}}
	b.programs[req.ProgramID] = ps
	b.progOrder = append(b.progOrder, ps)
	b.tl.Programs = append(b.tl.Programs, p)
	b.updates[id] = &updateRef{kind: "program", prog: ps}
}

// programCall is the call with a program call's ID, made when the history
// shows it first; nil when id is no call of a program of this timeline.
func (b *builder) programCall(id string, at time.Time) *callState {
	prog, n, ok := api.SplitProgramCallID(id)
	if !ok {
		return nil
	}
	ps := b.programs[prog]
	if ps == nil {
		return nil
	}
	if cs := ps.calls[n]; cs != nil {
		return cs
	}
	cs := b.newCall(id, "", at)
	cs.prog, cs.c.Program = ps, ps.p.ID
	ps.calls[n] = cs
	ps.p.Calls = append(ps.p.Calls, id)
	return cs
}

// routeTool is the exposed name of a program's tool on a route.
func (ps *programState) routeTool(r *api.Route) string {
	if r == nil {
		return ""
	}
	for _, t := range ps.req.Tools {
		if t.Server == r.Server && t.UpstreamTool == r.UpstreamTool {
			return t.Name
		}
	}
	return ""
}

// programDecided gives a program call its decision from a Decide marker;
// false when the decision is no program call's.
func (b *builder) programDecided(d *decideMarker) bool {
	if _, ok := b.calls[d.out.CallID]; ok || d.out.CallID == "" {
		return false
	}
	cs := b.programCall(d.out.CallID, d.at)
	if cs == nil {
		return false
	}
	if cs.c.Tool == "" {
		cs.c.Tool = cs.prog.routeTool(d.out.Route)
	}
	b.decides = append(b.decides, d)
	b.assignDecision(cs, d)
	return true
}

// programFastCall records a program call decided and run on the fast path
// (a DecideAndCall marker): its decision and its result are only there.
func (b *builder) programFastCall(at time.Time, out api.DecideAndCallOutput) {
	id := out.Decision.CallID
	if id == "" {
		return
	}
	if cs, ok := b.calls[id]; ok && cs.prog == nil {
		return // a direct call: its result carries all this
	}
	cs := b.programCall(id, at)
	if cs == nil {
		return
	}
	if cs.c.Tool == "" {
		cs.c.Tool = cs.prog.routeTool(out.Decision.Route)
	}
	if cs.c.Decision == nil {
		d := &decideMarker{seq: b.seq, at: at, out: out.Decision}
		b.decides = append(b.decides, d)
		b.assignDecision(cs, d)
	}
	if r := out.Decision.Route; r != nil && cs.c.Server == "" {
		cs.c.Server = r.Server
	}
	res := &Result{Outcome: string(api.OutcomeDenied), Reason: out.Decision.Reason}
	switch {
	case out.Ran && out.Call != nil:
		res = &Result{Outcome: string(api.OutcomeOK), Attempts: 1, IsError: out.Call.IsError}
		if out.Call.IsError {
			res.Outcome = string(api.OutcomeToolError)
		}
		cs.text = api.ResultText(out.Call.Result)
	case out.Error != "":
		res = &Result{Outcome: string(api.OutcomeFailed), Reason: out.Error, Attempts: 1}
	}
	cs.c.Result, cs.c.Finished = res, &at
}

// programNoticed takes what an approval notice says of a program call:
// its arguments and line (the notice is the first record of them while
// the program runs).
func (b *builder) programNoticed(cs *callState, n api.ApprovalNotice) {
	if cs.prog == nil {
		return
	}
	if len(cs.args) == 0 {
		cs.args = n.Arguments
	}
	if cs.c.Line == 0 {
		cs.c.Line = n.Line
	}
}

// programStopSignal records a stop_program request.
func (b *builder) programStopSignal(at time.Time, a *historypb.WorkflowExecutionSignaledEventAttributes) {
	var s api.StopProgram
	if p := a.GetInput(); p != nil && len(p.GetPayloads()) > 0 {
		if b.dc.FromPayload(p.GetPayloads()[0], &s.ProgramID) != nil {
			_ = b.dc.FromPayload(p.GetPayloads()[0], &s)
		}
	}
	ps := b.programs[s.ProgramID]
	if ps == nil {
		return
	}
	ps.p.Stops = append(ps.p.Stops, ProgramStop{At: at, By: s.By, Reason: s.Reason})
}

// programCompleted takes the program's result: how it ended, and each
// call's tool, line and outcome (authoritative: a call refused by one of
// the program's limits is only there).
func (b *builder) programCompleted(at time.Time, ps *programState, success *commonpb.Payloads, fail *failurepb.Failure) {
	p := ps.p
	ps.done = true
	p.Finished = &at
	p.DurationMS = at.Sub(p.Requested).Milliseconds()
	if fail != nil {
		p.Outcome, p.Error = "failed", fail.GetMessage()
		return
	}
	var res api.ProgramResult
	if err := b.decode(success, &res); err != nil {
		b.problem("result of program %s: %v", p.ID, err)
		return
	}
	p.Outcome, p.Result, p.Output, p.Error, p.Line, p.Steps = string(res.Outcome), res.Result, res.Output, res.Error, res.Line, res.Steps
	p.RolledBack = res.RolledBack
	p.Findings, p.Withheld = res.Findings, res.Withheld
	for _, pc := range res.Calls {
		var cs *callState
		if prog, _, ok := api.SplitProgramCallID(pc.CallID); ok && prog == p.ID {
			cs = b.programCall(pc.CallID, at)
		}
		if cs == nil {
			b.problem("program %s lists call %s, which is not one of its calls", p.ID, pc.CallID)
			continue
		}
		c := cs.c
		if c.Tool == "" {
			c.Tool = pc.Tool
		}
		if pc.Line != 0 {
			c.Line = pc.Line
		}
		if c.Result == nil {
			c.Result = &Result{}
		}
		c.Result.Outcome, c.Result.Reason = string(pc.Outcome), pc.Reason
		if n := len(c.Tries); n > 0 {
			c.Result.Attempts = n
			if f := c.Tries[n-1].Finished; f != nil && c.Finished == nil {
				c.Finished = f
			}
		}
		c.Result.IsError = pc.Outcome == api.OutcomeToolError
		b.callLabels(cs, pc.Labels) // labels.go
		if c.Finished == nil {
			c.Finished = &at
		}
	}
}

// programRollback names the rollback an atomic program's failure started:
// the task records no request for it.
func (b *builder) programRollback(rb *Rollback, callID string) {
	prog, _, ok := api.SplitProgramCallID(callID)
	if !ok || !rb.Inferred || rb.By == "program "+prog {
		return
	}
	if ps := b.programs[prog]; ps != nil && ps.req.Atomic && !ps.done {
		rb.By, rb.Reason = "program "+prog, "the atomic program "+prog+" did not end ok"
	}
}

// sourceSecrets masks, in the program's source, the string literals a call
// passes at a redact path (a call decided on the fast path leaves its
// arguments nowhere else in history), and returns their values (those
// long enough to mask elsewhere, as redact.ValuesAt) to be masked in its
// calls' results too.
func (b *builder) sourceSecrets(ps *programState) []string {
	paths := map[string][]string{} // module.function and exposed name → redact paths
	for _, t := range ps.req.Tools {
		if rp := b.opts.Redact[t.Name]; len(rp) > 0 {
			paths[t.Module+"."+t.Function], paths[t.Name] = rp, rp
		}
	}
	src, values := maskSource(ps.p.Source, paths)
	ps.p.Source = src
	var out []string
	for _, v := range values {
		if len([]rune(v)) >= 4 && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// maskProgram masks, in the program's source, output, error and result,
// the values found at its calls' redact paths and in its source (secrets,
// from finish).
func (b *builder) maskProgram(ps *programState, secrets []string) {
	p := ps.p
	// Its calls, seen in the order they were decided, are listed in the
	// order they started (their n).
	slices.SortFunc(p.Calls, func(x, y string) int {
		_, i, _ := api.SplitProgramCallID(x)
		_, j, _ := api.SplitProgramCallID(y)
		return i - j
	})
	slices.SortFunc(secrets, func(x, y string) int { return len(y) - len(x) }) // longest first
	p.Source = redact.MaskValues(p.Source, secrets)
	p.Output = redact.MaskValues(p.Output, secrets)
	p.Error = redact.MaskValues(p.Error, secrets)
	p.Result = redact.MaskJSON(p.Result, secrets)
}

// callOrProgram is b.call for a record that names a call (a vote, an
// approval update) and may be the first to show a program's call.
func (b *builder) callOrProgram(id, tool string, at time.Time) *callState {
	if _, ok := b.calls[id]; !ok {
		if cs := b.programCall(id, at); cs != nil {
			cs.c.Tool = tool
			return cs
		}
	}
	return b.call(id, tool, at)
}
