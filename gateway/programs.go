package gateway

// Code mode (issue 27): airlock_run_program. The agent sends a Starlark
// program; the gateway makes it an api.ProgramRequest (the tools the
// caller may call, as module.function, with the limits of the
// configuration) and sends it to the caller's task as the Update
// api.UpdateRunProgram, the way a call goes (sendUpdate, the same task
// and ownership checks); the task runs it, every tool call through its
// call pipeline, and the result is rendered as one tool result.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/jsoncanon"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/wasm/program/engine"
)

// ToolRunProgram runs a program in the caller's task.
const ToolRunProgram = "airlock_run_program"

// ProgramOptions configure airlock_run_program (Options.Programs; the
// configuration's programs section). Nil: no airlock_run_program.
type ProgramOptions struct {
	// MaxDescriptionBytes bounds the tool's description (rules and
	// stubs); past it the stubs are left out and the description points
	// at airlock_find_tools (default DefaultProgramDescriptionBytes).
	MaxDescriptionBytes int
	// Limits are every program's limits; zero fields are
	// api.DefaultProgramLimits'.
	Limits api.ProgramLimits
}

// DefaultProgramDescriptionBytes is ProgramOptions.MaxDescriptionBytes'
// default.
const DefaultProgramDescriptionBytes = 8192

// ProgramRules are the head of airlock_run_program's description: what
// the tool does, then the language's rules (engine.Rules, kept beside the
// interpreter that enforces them).
var ProgramRules = programIntro + engine.Rules

const programIntro = `Runs a program in your task and returns only its result and what it printed. ` +
	`Every tool call in it is checked, recorded and may wait for a person's approval, exactly like a direct call. ` +
	`Pass key for a retry that must not run twice; atomic: true rolls the program's changes back if it fails.
`

// programsOn reports whether airlock_run_program is offered.
func (g *Gateway) programsOn() bool { return g.opts.Programs != nil }

// programLimits are the effective limits: the configured ones over
// api.DefaultProgramLimits, field by field.
func (g *Gateway) programLimits() api.ProgramLimits {
	if g.opts.Programs == nil {
		return api.DefaultProgramLimits
	}
	return g.opts.Programs.Limits.Or(api.DefaultProgramLimits)
}

// programInputSchema is airlock_run_program's input.
const programInputSchema = `{"type":"object","required":["source"],"additionalProperties":false,"properties":{` +
	`"source":{"type":"string","description":"the Starlark program"},` +
	`"atomic":{"type":"boolean","description":"roll back the program's own changes, newest first, if it fails"},` +
	`"key":{"type":"string","description":"idempotency key: the same key returns the first run's result instead of running again"}}}`

func (g *Gateway) addProgramTool() {
	if !g.programsOn() {
		return
	}
	// The description is each caller's (programDescription): tools/list
	// rewrites it (withProgramDescription).
	g.server.AddTool(&mcp.Tool{Name: ToolRunProgram, Title: "airlock: run a program",
		Description: ProgramRules, InputSchema: json.RawMessage(programInputSchema)}, g.runProgramTool)
}

// programTable is the tool table of a program of pr: the upstream tools
// pr may call now (what tools/list shows it, less those blocked by their
// pin or outside its token's scopes, which a direct call would refuse in
// the gateway), named as programTools names them.
func (g *Gateway) programTable(extra *mcp.RequestExtra, pr *identity.Principal) []api.ProgramTool {
	entries := g.catalogEntries(extra)
	tools := make([]api.ProgramTool, 0, len(entries))
	for name, e := range entries {
		if e.blocked {
			continue
		}
		if d := g.opts.Directory; d != nil && d.ScopeError(pr, name) != nil {
			continue
		}
		tools = append(tools, api.ProgramTool{Name: name, Server: e.server, UpstreamTool: e.upstream, Spec: api.SpecFor(e.decl)})
	}
	return programTools(tools)
}

