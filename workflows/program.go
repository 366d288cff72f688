package workflows

// Code mode (issue 27): the run_program Update runs an agent's Starlark
// program inside the task. The interpreter (a ProgramRunner: the wazero
// guest, or in-process Starlark in tests) runs on the Update handler's
// coroutine; every tool call it makes is one t.callTool, unchanged, on a
// coroutine of its own (program_host.go), so policy, approvals, grants,
// locks, capture, compensation and the ledger apply to it as to a direct
// call. A replay re-runs the program, and each call gets its recorded
// result back: the program is as durable as the task.
//
// Everything that steers a program travels in its ProgramRequest, which is
// in history: the source, the tool table and the limits (never the
// worker's defaults).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/wasm/program/wire"
)

// ProgramRunner runs one program: it hands req to the interpreter, which
// calls h.Start and h.Wait synchronously, on the calling goroutine (the
// workflow coroutine of the run_program Update), for each tool call, and
// returns how the program ended. It must be deterministic: given the same
// request and the same replies it makes the same calls and ends the same
// way. An error means the runner could not run the program (the guest did
// not load, the machine failed), never that the program failed.
type ProgramRunner interface {
	Run(ctx context.Context, req wire.Request, memoryBytes int64, h wire.Host) (wire.Done, error)
}

// runner holds the process's ProgramRunner (a holder, as atomic.Value
// needs one concrete type); empty: code mode is off on this worker.
var runner atomic.Pointer[runnerHolder]

type runnerHolder struct{ r ProgramRunner }

// currentRunner is the process's runner; nil: code mode is off.
func currentRunner() ProgramRunner {
	if h := runner.Load(); h != nil {
		return h.r
	}
	return nil
}

// UseProgramRunner sets the runner of this process's run_program Updates;
// the worker calls it once, before it starts polling (nil turns code mode
// off). Every worker of a task queue must run programs the same way: a
// program replays on whichever worker picks its task up.
func UseProgramRunner(r ProgramRunner) {
	if r == nil {
		runner.Store(nil)
		return
	}
	runner.Store(&runnerHolder{r})
}

// programsKept is how many finished programs the task carries across
// continue-as-new with their results, and carryProgramBudget the bytes of
// results, output and call lists it carries (newest first; an older
// program beyond it is carried without them).
const (
	programsKept       = 16
	carryProgramBudget = 256 << 10
)

// maxProgramIDBytes bounds a program's ID (it prefixes its calls' IDs).
const maxProgramIDBytes = 200

// programRun is one running program.
type programRun struct {
	req     api.ProgramRequest
	started time.Time
	calls   []api.ProgramCall // in the order they started (call n at n-1)
	running int               // calls started and not ended
	pending []int             // calls whose reply the program has not taken, by ID
	replies []wire.Reply      // ended calls' replies not yet taken, in the order they ended
	data    int               // argument and result bytes of its calls
	// stop says why the host stops the program ("": it runs); limit
	// says that a limit of the program stopped it (its timeout, or a
	// call past MaxCalls or MaxDataBytes).
	stop  string
	limit string
	// rollbacks is t.fullRollbacks when it started: a rollback of the
	// whole task since stops it.
	rollbacks int
	// timer cancels the program's timeout when it ends.
	cancelTimer workflow.CancelFunc
}

// startPrograms registers the run_program Update and the stop_program
// signal. Neither records anything until a program runs.
func (t *task) startPrograms(ctx workflow.Context) error {
	t.listenProgramStops(ctx)
	if err := workflow.SetQueryHandler(ctx, api.QueryProgram, t.programQuery); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRunProgram, t.runProgram,
		workflow.UpdateHandlerOptions{Validator: t.validateProgram})
}

