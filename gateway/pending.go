package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/tick"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/client"
)

// Built-in tools: an agent whose call outlived the inline wait collects it
// with these. They act on the caller's own task only.
const (
	ToolStatus = "airlock_status"
	ToolAwait  = "airlock_await"
)

type statusIn struct {
	Call string `json:"call,omitempty" jsonschema:"a call ID from a result's _meta airlock.dev/call; omit it for the whole task"`
	Task string `json:"task,omitempty" jsonschema:"the task, from a result's _meta airlock.dev/task, when this request names no task otherwise (no session or Airlock-Task header)"`
}

type awaitIn struct {
	Call           string `json:"call" jsonschema:"the call ID from the pending result's _meta airlock.dev/call"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"how long to wait (default and maximum: the gateway's inline wait)"`
	Task           string `json:"task,omitempty" jsonschema:"the call's task, from the pending result's _meta airlock.dev/task, when this request names no task otherwise (no session or Airlock-Task header)"`
}

func (g *Gateway) addBuiltins() {
	mcp.AddTool(g.server, &mcp.Tool{Name: ToolStatus, Title: "airlock: task status",
		Description: "Shows this task's calls and the approvals they wait for, or one call's state. Read-only.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, g.statusTool)
	mcp.AddTool(g.server, &mcp.Tool{Name: ToolAwait, Title: "airlock: await a call",
		Description: "Waits for a call that is still pending (e.g. waiting for a person's approval) and returns its result. Never runs the call again.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}}, g.awaitTool)
}

// noCallsYet answers a read of a task that does not exist (yet): nothing
// of it is read, since by the time a query reached it, it could be
// another principal's.
func noCallsYet(task, call string) *mcp.CallToolResult {
	msg := fmt.Sprintf("task %s has no calls yet: nothing to show", task)
	if call != "" {
		msg = fmt.Sprintf("task %s has no calls yet, so no call %s", task, call)
	}
	return errorResult(task, call, msg)
}

func (g *Gateway) statusTool(ctx context.Context, req *mcp.CallToolRequest, in statusIn) (*mcp.CallToolResult, any, error) {
	pr, err := g.principalFor(req.Extra)
	if err != nil {
		return errorResult("", "", err.Error()), nil, nil
	}
	tref, err := g.taskFor(ctx, req, pr.Name, taskHint{task: in.Task, key: keyOfCall(in.Call)})
	if err != nil {
		return errorResult("", "", err.Error()), nil, nil
	}
	task := tref.id
	if !tref.exists {
		return noCallsYet(task, in.Call), nil, nil
	}
	v, err := g.opts.Temporal.QueryWorkflow(ctx, task, "", api.QueryStatus)
	var st api.Status
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil {
		return errorResult(task, "", fmt.Sprintf("task %s has no status yet (no call has been made in it, or it has ended): %v", task, err)), nil, nil
	}
	approvals := g.approvals(ctx, task)
	if isProgramID(in.Call) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: describeProgram(st, approvals, in.Call)}},
			Meta: mcp.Meta{MetaTask: task, MetaCall: in.Call}}, nil, nil
	}
	if in.Call != "" {
		text, ok := g.describeCall(st, approvals, in.Call)
		if !ok {
			// Not among the recent calls: the task's call ledger knows
			// every call it ran, in any of its runs.
			if res, found := g.finishedCall(ctx, task, in.Call, g.opts.InlineWait); found {
				text = describeFinished(in.Call, res)
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, Meta: mcp.Meta{MetaTask: task, MetaCall: in.Call}}, nil, nil
	}
	text := fmt.Sprintf("task %s (%s): %d call(s), %d running", task, st.State, st.Calls, len(st.InFlight))
	for _, a := range approvals {
		if a.State == api.ApprovalPending {
			text += fmt.Sprintf("\n- call %s (%s) waits for approval by %q: request %s, %d of %d approvals, expires %s",
				a.CallID, a.Tool, a.Group, a.ID, a.Approvals(), a.Quorum, a.ExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	for _, r := range st.Recent {
		text += fmt.Sprintf("\n- call %s (%s): %s", r.CallID, r.Tool, r.Outcome)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, Meta: mcp.Meta{MetaTask: task}}, nil, nil
}

// describeCall describes a call from the task's status and approvals;
// false when neither lists it.
func (g *Gateway) describeCall(st api.Status, approvals []api.ApprovalRequest, call string) (string, bool) {
	for _, r := range st.Recent {
		if r.CallID == call {
			s := fmt.Sprintf("call %s (%s) finished: %s", call, r.Tool, r.Outcome)
			if r.Reason != "" {
				s += ": " + r.Reason
			}
			return s + ". Call " + ToolAwait + " to get its result.", true
		}
	}
	for _, a := range approvals {
		if a.CallID == call && a.State == api.ApprovalPending {
			return fmt.Sprintf("call %s (%s) waits for approval by %q: request %s, %d of %d approvals, expires %s",
				call, a.Tool, a.Group, a.ID, a.Approvals(), a.Quorum, a.ExpiresAt.UTC().Format(time.RFC3339)), true
		}
	}
	for _, id := range st.InFlight {
		if id == call {
			return fmt.Sprintf("call %s is running", call), true
		}
	}
	return fmt.Sprintf("task %s has no call %s", st.TaskID, call), false
}

// describeFinished describes a call the task's ledger answered for
// (QueryCall): its outcome, its run, and how to get its result (from the
// run's history when the task no longer holds it, history.go).
func describeFinished(call string, res api.CallResult) string {
	what := "call " + call
	if res.Tool != "" {
		what += " (" + res.Tool + ")"
	}
	outcome := string(res.Outcome)
	if outcome == "" {
		outcome = "not recorded"
	}
	s := fmt.Sprintf("%s finished: %s", what, outcome)
	if r := res.Repeat; r != nil && r.Run > 0 {
		s += fmt.Sprintf(", in run %d (%s) of the task", r.Run, r.RunID)
	}
	if r := res.Repeat; r != nil && !r.Held && r.RunID == "" {
		// Reason says where the result is recorded; the gateway cannot
		// read it (the run is not known).
		return s + ". " + res.Reason
	}
	if r := res.Repeat; r != nil && !r.Held {
		return s + ". Call " + ToolAwait + " to get its result, which airlock reads from that run's history."
	}
	return s + ". Call " + ToolAwait + " to get its result."
}

func (g *Gateway) awaitTool(ctx context.Context, req *mcp.CallToolRequest, in awaitIn) (*mcp.CallToolResult, any, error) {
	pr, err := g.principalFor(req.Extra)
	if err != nil {
		return errorResult("", "", err.Error()), nil, nil
	}
	tref, err := g.taskFor(ctx, req, pr.Name, taskHint{task: in.Task, key: keyOfCall(in.Call)})
	if err != nil {
		return errorResult("", "", err.Error()), nil, nil
	}
	task := tref.id
	if in.Call == "" {
		return errorResult(task, "", "call is required: pass the call ID from the pending result's _meta "+MetaCall), nil, nil
	}
	if !tref.exists {
		return noCallsYet(task, in.Call), nil, nil
	}
	// A 2026-07-28 client answering the input-required result of an
	// earlier airlock_await brings the answers here (mrtr.go).
	resume, err := g.resumeState(req, task, pr.Name)
	if err != nil {
		return errorResult(task, in.Call, err.Error()), nil, nil
	}
	if resume != nil && resume.Call != in.Call {
		return errorResult(task, in.Call, fmt.Sprintf("requestState answers call %s, not %s; send it back with the airlock_await of that call", resume.Call, in.Call)), nil, nil
	}
	wait := g.opts.InlineWait
	if in.TimeoutSeconds > 0 && time.Duration(in.TimeoutSeconds)*time.Second < wait {
		wait = time.Duration(in.TimeoutSeconds) * time.Second
	}
	if isProgramID(in.Call) {
		// A program is an Update of its own kind (programs.go).
		return g.awaitProgram(ctx, task, in.Call, wait), nil, nil
	}
	// A finished call is answered from the task's memory: one that
	// finished in an earlier run of the task (before it continued as new)
	// is no Update of the current run, whose handle would wait for it in
	// vain.
	if res, ok := g.finishedCall(ctx, task, in.Call, wait); ok {
		return g.deliver(task, g.firstResult(ctx, task, in.Call, res)), nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	sink, unrelay := g.relayCall(ctx, req, task, in.Call, false) // this client now gets the call's upstream progress and requests
	defer unrelay()
	if resume != nil {
		sink.answered = resume.Asks
	}
	stop := g.progress(ctx, req, task, in.Call, sink.upstreamProgress.Load)
	defer stop()
	// Requests the upstream made while no client waited on the call wait
	// in its heartbeats: this airlock_await takes them.
	defer g.heartbeatProgress(ctx, req, task, in.Call, sink)()
	if resume != nil {
		if err := g.deliverAnswers(req, resume); err != nil {
			return errorResult(task, in.Call, err.Error()), nil, nil
		}
	}
	ictx, finishAsks := watchAsks(wctx, sink) // mrtr.go
	h := g.opts.Temporal.GetWorkflowUpdateHandle(client.GetWorkflowUpdateHandleOptions{WorkflowID: task, UpdateID: in.Call})
	var res api.CallResult
	err = h.Get(ictx, &res)
	if asks := finishAsks(); len(asks) > 0 {
		return g.inputRequired(task, in.Call, pr.Name, req.Params.Name, asks), nil, nil
	}
	if err != nil {
		if waitedOut(wctx, err) && ctx.Err() == nil {
			return g.pendingResult(ctx, task, in.Call, ""), nil, nil
		}
		return errorResult(task, in.Call, fmt.Sprintf("no result for call %s in task %s: %v (see %s)", in.Call, task, err, ToolStatus)), nil, nil
	}
	return g.deliver(task, res), nil, nil
}

// finishedCall asks the task (query QueryCall) for a call it has
// finished, in any of its runs; false when it does not know the call
// (running, unknown) or does not answer within wait (at most 5s).
func (g *Gateway) finishedCall(ctx context.Context, task, call string, wait time.Duration) (api.CallResult, bool) {
	qctx, cancel := context.WithTimeout(ctx, min(wait, 5*time.Second))
	defer cancel()
	var res api.CallResult
	v, err := g.opts.Temporal.QueryWorkflow(qctx, task, "", api.QueryCall, call)
	if err != nil || v.Get(&res) != nil {
		return api.CallResult{}, false
	}
	return res, true
}

// approvals reads the task's approval requests (best effort).
func (g *Gateway) approvals(ctx context.Context, task string) []api.ApprovalRequest {
	v, err := g.opts.Temporal.QueryWorkflow(ctx, task, "", api.QueryApprovals)
	if err != nil {
		return nil
	}
	var out []api.ApprovalRequest
	_ = v.Get(&out)
	return out
}

// pendingApproval is the pending approval request of call, or, for a
// program, of one of its calls.
func (g *Gateway) pendingApproval(ctx context.Context, task, call string) *api.ApprovalRequest {
	for _, a := range g.approvals(ctx, task) {
		if (a.CallID == call || a.CallID == api.ResultApprovalCallID(call) || isProgramID(call) && strings.HasPrefix(a.CallID, call+"/")) && a.State == api.ApprovalPending {
			return &a
		}
	}
	return nil
}

// awaitArgs are airlock_await's arguments for call of task, as a pending
// answer shows them: the task too, for a client whose requests name none
// (each would otherwise get a task of its own, tasklookup.go).
func awaitArgs(task, call string) string {
	b, _ := json.Marshal(struct {
		Call string `json:"call"`
		Task string `json:"task"`
	}{call, task})
	return string(b)
}

// pendingResult answers a call that outlived the inline wait: not an
// error, but a statement of what it waits for and how to collect it.
func (g *Gateway) pendingResult(ctx context.Context, task, call, tool string) *mcp.CallToolResult {
	sc := map[string]any{"status": "pending", "task": task, "call": call}
	var text string
	if a := g.pendingApproval(ctx, task, call); a != nil {
		text = fmt.Sprintf("%s is waiting for approval by %q (request %s: %d of %d approvals, expires %s). Nothing has run yet; it runs once, if approved. Call %s with %s to wait for its result, or %s to check on it.",
			a.Tool, a.Group, a.ID, a.Approvals(), a.Quorum, a.ExpiresAt.UTC().Format(time.RFC3339), ToolAwait, awaitArgs(task, call), ToolStatus)
		sc["approval_request"], sc["group"], sc["expires_at"] = a.ID, a.Group, a.ExpiresAt.UTC().Format(time.RFC3339)
	} else {
		name := tool
		if name == "" {
			name = "call " + call
		}
		text = fmt.Sprintf("%s is still running in task %s. Call %s with %s to collect its result; it will not run twice.", name, task, ToolAwait, awaitArgs(task, call))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: sc,
		Meta: mcp.Meta{MetaTask: task, MetaCall: call}}
}

// progress sends MCP progress notifications while a call waits, if the
// client asked for them (a progress token), saying what it waits for.
func (g *Gateway) progress(ctx context.Context, req *mcp.CallToolRequest, task, call string, upstreamReports func() bool) (stop func()) {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return func() {}
	}
	every := g.opts.ProgressEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	return tick.Every(ctx, every, func(n int) {
		if upstreamReports() {
			return // the upstream's own progress is relayed instead (relay.go)
		}
		msg := "running"
		if a := g.pendingApproval(ctx, task, call); a != nil {
			msg = fmt.Sprintf("waiting for approval by %q (request %s: %d of %d approvals)", a.Group, a.ID, a.Approvals(), a.Quorum)
		}
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(n), Message: msg})
	})
}