// programStubs are the stub lines of a table, in its order. Each entry's
// stub tail is made once per definition (tools/list asks for them all each
// time), outside the lock.
func (g *Gateway) programStubs(tools []api.ProgramTool) []string {
	g.mu.Lock()
	entries := make([]*toolEntry, len(tools))
	tails := make([]string, len(tools))
	for i, t := range tools {
		if e := g.tools[t.Name]; e != nil {
			entries[i], tails[i] = e, e.stubTail
		}
	}
	g.mu.Unlock()
	out := make([]string, 0, len(tools))
	for i, t := range tools {
		switch e := entries[i]; {
		case tails[i] != "":
		case e == nil || e.def == nil:
			tails[i] = stubTail("", nil, nil)
		default:
			tails[i] = stubTail(e.def.Description, e.def.InputSchema, e.def.OutputSchema)
			g.mu.Lock()
			e.stubTail = tails[i]
			g.mu.Unlock()
		}
		out = append(out, stubLine(t.Module, t.Function, tails[i]))
	}
	return out
}

// programNoStubs ends a description whose stubs do not fit.
const programNoStubs = "\n\nYour tools are too many to list here: call " + ToolFindTools + ` with format "stubs" to find tools, and call them as the stubs it returns show.`

// programDescription is airlock_run_program's description for the caller:
// the rules and the stubs of its tools, or the rules and where to find
// them when they would make it longer than MaxDescriptionBytes.
func (g *Gateway) programDescription(extra *mcp.RequestExtra) string {
	pr, err := g.principalFor(extra)
	if err != nil {
		return ProgramRules
	}
	stubs := g.programStubs(g.programTable(extra, pr))
	limit := DefaultProgramDescriptionBytes
	if o := g.opts.Programs; o != nil && o.MaxDescriptionBytes > 0 {
		limit = o.MaxDescriptionBytes
	}
	desc := ProgramRules + "\n\nTools:\n" + strings.Join(stubs, "\n")
	if len(stubs) == 0 {
		desc = ProgramRules + "\n\nYou may call no tools now."
	}
	if len(desc) > limit {
		return ProgramRules + programNoStubs
	}
	return desc
}

// withProgramDescription gives airlock_run_program in a tools/list answer
// the caller's description (a copy: the registered tool is shared).
func (g *Gateway) withProgramDescription(extra *mcp.RequestExtra, tools []*mcp.Tool) []*mcp.Tool {
	if !g.programsOn() {
		return tools
	}
	for i, t := range tools {
		if t.Name == ToolRunProgram {
			d := *t
			d.Description = g.programDescription(extra)
			tools[i] = &d
		}
	}
	return tools
}

// runProgramIn is airlock_run_program's input.
type runProgramIn struct {
	Source string
	Atomic bool
	Key    string
}

// maxProgramKey bounds a program's idempotency key: its ID
// (ProgramIDForKey) is at most the 200 bytes the task takes.
const maxProgramKey = 200 - len(programPrefix+"k-")