// validateProgram rejects requests that cannot run before they enter
// history.
func (t *task) validateProgram(req api.ProgramRequest) error {
	if currentRunner() == nil {
		return errors.New("run_program: code mode is not enabled on this worker; call the tools directly, or ask an operator to enable code mode")
	}
	if req.Principal != "" && req.Principal != t.in.Principal {
		return fmt.Errorf("task %s belongs to another principal; run programs in your own task", t.in.TaskID)
	}
	if err := checkProgramID(req.ProgramID); err != nil {
		return err
	}
	// A program that finished in an earlier run is answered whatever the
	// task is doing, like a repeated call.
	if _, ok := t.programDone(req.ProgramID); ok {
		return nil
	}
	if t.ledger != nil && t.known(api.ProgramCallID(req.ProgramID, 1)) {
		return t.programRanBefore(req.ProgramID)
	}
	if err := checkProgramRequest(req); err != nil {
		return err
	}
	return t.takesNew()
}

// programQuery answers api.QueryProgram (a query records nothing).
func (t *task) programQuery(id string) (api.ProgramDone, error) {
	if r, ok := t.programDone(id); ok {
		return api.ProgramDone{Result: &r}, nil
	}
	if t.ledger != nil {
		if i, ok := t.seen[api.LedgerKeyOf(api.ProgramCallID(id, 1))]; ok {
			run, _ := t.ledger.Entry(i)
			return api.ProgramDone{Repeat: &api.Repeat{Run: run.N, RunID: run.ID}}, nil
		}
	}
	return api.ProgramDone{}, nil
}

// programRanBefore refuses a program that ran in an earlier run whose
// result the task no longer carries. A program runs within one run (the
// task continues as new only between programs), so the run that ran its
// first call is the run whose history records its result: the error
// names it (api.ErrTypeProgramRanBefore), and the gateway answers the
// retry with that result (gateway/history.go). A validator's rejection
// is not recorded, so what it says can change without a version.
func (t *task) programRanBefore(id string) error {
	var run api.LedgerRun
	if i, ok := t.seen[api.LedgerKeyOf(api.ProgramCallID(id, 1))]; ok {
		run, _ = t.ledger.Entry(i)
	}
	where, show := "an earlier run", "airlock audit show "+t.in.TaskID
	if run.ID != "" {
		where = fmt.Sprintf("run %d (%s)", run.N, run.ID)
		show = fmt.Sprintf("airlock audit show --run %s %s", run.ID, t.in.TaskID)
	}
	msg := fmt.Sprintf("run_program: program %s already ran in %s of task %s, and the task no longer holds its result; that run's history records it (%s). To run it again, send it with a new ProgramID",
		id, where, t.in.TaskID, show)
	return temporal.NewApplicationErrorWithOptions(msg, api.ErrTypeProgramRanBefore, temporal.ApplicationErrorOptions{
		NonRetryable: true, Details: []any{api.Repeat{Run: run.N, RunID: run.ID}}})
}

// checkProgramRequest checks what a request itself must satisfy to run:
// its limits, source and tool table (an Update's and a plan step's).
func checkProgramRequest(req api.ProgramRequest) error {
	if err := checkProgramLimits(req.Limits); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(req.Source) == "":
		return errors.New("run_program: Source is empty; send the program's Starlark source")
	case len(req.Source) > req.Limits.MaxSourceBytes:
		return fmt.Errorf("run_program: the source is %d bytes, more than the program's limit of %d (Limits.MaxSourceBytes); send a shorter program, or split the work into several programs",
			len(req.Source), req.Limits.MaxSourceBytes)
	case len(req.Inputs) > api.MaxProgramInputBytes:
		return fmt.Errorf("run_program: Inputs are %d bytes, more than the %d a program's request may hold; pass less", len(req.Inputs), api.MaxProgramInputBytes)
	case len(req.Inputs) > 0 && !isJSONObject(req.Inputs):
		return errors.New("run_program: Inputs must be one JSON object")
	}
	return checkProgramTools(req.Tools)
}

// checkProgramID: a program's ID is the prefix of its calls' IDs and the
// Update's ID; it must be short and printable.
func checkProgramID(id string) error {
	switch {
	case id == "":
		return errors.New("run_program: ProgramID is empty; set it to the program's idempotency key")
	case len(id) > maxProgramIDBytes:
		return fmt.Errorf("run_program: ProgramID is %d bytes; keep it under %d", len(id), maxProgramIDBytes)
	case !utf8.ValidString(id):
		return errors.New("run_program: ProgramID is not valid UTF-8")
	case strings.ContainsFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return fmt.Errorf("run_program: ProgramID %q holds a space or a control character; use letters, digits and punctuation", id)
	}
	return nil
}

