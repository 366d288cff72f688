package workflows

// The host side of a program (program.go): the interpreter's Start and
// Wait over the workflow. Start checks the program's own limits and runs
// the call through t.callTool on a coroutine of its own; Wait blocks the
// program's coroutine until a call ends or the program must stop. The
// order of replies is the order the calls' coroutines end in, which the
// workflow's history decides, so a replay hands the program the same
// replies in the same order.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/jsoncanon"
	"github.com/airlock-run/airlock/wasm/program/wire"
)

// programHost is the wire.Host of one running program.
type programHost struct {
	t   *task
	p   *programRun
	ctx workflow.Context // the run_program Update's
}

// askForLess ends the reason of a call refused by a program limit.
const askForLess = "ask for less (fields, filters, pages), or do the rest in another program"

// Start begins call m.ID, or refuses it at once (its reply is queued).
func (h *programHost) Start(m wire.GuestMessage) {
	t, p := h.t, h.p
	n := len(p.calls) + 1
	if m.ID != n {
		// Call IDs are the calls' idempotency keys: a guest numbering
		// them otherwise is a broken runner, which must not run tools.
		panic(fmt.Sprintf("run_program %s: the interpreter started call %d, want %d (calls are numbered from 1 in start order)", p.req.ProgramID, m.ID, n))
	}
	call := api.ProgramCall{CallID: api.ProgramCallID(p.req.ProgramID, n), Tool: m.Tool, Line: m.Line}
	refuse := func(reply string, o api.Outcome, reason string) {
		call.Outcome, call.Reason = o, reason
		p.calls = append(p.calls, call)
		p.pending = append(p.pending, n)
		p.replies = append(p.replies, wire.Reply{ID: n, Outcome: reply, Reason: reason})
	}
	where := fmt.Sprintf("call %d (%s, line %d)", n, m.Tool, m.Line)
	i, found := slices.BinarySearchFunc(p.req.Tools, m.Tool, func(tl api.ProgramTool, name string) int {
		switch {
		case tl.Name < name:
			return -1
		case tl.Name > name:
			return 1
		}
		return 0
	})
	lim := p.req.Limits
	argsErr := programArgsError(m.Args)
	switch {
	case t.programStopReason(p) != "":
		refuse(wire.ReplyStopped, api.OutcomeCancelled, p.stop)
		return
	case !found:
		refuse(string(api.OutcomeRejected), api.OutcomeRejected, fmt.Sprintf("%s: this program has no tool %q; call one of the tools it was given", where, m.Tool))
		return
	case argsErr != "" && workflow.GetVersion(h.ctx, changeProgramArgs, workflow.DefaultVersion, 1) >= 1:
		refuse(string(api.OutcomeRejected), api.OutcomeRejected, fmt.Sprintf("%s: %s; pass each argument once, by name. Nothing ran", where, argsErr))
		return
	case n > lim.MaxCalls:
		p.limit = fmt.Sprintf("%s would pass the program's limit of %d tool calls (Limits.MaxCalls); %s", where, lim.MaxCalls, askForLess)
		refuse(wire.ReplyProgramLimit, api.OutcomeLimit, p.limit)
		return
	case len(m.Args) > api.MaxArgumentBytes:
		p.limit = fmt.Sprintf("%s has %d bytes of arguments, more than the %d a task's history keeps per call; %s", where, len(m.Args), api.MaxArgumentBytes, askForLess)
		refuse(wire.ReplyProgramLimit, api.OutcomeLimit, p.limit)
		return
	case p.data+len(m.Args) > lim.MaxDataBytes:
		p.limit = fmt.Sprintf("%s would pass the program's limit of %d bytes of arguments and results (Limits.MaxDataBytes; they all land in the task's history): its calls so far moved %d bytes and this one's arguments are %d; %s",
			where, lim.MaxDataBytes, p.data, len(m.Args), askForLess)
		refuse(wire.ReplyProgramLimit, api.OutcomeLimit, p.limit)
		return
	}
	tl := p.req.Tools[i]
	p.data += len(m.Args)
	p.calls = append(p.calls, call)
	p.pending = append(p.pending, n)
	p.running++
	req := api.CallRequest{CallID: call.CallID, Tool: tl.Name, Server: tl.Server, UpstreamTool: tl.UpstreamTool,
		Spec: tl.Spec, Arguments: m.Args, Principal: t.in.Principal, Subject: p.req.Subject}
	workflow.Go(h.ctx, func(ctx workflow.Context) {
		// Another program's atomic rollback holds new calls off until it
		// is done (direct calls are refused meanwhile).
		_ = workflow.Await(ctx, func() bool { return t.rolling == nil || !t.rolling.partial })
		res, err := t.callTool(ctx, req)
		if err != nil {
			res = api.CallResult{Outcome: api.OutcomeFailed, Reason: fmt.Sprintf("airlock failed to run %s: %v", req.Tool, err)}
		}
		c := &p.calls[n-1]
		c.Outcome, c.Reason, c.Labels = res.Outcome, res.Reason, res.Labels
		p.data += len(res.Result)
		p.running--
		p.replies = append(p.replies, programReply(n, res))
	})
}

// Wait hands the program the next ended call's reply, or tells it to stop.
func (h *programHost) Wait() wire.Reply {
	t, p := h.t, h.p
	if len(p.pending) == 0 {
		p.stop = "the interpreter waited for a call with none running (an airlock bug)"
		return wire.Reply{Outcome: wire.ReplyStopped, Reason: p.stop}
	}
	err := workflow.Await(h.ctx, func() bool { return len(p.replies) > 0 || t.programStopReason(p) != "" })
	if err != nil && p.stop == "" {
		p.stop = "the task was cancelled"
	}
	if p.stop != "" {
		return wire.Reply{ID: p.pending[0], Outcome: wire.ReplyStopped, Reason: p.stop}
	}
	r := p.replies[0]
	p.replies = p.replies[1:]
	p.pending = slices.DeleteFunc(p.pending, func(id int) bool { return id == r.ID })
	return r
}

// programReply is a call's end as the program sees it: its outcome and
// reason, and its value: the tool's structured content when it has one,
// else its text, as a JSON string.
func programReply(n int, res api.CallResult) wire.Reply {
	r := wire.Reply{ID: n, Outcome: string(res.Outcome), Reason: res.Reason}
	if len(res.Result) > 0 {
		r.Result = resultValue(res.Result)
	}
	if res.Outcome == api.OutcomeToolError && r.Reason == "" {
		r.Reason = res.Tool + " reported an error: " + api.ResultText(res.Result)
	}
	return r
}

// resultValue is the value of an MCP CallToolResult for a program.
func resultValue(raw json.RawMessage) json.RawMessage {
	var r struct {
		Structured json.RawMessage `json:"structuredContent"`
	}
	if json.Unmarshal(raw, &r) == nil && len(r.Structured) > 0 && string(r.Structured) != "null" {
		return r.Structured
	}
	b, _ := json.Marshal(api.ResultText(raw))
	return b
}

// programArgsError says why a call's arguments cannot be judged and sent
// as they are ("" when they can): they must be one JSON object that names
// each key once, at any depth.
func programArgsError(args json.RawMessage) string {
	b := bytes.TrimSpace(args)
	if len(b) == 0 || b[0] != '{' {
		return "its arguments are not a JSON object"
	}
	if err := jsoncanon.CheckDuplicates(b); err != nil {
		return "its arguments are not valid: " + err.Error()
	}
	return ""
}