// parseProgramInput reads airlock_run_program's arguments strictly: an
// object of exactly the members source, atomic and key (spelled so), of
// their types, each once; a source of at most maxSource bytes.
func parseProgramInput(raw json.RawMessage, maxSource int) (runProgramIn, error) {
	var in runProgramIn
	if len(strings.TrimSpace(string(raw))) == 0 || string(raw) == "null" {
		return in, errors.New(`source is required: pass {"source": "<your Starlark program>"}`)
	}
	if err := jsoncanon.CheckDuplicates(raw); err != nil {
		var dup *jsoncanon.DuplicateKeyError
		if errors.As(err, &dup) {
			if dup.Path == "$" {
				return in, fmt.Errorf("%s is given twice; give each argument once", truncateUTF8(dup.Key, 64))
			}
			return in, fmt.Errorf("the key %q is given twice at %s; give each key once", truncateUTF8(dup.Key, 64), dup.Path)
		}
		return in, fmt.Errorf("the arguments are not JSON: %v", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return in, fmt.Errorf(`the arguments must be an object {"source": ..., "atomic": ..., "key": ...}: %v`, err)
	}
	for k := range m {
		switch k {
		case "source", "atomic", "key":
		default:
			return in, fmt.Errorf("%q is not an argument of %s; its arguments are source, atomic and key", truncateUTF8(k, 64), ToolRunProgram)
		}
	}
	src, ok := m["source"]
	if !ok {
		return in, errors.New(`source is required: pass {"source": "<your Starlark program>"}`)
	}
	if err := strictString(src, &in.Source); err != nil {
		return in, fmt.Errorf("source must be a string holding the program: %v", err)
	}
	if len(in.Source) > maxSource {
		return in, fmt.Errorf("source is %d bytes, more than the %d a program may have; write a shorter program, or split the work into several", len(in.Source), maxSource)
	}
	if strings.TrimSpace(in.Source) == "" {
		return in, errors.New("source is empty: write the program to run")
	}
	if a, ok := m["atomic"]; ok && string(a) != "null" {
		if string(a) != "true" && string(a) != "false" {
			return in, fmt.Errorf("atomic must be true or false, got %s", truncateUTF8(string(a), 32))
		}
		in.Atomic = string(a) == "true"
	}
	if k, ok := m["key"]; ok && string(k) != "null" {
		if err := strictString(k, &in.Key); err != nil {
			return in, fmt.Errorf("key must be a string: %v", err)
		}
		if err := checkProgramKey(in.Key); err != nil {
			return in, err
		}
	}
	return in, nil
}

// strictString decodes a JSON string, and nothing else.
func strictString(raw json.RawMessage, dst *string) error {
	if len(raw) == 0 || raw[0] != '"' {
		return fmt.Errorf("got %s", truncateUTF8(string(raw), 32))
	}
	return json.Unmarshal(raw, dst)
}

// checkProgramKey: a key names one program (ProgramIDForKey), so it
// holds no "/" (which separates a program's ID from its calls' numbers,
// api.ProgramCallID), and, as the task requires of a program's ID, no
// space or control character.
func checkProgramKey(k string) error {
	switch {
	case k == "":
		return errors.New("key is empty; omit it, or give a unique key")
	case len(k) > maxProgramKey:
		return fmt.Errorf("key is longer than %d bytes; use a shorter unique key", maxProgramKey)
	case strings.ContainsRune(k, '/'):
		return errors.New(`key must not contain "/"; use another separator, e.g. "-"`)
	case !utf8.ValidString(k):
		return errors.New("key is not valid UTF-8")
	case strings.ContainsFunc(k, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return errors.New(`key must not contain spaces or control characters; use letters, digits and punctuation, e.g. "report-2026-01"`)
	}
	return nil
}

// programPrefix starts every program ID: a call's ID never does ("call-",
// or api.CallIDForKey's "k-"), so neither a program's ID nor its calls'
// (api.ProgramCallID) can be a direct call's.
const programPrefix = "prog-"

// ProgramIDForKey is the ID of the program a client named with key:
// "prog-k-<key>".
func ProgramIDForKey(key string) string { return programPrefix + api.CallIDForKey(key) }

func newProgramID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return programPrefix + hex.EncodeToString(b[:])
}

// isProgramID reports whether id is a program's (not one of its calls').
func isProgramID(id string) bool {
	return strings.HasPrefix(id, programPrefix) && !strings.Contains(id, "/")
}

// runProgramTool is airlock_run_program's handler.
func (g *Gateway) runProgramTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	pr, err := g.principalFor(req.Extra)
	if err != nil {
		return errorResult("", "", err.Error()), nil
	}
	if d := g.opts.Directory; d != nil {
		// As admitCall, for airlock_call_tool's way here too.
		if err := d.ScopeError(pr, ToolRunProgram); err != nil {
			return errorResult("", "", err.Error()+". Nothing ran"), nil
		}
	}
	limits := g.programLimits()
	in, err := parseProgramInput(req.Params.Arguments, limits.MaxSourceBytes)
	if err != nil {
		return errorResult("", "", err.Error()+". Nothing ran."), nil
	}
	if in.Key == "" && req.Params.Meta != nil {
		// A client that sets every retry's _meta key gets the same.
		if k, ok := req.Params.Meta[MetaIdempotencyKey].(string); ok && k != "" {
			if err := checkProgramKey(k); err != nil {
				return errorResult("", "", "_meta."+MetaIdempotencyKey+": "+err.Error()), nil
			}
			in.Key = k
		}
	}
	tref, err := g.taskFor(ctx, req, pr.Name, taskHint{key: in.Key})
	if err != nil {
		return errorResult("", "", err.Error()), nil
	}
	taskID := tref.id
	programID := newProgramID()
	if in.Key != "" {
		programID = ProgramIDForKey(in.Key)
	}
	preq := api.ProgramRequest{ProgramID: programID, Source: in.Source, Principal: pr.Name,
		Tools: g.programTable(req.Extra, pr), Limits: limits, Atomic: in.Atomic}
	if preq.Subject, err = g.programSubject(ctx, taskID, preq.Tools, pr); err != nil {
		return errorResult(taskID, "", err.Error()), nil
	}
	if preq.Subject == nil {
		preq.Subject = g.programConsent(taskID, preq.Tools, pr) // useroauth.go
	}
	if b, err := json.Marshal(preq); err != nil || len(b) > api.MaxArgumentBytes {
		// The tool table is the bulk: the task must be able to record it.
		return errorResult(taskID, "", fmt.Sprintf("the program and its table of %d tools are more than the %d bytes a task can record; nothing ran. Ask for fewer tools (a role's tools allowlist).", len(preq.Tools), api.MaxArgumentBytes)), nil
	}
	log := g.log.With().Str("task", taskID).Str("program", programID).Logger()
	traceCall(ctx, taskID, programID, pr.Name)
	tin, start := g.taskStart(taskID, tref.client, pr)
	if !tref.exists && tref.named {
		if err := g.claimTask(ctx, start, tin); err != nil {
			return errorResult(taskID, "", err.Error()), nil
		}
	}
	// The whole inline wait, even for a client that declared MCP Tasks
	// (whose calls wait TaskHandleWait for a task handle, mcptasks.go): a
	// program is no MCP Task yet, and its pending answer points at
	// airlock_await.
	wctx, cancel := context.WithTimeout(ctx, g.opts.InlineWait)
	defer cancel()
	stop := g.progress(ctx, req, taskID, programID, func() bool { return false })
	defer stop()
	// The client's notifications/cancelled for this tools/call stops the
	// program in its task (as a call's cancels the call, relay.go).
	if req.Session != nil {
		marks := g.cancelMarks(req.Session)
		seen, answered := marks.count(), make(chan struct{})
		defer close(answered)
		go g.watchCancel(ctx, marks, seen, answered, func() {
			log.Info().Msg("program cancelled by the client")
			g.stopProgramInTask(taskID, programID, pr.Name)
		})
	}
	var res api.ProgramResult
	release, busy := g.admit(wctx, pr.Name, taskID, log) // admission.go
	if busy != nil {
		metrics.Calls.WithLabelValues(ToolRunProgram, OutcomeError).Inc()
		return busyResult(taskID, busy), nil
	}
	defer release()
	s := g.sendUpdate(wctx, taskUpdate{taskID: taskID, id: programID, name: api.UpdateRunProgram, arg: preq, start: start, in: tin}, &res)
	if busy := serverBusy(s.err, taskID); busy != nil { // serverbusy.go
		metrics.Calls.WithLabelValues(ToolRunProgram, OutcomeError).Inc()
		return busyResult(taskID, busy), nil
	}
	if err := s.err; err != nil {
		if rejectedAs(err, api.ErrTypeContinuingAsNew) != nil && ctx.Err() == nil {
			metrics.Calls.WithLabelValues(ToolRunProgram, OutcomeError).Inc()
			return errorResult(taskID, "", g.notStartedDraining(ctx, taskID, ToolRunProgram, programID)), nil
		}
		if ran := rejectedAs(err, api.ErrTypeProgramRanBefore); ran != nil {
			return g.programRanBefore(ctx, taskID, programID, ran, log), nil
		}
		if waitedOut(wctx, err) && ctx.Err() == nil {
			log.Info().Msg("program pending past the inline wait")
			metrics.Calls.WithLabelValues(ToolRunProgram, OutcomePending).Inc()
			return g.pendingProgram(ctx, taskID, programID), nil
		}
		log.Warn().Err(err).Msg("program not completed")
		metrics.Calls.WithLabelValues(ToolRunProgram, OutcomeError).Inc()
		return errorResult(taskID, programID, g.explain(ctx, wctx, taskID, programID, ToolRunProgram, err)), nil
	}
	log.Info().Str("outcome", string(res.Outcome)).Int("calls", len(res.Calls)).Msg("program finished")
	metrics.Calls.WithLabelValues(ToolRunProgram, string(res.Outcome)).Inc()
	return g.programResult(taskID, programID, res), nil
}