// checkProgramLimits: the request carries the effective limits, every one
// set (a zero would leave the value to the code that replays it).
func checkProgramLimits(l api.ProgramLimits) error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxSourceBytes", int64(l.MaxSourceBytes)}, {"MaxCalls", int64(l.MaxCalls)}, {"MaxDataBytes", int64(l.MaxDataBytes)},
		{"MaxResultBytes", int64(l.MaxResultBytes)}, {"MaxPrintBytes", int64(l.MaxPrintBytes)}, {"MaxSteps", l.MaxSteps},
		{"MaxStepsBetweenCalls", l.MaxStepsBetweenCalls}, {"MaxParallel", int64(l.MaxParallel)}, {"MemoryBytes", l.MemoryBytes},
		{"Timeout", int64(l.Timeout)},
	} {
		if f.v <= 0 {
			return fmt.Errorf("run_program: Limits.%s is %d; every limit must be positive (fill them from api.DefaultProgramLimits)", f.name, f.v)
		}
	}
	return nil
}

// checkProgramTools: the tool table is sorted by Name, each name unique,
// each Module.Function unique even when case is folded (a model that
// misremembers case must not reach another tool), and every tool routed.
// Names differing only in case are two tools (the gateway's catalog may
// hold both; its naming gives the later one a function of its own).
func checkProgramTools(tools []api.ProgramTool) error {
	funcs := make(map[string]string, len(tools)) // folded module.function → name
	for i, tl := range tools {
		fn := tl.Module + "." + tl.Function
		switch {
		case tl.Name == "" || tl.Server == "" || tl.UpstreamTool == "":
			return fmt.Errorf("run_program: Tools[%d] (%q) must have Name, Server and UpstreamTool", i, tl.Name)
		case !isIdent(tl.Module) || !isIdent(tl.Function):
			return fmt.Errorf("run_program: Tools[%d] (%q) is %q; Module and Function must be identifiers (letters, digits, _)", i, tl.Name, fn)
		case starlarkKeywords[tl.Module] || starlarkKeywords[tl.Function]:
			return fmt.Errorf("run_program: Tools[%d] (%q) is %q, and a Starlark keyword cannot name a module or function; rename it (add a _ suffix)", i, tl.Name, fn)
		case i > 0 && tools[i-1].Name == tl.Name:
			return fmt.Errorf("run_program: Tools[%d]: tool %q is listed twice; list each tool once", i, tl.Name)
		case i > 0 && tools[i-1].Name > tl.Name:
			return fmt.Errorf("run_program: Tools are not sorted by Name: %q comes after %q; sort them by Name", tl.Name, tools[i-1].Name)
		}
		if prev, dup := funcs[fold(fn)]; dup {
			return fmt.Errorf("run_program: tools %q and %q are both %s (Module.Function, case folded); each function must call one tool", prev, tl.Name, fn)
		}
		funcs[fold(fn)] = tl.Name
	}
	return nil
}

// starlarkKeywords are Starlark's keywords and reserved words: a program
// could not write fs.pass(...) (lookup only).
var starlarkKeywords = map[string]bool{
	"and": true, "break": true, "continue": true, "def": true, "elif": true, "else": true, "for": true, "if": true,
	"in": true, "lambda": true, "load": true, "not": true, "or": true, "pass": true, "return": true, "while": true,
	"as": true, "assert": true, "async": true, "await": true, "class": true, "del": true, "except": true, "finally": true,
	"from": true, "global": true, "import": true, "is": true, "nonlocal": true, "raise": true, "try": true, "with": true, "yield": true,
}