// programRanBefore answers the retry of a program that ran in an earlier
// run of its task, which no longer holds its result: with that result,
// read from the history of the run that ran it (the rejection names it),
// byte for byte; else with the task's pointer to it, saying why the
// gateway could not read it.
func (g *Gateway) programRanBefore(ctx context.Context, taskID, programID string, ran *temporal.ApplicationError, log zerolog.Logger) *mcp.CallToolResult {
	var r api.Repeat
	why := "the task did not say which run ran it"
	if ran.HasDetails() && ran.Details(&r) == nil && r.RunID != "" {
		res, err := g.programInRun(ctx, taskID, r.RunID, programID)
		if err == nil {
			log.Info().Str("run", r.RunID).Str("outcome", string(res.Outcome)).Msg("program retry answered from the history of the run that ran it")
			metrics.Calls.WithLabelValues(ToolRunProgram, string(res.Outcome)).Inc()
			return g.programResult(taskID, programID, res)
		}
		why = err.Error()
	}
	log.Info().Str("run", r.RunID).Str("reason", why).Msg("program retry answered without its result")
	metrics.Calls.WithLabelValues(ToolRunProgram, OutcomeError).Inc()
	return errorResult(taskID, programID, fmt.Sprintf("%s (The gateway could not read that result itself: %s.)", ran.Error(), why))
}