func fold(s string) string { return strings.ToLower(strings.ToUpper(s)) }

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r != '_' && !(r < utf8.RuneSelf && unicode.IsLetter(r)) && !(i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// runProgram runs one program to its end. A program that ended in an
// earlier run is answered with its carried result.
func (t *task) runProgram(ctx workflow.Context, req api.ProgramRequest) (api.ProgramResult, error) {
	if res, ok := t.programDone(req.ProgramID); ok {
		return res, nil
	}
	return t.execProgram(ctx, req), nil
}

// execProgram runs req (checked) to its end on the calling coroutine:
// the run_program Update's, or a plan's for a program step (plan.go).
func (t *task) execProgram(ctx workflow.Context, req api.ProgramRequest) api.ProgramResult {
	runner := currentRunner()
	if runner == nil {
		// A worker without code mode replays a task that ran a program
		// (the validator refused new ones): its workflow task fails, and
		// a worker with code mode can take it.
		panic(fmt.Sprintf("run_program %s: code mode is not enabled on this worker, and this task runs a program", req.ProgramID))
	}
	// Marks the run as one that runs programs; a change to how the host
	// drives them (the commands per call, the replies) bumps it.
	_ = workflow.GetVersion(ctx, changeRunProgram, workflow.DefaultVersion, 1)
	now := workflow.Now(ctx)
	t.lastActivity = now
	p := &programRun{req: req, started: now, rollbacks: t.fullRollbacks}
	t.programs = append(t.programs, p)
	t.startProgramTimer(ctx, p)

	h := &programHost{t: t, p: p, ctx: ctx}
	// The interpreter needs no context of its own: the host's replies
	// stop it (stopped, program_limit), and it stops itself at its step
	// and memory limits.
	done, err := runner.Run(context.Background(), wireRequest(req), req.Limits.MemoryBytes, h)
	if err != nil {
		// The runner could not run the program: a worker's failure, not
		// the program's. Recorded as the program's outcome, it would end
		// the program for good in history, where a sound worker would run
		// it; a panic fails this workflow task instead, and Temporal
		// retries it (on another worker, or this one once it recovers),
		// replaying the calls the program made so far.
		panic(fmt.Sprintf("run_program %s: the program runner failed: %v", req.ProgramID, err))
	}

	// The calls it started and did not wait for (it ended while they
	// ran: stopped, limited, or failed in a parallel branch) end first,
	// so that its result lists their outcomes and an atomic rollback
	// sees their compensations.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.Await(dctx, func() bool { return p.running == 0 })
	p.cancelTimer()

	res := p.result(done)
	if workflow.GetVersion(ctx, changeProgramGuard, workflow.DefaultVersion, 1) >= 1 {
		res = t.guardProgram(dctx, res) // guard.go: before the outcome is recorded
	}
	if req.Atomic && res.Outcome != api.ProgramOK && compensationsOn(dctx) {
		res.RolledBack = t.rollbackProgram(dctx, p)
	}
	t.programs = slices.DeleteFunc(t.programs, func(q *programRun) bool { return q == p })
	t.programsDone = append(t.programsDone, res)
	if len(t.programsDone) > programsKept {
		t.programsDone = slices.Delete(t.programsDone, 0, len(t.programsDone)-programsKept)
	}
	t.lastActivity = workflow.Now(dctx)
	observeProgram(dctx, res, t.lastActivity.Sub(p.started))
	return res
}

// startProgramTimer stops p at its next call once its Timeout has passed.
func (t *task) startProgramTimer(ctx workflow.Context, p *programRun) {
	tctx, cancel := workflow.WithCancel(ctx)
	p.cancelTimer = cancel
	timer := workflow.NewTimer(tctx, p.req.Limits.Timeout)
	workflow.Go(tctx, func(gctx workflow.Context) {
		if timer.Get(gctx, nil) != nil {
			return // the program ended first
		}
		why := fmt.Sprintf("the program ran for its whole timeout of %s (Limits.Timeout), approval waits included, and was stopped; do less in one program, or split it", p.req.Limits.Timeout)
		t.stopProgram(gctx, p, why, true)
	})
}

// wireRequest is what the interpreter gets of a request.
func wireRequest(req api.ProgramRequest) wire.Request {
	tools := make([]wire.Tool, len(req.Tools))
	for i, tl := range req.Tools {
		tools[i] = wire.Tool{Name: tl.Name, Module: tl.Module, Function: tl.Function}
	}
	l := req.Limits
	return wire.Request{ProgramID: req.ProgramID, Source: req.Source, Tools: tools, Limits: wire.Limits{
		MaxResultBytes: l.MaxResultBytes, MaxPrintBytes: l.MaxPrintBytes, MaxSteps: l.MaxSteps,
		MaxStepsBetweenCalls: l.MaxStepsBetweenCalls, MaxParallel: l.MaxParallel,
	}, Inputs: req.Inputs}
}

// result is the program's result from how the interpreter says it ended;
// where the host stopped it, the host's cause decides the outcome.
func (p *programRun) result(d wire.Done) api.ProgramResult {
	res := api.ProgramResult{ProgramID: p.req.ProgramID, Outcome: api.ProgramOutcome(d.Outcome), Result: d.Result,
		Output: d.Output, Error: d.Error, Line: d.Line, Steps: d.Steps, Calls: slices.Clone(p.calls)}
	switch res.Outcome {
	case api.ProgramOK, api.ProgramError, api.ProgramInvalid, api.ProgramLimit, api.ProgramStopped:
	default:
		res.Outcome, res.Error = api.ProgramError, fmt.Sprintf("the interpreter ended the program with an unknown outcome %q (an airlock bug); %s", d.Outcome, d.Error)
	}
	switch {
	case p.limit != "":
		res.Outcome = api.ProgramLimit
		if res.Error == "" {
			res.Error = p.limit
		}
	case p.stop != "":
		res.Outcome = api.ProgramStopped
		if res.Error == "" {
			res.Error = p.stop
		}
	}
	if res.Outcome == api.ProgramOK && len(res.Result) > p.req.Limits.MaxResultBytes {
		res.Outcome, res.Result = api.ProgramLimit, nil
		res.Error = fmt.Sprintf("the program's result is %d bytes, more than its limit of %d (Limits.MaxResultBytes); return less (fields, filters, a summary)", len(d.Result), p.req.Limits.MaxResultBytes)
	}
	if res.Outcome != api.ProgramOK {
		res.Result = nil
	}
	return res
}

// programDone finds a finished program's result (this run's, or carried).
func (t *task) programDone(id string) (api.ProgramResult, bool) {
	for i := len(t.programsDone) - 1; i >= 0; i-- {
		if t.programsDone[i].ProgramID == id {
			return t.programsDone[i], true
		}
	}
	return api.ProgramResult{}, false
}

// programOf names the running program a call belongs to and the line
// that made it ("" when it is no program's).
func (t *task) programOf(callID string) (string, int) {
	id, n, ok := api.SplitProgramCallID(callID)
	if !ok {
		return "", 0
	}
	for _, p := range t.programs {
		if p.req.ProgramID == id && n <= len(p.calls) {
			return id, p.calls[n-1].Line
		}
	}
	return "", 0
}

// programStatus lists the running programs.
func (t *task) programStatus() []api.ProgramStatus {
	var out []api.ProgramStatus
	for _, p := range t.programs {
		out = append(out, api.ProgramStatus{ProgramID: p.req.ProgramID, Calls: len(p.calls), Started: p.started})
	}
	return out
}

// carriedPrograms are the finished programs for the next run: the newest
// programsKept, their results, output and calls kept newest first within
// carryProgramBudget; an older one is carried with its outcome and a note
// of where its result is.
func (t *task) carriedPrograms() []api.ProgramResult {
	out := slices.Clone(t.programsDone)
	if len(out) > programsKept {
		out = out[len(out)-programsKept:]
	}
	budget := carryProgramBudget
	for i := len(out) - 1; i >= 0; i-- {
		n := programSize(out[i])
		if n <= budget {
			budget -= n
			continue
		}
		r := &out[i]
		r.Result, r.Output, r.Calls, r.RolledBack = nil, "", nil, nil
		if len(r.Error) > 1024 {
			r.Error = r.Error[:1024]
		}
		r.Error = strings.TrimSpace(r.Error + fmt.Sprintf(" (program %s ended %s in an earlier run of task %s; its result was too large to carry into this run and is in that run's history: airlock audit show %s)",
			r.ProgramID, r.Outcome, t.in.TaskID, t.in.TaskID))
	}
	return out
}

// programSize is about what a result adds to the carried state.
func programSize(r api.ProgramResult) int {
	n := len(r.Result) + len(r.Output) + len(r.Error)
	for _, c := range r.Calls {
		n += len(c.CallID) + len(c.Tool) + len(c.Reason) + 32
	}
	for _, id := range r.RolledBack {
		n += len(id)
	}
	return n
}

// listenProgramStops serves SignalStopProgram (a StopProgram, or a
// program ID alone): the program it names is stopped at its next call,
// and its running calls are cancelled.
func (t *task) listenProgramStops(ctx workflow.Context) {
	ch := workflow.GetSignalChannel(ctx, api.SignalStopProgram)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var raw json.RawMessage
			if !ch.Receive(ctx, &raw) {
				return
			}
			// A StopProgram, or just the program's ID.
			var s api.StopProgram
			if json.Unmarshal(raw, &s.ProgramID) != nil {
				_ = json.Unmarshal(raw, &s)
			}
			if s.ProgramID == "" {
				continue
			}
			for _, p := range t.programs {
				if p.req.ProgramID != s.ProgramID {
					continue
				}
				why := "an operator stopped the program"
				if s.By != "" {
					why = s.By + " stopped the program"
				}
				if s.Reason != "" {
					why += ": " + s.Reason
				}
				t.stopProgram(ctx, p, why, false)
			}
		}
	})
}