// pendingProgram answers a program that outlived the inline wait: what it
// waits for (one of its calls' approval, if so) and how to collect it.
func (g *Gateway) pendingProgram(ctx context.Context, task, program string) *mcp.CallToolResult {
	sc := map[string]any{"status": "pending", "task": task, "call": program}
	text := fmt.Sprintf("The program is still running in task %s. Call %s with %s to collect its result; it will not run twice.", task, ToolAwait, awaitArgs(task, program))
	if a := g.pendingApproval(ctx, task, program); a != nil { // one of its calls'
		text = fmt.Sprintf("The program waits for approval of its call %s (%s) by %q (request %s: %d of %d approvals, expires %s). Call %s with %s to wait for its result, or %s to check on it; it will not run twice.",
			a.CallID, a.Tool, a.Group, a.ID, a.Approvals(), a.Quorum, a.ExpiresAt.UTC().Format(time.RFC3339), ToolAwait, awaitArgs(task, program), ToolStatus)
		sc["approval_request"], sc["group"], sc["expires_at"] = a.ID, a.Group, a.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: sc,
		Meta: mcp.Meta{MetaTask: task, MetaCall: program}}
}

// awaitProgram is airlock_await of a program: it waits up to wait for the
// program's Update and renders its result.
func (g *Gateway) awaitProgram(ctx context.Context, task, program string, wait time.Duration) *mcp.CallToolResult {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if res, ok := g.programOfEarlierRun(wctx, task, program); ok {
		return res
	}
	h := g.opts.Temporal.GetWorkflowUpdateHandle(client.GetWorkflowUpdateHandleOptions{WorkflowID: task, UpdateID: program})
	var res api.ProgramResult
	if err := h.Get(wctx, &res); err != nil {
		if waitedOut(wctx, err) && ctx.Err() == nil {
			return g.pendingProgram(ctx, task, program)
		}
		return errorResult(task, program, fmt.Sprintf("no result for program %s in task %s: %v (see %s)", program, task, err, ToolStatus))
	}
	return g.programResult(task, program, res)
}

// programOfEarlierRun answers airlock_await of a program that finished in
// an earlier run of its task, whose Update the current run does not have
// (waiting on it would wait out the whole wait): from the result the task
// carries, else from the history of the run that ran it. false: the task
// has no record of it finishing (it runs, or it is unknown; or a worker
// too old to answer the query), and the caller waits on its Update.
func (g *Gateway) programOfEarlierRun(ctx context.Context, task, program string) (*mcp.CallToolResult, bool) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := g.opts.Temporal.QueryWorkflow(qctx, task, "", api.QueryProgram, program)
	var done api.ProgramDone
	if err != nil || v == nil || v.Get(&done) != nil {
		return nil, false
	}
	switch {
	case done.Result != nil:
		return g.programResult(task, program, *done.Result), true
	case done.Repeat != nil && done.Repeat.RunID != "":
		res, err := g.programInRun(ctx, task, done.Repeat.RunID, program)
		if err != nil {
			return errorResult(task, program, fmt.Sprintf("program %s ran in run %d (%s) of task %s, which no longer holds its result, and the gateway could not read it from that run's history: %v. See airlock audit show --run %s %s",
				program, done.Repeat.Run, done.Repeat.RunID, task, err, done.Repeat.RunID, task)), true
		}
		return g.programResult(task, program, res), true
	}
	return nil, false
}

// programCallOut is one call in a rendered program result.
type programCallOut struct {
	Tool    string      `json:"tool"`
	Line    int         `json:"line,omitempty"`
	Outcome api.Outcome `json:"outcome"`
}

// renderProgram renders a program's result: its value as JSON, then what
// it printed under a "printed:" line; an error result naming the outcome
// and the line when it did not end ok. structuredContent holds it all.
func renderProgram(task, program string, res api.ProgramResult) *mcp.CallToolResult {
	if res.Withheld != "" { // the worker's content guard withheld it (guard.go)
		calls := make([]programCallOut, 0, len(res.Calls))
		for _, c := range res.Calls {
			calls = append(calls, programCallOut{Tool: c.Tool, Line: c.Line, Outcome: c.Outcome})
		}
		sc := map[string]any{"outcome": res.Outcome, "result": nil, "output": "", "error": res.Withheld, "line": res.Line, "calls": calls,
			"rolledBack": append([]string{}, res.RolledBack...)}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: res.Withheld}}, StructuredContent: sc,
			Meta: mcp.Meta{MetaTask: task, MetaCall: program}}
	}
	result := json.RawMessage("null")
	if r := strings.TrimSpace(string(res.Result)); r != "" {
		if json.Valid([]byte(r)) {
			result = json.RawMessage(r)
		} else if res.Outcome == api.ProgramOK {
			res.Outcome, res.Error = api.ProgramError, "airlock could not decode the program's result"
		}
	}
	calls := make([]programCallOut, 0, len(res.Calls))
	for _, c := range res.Calls {
		calls = append(calls, programCallOut{Tool: c.Tool, Line: c.Line, Outcome: c.Outcome})
	}
	rolledBack := res.RolledBack
	if rolledBack == nil {
		rolledBack = []string{}
	}
	sc := map[string]any{"outcome": res.Outcome, "result": result, "output": res.Output, "error": res.Error,
		"line": res.Line, "calls": calls, "rolledBack": rolledBack}
	var text string
	ok := res.Outcome == api.ProgramOK
	if ok {
		text = string(result)
	} else {
		outcome := res.Outcome
		if outcome == "" {
			outcome = api.ProgramError
		}
		text = fmt.Sprintf("program %s", outcome)
		if res.Line > 0 {
			text += fmt.Sprintf(" at line %d", res.Line)
		}
		text += ": " + res.Error
		if len(res.RolledBack) > 0 {
			text += fmt.Sprintf("\nrolled back: %s", strings.Join(res.RolledBack, ", "))
		}
	}
	if res.Output != "" {
		text += "\nprinted:\n" + res.Output
	}
	return &mcp.CallToolResult{IsError: !ok, Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: sc,
		Meta: mcp.Meta{MetaTask: task, MetaCall: program}}
}

// describeProgram is airlock_status of a program: its calls the task
// shows (running, waiting for approval, finished recently).
func describeProgram(st api.Status, approvals []api.ApprovalRequest, program string) string {
	of := func(call string) bool {
		p, _, ok := api.SplitProgramCallID(call)
		return ok && p == program
	}
	var lines []string
	for _, a := range approvals {
		if of(a.CallID) && a.State == api.ApprovalPending {
			lines = append(lines, fmt.Sprintf("- call %s (%s) waits for approval by %q: request %s, %d of %d approvals, expires %s",
				a.CallID, a.Tool, a.Group, a.ID, a.Approvals(), a.Quorum, a.ExpiresAt.UTC().Format(time.RFC3339)))
		}
	}
	for _, id := range st.InFlight {
		if of(id) {
			lines = append(lines, fmt.Sprintf("- call %s is running", id))
		}
	}
	for _, r := range st.Recent {
		if of(r.CallID) {
			lines = append(lines, fmt.Sprintf("- call %s (%s): %s", r.CallID, r.Tool, r.Outcome))
		}
	}
	if len(lines) == 0 {
		return fmt.Sprintf("task %s shows no calls of program %s (running without a call yet, finished long ago, or never sent). Call %s with {\"call\": %q} for its result.",
			st.TaskID, program, ToolAwait, program)
	}
	return fmt.Sprintf("program %s in task %s:\n%s\nCall %s with {\"call\": %q} for its result.", program, st.TaskID, strings.Join(lines, "\n"), ToolAwait, program)
}