// stopProgram stops p at its next call, for why (a limit when limit is
// set), and cancels its running calls as SignalCancelCall would.
func (t *task) stopProgram(ctx workflow.Context, p *programRun, why string, limit bool) {
	if p.stop != "" {
		return
	}
	p.stop = why
	if limit {
		p.limit = why
	}
	for _, n := range p.pending {
		c := p.calls[n-1]
		if c.Outcome == "" { // still running
			t.cancelCall(ctx, c.CallID, "its program was stopped")
		}
	}
}

// programStopReason says why p must stop now ("": it may go on): the host
// stopped it, or the task is being cancelled, finished or rolled back.
func (t *task) programStopReason(p *programRun) string {
	why := ""
	switch {
	case p.stop != "":
		return p.stop
	case t.canceled:
		why = "the task was cancelled"
	case t.finish || t.state == api.StateFinished:
		why = "the task is finishing"
	case t.state == api.StateRollbackFailed:
		why = fmt.Sprintf("task %s could not be rolled back completely; an operator must retry the rollback or finish the task", t.in.TaskID)
	case t.rolling != nil && !t.rolling.partial, t.fullRollbacks != p.rollbacks:
		why = "the task was rolled back"
	case t.state != api.StateRunning:
		why = "the task has ended (" + t.state + ")"
	}
	p.stop = why
	return why
}

// rollbackProgram rolls an atomic program's own compensable calls back,
// newest first, through the task's rollback (a failure leaves the task in
// rollback_failed, like any rollback's); it returns the call IDs undone.
func (t *task) rollbackProgram(ctx workflow.Context, p *programRun) []string {
	own := func(callID string) bool {
		id, _, ok := api.SplitProgramCallID(callID)
		return ok && id == p.req.ProgramID
	}
	rb := t.rollbackOf(ctx, api.RollbackRequest{By: "program " + p.req.ProgramID,
		Reason: "the atomic program " + p.req.ProgramID + " did not end ok"}, "", own)
	var ids []string
	for _, e := range rb.Compensated {
		ids = append(ids, e.CallID)
	}
	return ids
}

// isJSONObject reports whether b is one valid JSON object.
func isJSONObject(b json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil && m != nil
}
