package gateway

// A tools/call runs as an Update on its task's workflow: call prepares
// the request (the caller, the task, the call ID, the arguments), sends
// it (Update-with-Start, or an Update pinned to the run last seen) and
// answers with the result, a pending result past the inline wait, or words
// that say why there is none.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/metrics"
)

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call-" + hex.EncodeToString(b[:])
}

// call runs one tools/call through the task's workflow.
func (g *Gateway) call(ctx context.Context, e *toolEntry, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if e.blocked { // unless `airlock manifests pin` accepted it since the list was built
		g.Refresh()
		g.mu.Lock()
		cur := g.tools[e.exposed]
		g.mu.Unlock()
		if cur == nil || cur.blocked {
			return errorResult("", "", e.avail), nil
		}
		e = cur
	}
	pr, err := g.principalFor(req.Extra)
	if err != nil {
		return errorResult("", "", err.Error()), nil
	}
	if !g.visibleTo(pr, e) {
		// A tool the caller may not call answers as one that does not
		// exist (the SDK's own answer), so names cannot be probed.
		g.log.Info().Str("principal", pr.Name).Str("tool", e.exposed).Msg("call refused: the tool is not one the principal may call")
		return nil, unknownTool(req.Params.Name)
	}
	if d := g.opts.Directory; d != nil {
		// The step-up check on the tool dispatched, whichever way it was
		// named (a direct call, airlock_call_tool); the HTTP edge made the
		// same check on the body (identity.Directory.ScopeError).
		if err := d.ScopeError(pr, e.exposed); err != nil {
			g.log.Info().Str("principal", pr.Name).Str("tool", e.exposed).Err(err).Msg("call refused: insufficient scope")
			metrics.AuthFailures.WithLabelValues(strconv.Itoa(http.StatusForbidden)).Inc()
			g.opts.Audit.AuthFailed(auditstream.AuthFailure{Status: http.StatusForbidden, Channel: "mcp", Principal: pr.Name, Reason: err.Error(), Method: http.MethodPost})
			return errorResult("", "", err.Error()+". Nothing ran"), nil
		}
	}
	tref, err := g.taskFor(ctx, req, pr.Name)
	if err != nil {
		return errorResult("", "", err.Error()), nil
	}
	taskID, clientName := tref.id, tref.client
	// A 2026-07-28 client answering an input-required result resumes the
	// call that asked (mrtr.go).
	resume, err := g.resumeState(req, taskID, pr.Name)
	if err != nil {
		return errorResult(taskID, "", err.Error()), nil
	}
	callID := ""
	if resume != nil {
		callID = resume.Call
	} else if req.Params.Meta != nil {
		if k, ok := req.Params.Meta[MetaIdempotencyKey].(string); ok && k != "" {
			if len(k) > 200 {
				return errorResult(taskID, "", "_meta."+MetaIdempotencyKey+" is longer than 200 characters; use a shorter unique key"), nil
			}
			callID = "k-" + k
		}
	}
	if callID == "" {
		callID = newCallID()
	}
	traceCall(ctx, taskID, callID, pr.Name)
	args, err := callArguments(e.exposed, req.Params.Arguments)
	if err != nil {
		log := g.log.With().Str("task", taskID).Str("call", callID).Str("tool", e.exposed).Logger()
		log.Warn().Err(err).Msg("call refused: arguments")
		return errorResult(taskID, callID, err.Error()), nil
	}
	// Arguments too large for the task's history must never reach its
	// workflow. (Below that, the policy's max_arg_bytes denies them, and
	// the denial is recorded with the task.)
	if limit := api.MaxArgumentBytes; len(args) > limit {
		return errorResult(taskID, callID, fmt.Sprintf("denied: the arguments of %s are %d bytes, more than the %d a task can record; nothing ran. Send less, e.g. a path instead of the content.", e.exposed, len(args), limit)), nil
	}
	log := g.log.With().Str("task", taskID).Str("call", callID).Str("tool", e.exposed).Logger()

	creq := api.CallRequest{
		CallID: callID, Tool: e.exposed, Server: e.server, UpstreamTool: e.upstream,
		Arguments: args, Spec: api.SpecFor(e.decl), Principal: pr.Name,
		ProgressToken: req.Params.GetProgressToken(),
	}
	live := g.cur()
	in := api.TaskInput{
		TaskID: taskID, Principal: pr.Name, Client: clientName,
		Identity: &api.Identity{Name: pr.Name, Roles: pr.Roles, Permissions: pr.Permissions,
			DataLevel: string(pr.DataLevel), SlackUserID: pr.SlackUserID, AllowTools: pr.AllowTools},
		Limits:         api.Limits{MaxCalls: live.MaxCalls, IdleTimeout: live.IdleTimeout, ContinueAsNewAfter: g.opts.ContinueAsNewAfter},
		RollbackOnDeny: live.RollbackOnDeny, RollbackNotify: live.RollbackNotify,
		State: live.State, // task-state
	}
	if pr.MaxCalls > 0 {
		in.Limits.MaxCalls = pr.MaxCalls
	}
	in.Quota = taskQuota(live, pr) // limits.go
	deadline := live.DeadlineAfter
	if pr.Deadline > 0 {
		deadline = pr.Deadline
	}
	if deadline > 0 {
		in.Limits.Deadline = time.Now().Add(deadline).UTC()
	}
	startOpts := client.StartWorkflowOptions{
		ID:                       taskID,
		TaskQueue:                g.opts.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			api.SAPrincipal.ValueSet(pr.Name), api.SAStatus.ValueSet(api.StateRunning)),
	}

	if !tref.exists && tref.named {
		// Another client may name this task too: create it before
		// sending the call (owner.go).
		if err := g.claimTask(ctx, startOpts, in); err != nil {
			return errorResult(taskID, "", err.Error()), nil
		}
	}

	wctx, cancel := context.WithTimeout(ctx, g.inlineWait(ctx)) // mcptasks.go
	defer cancel()
	sink, unrelay := g.relayCall(ctx, req, taskID, callID, true)
	defer unrelay()
	if resume != nil {
		sink.answered = resume.Asks
	}
	stopProgress := g.progress(ctx, req, taskID, callID, sink.upstreamProgress.Load)
	defer stopProgress()
	defer g.heartbeatProgress(ctx, req, taskID, callID, sink)()
	if resume != nil {
		if err := g.deliverAnswers(req, resume); err != nil {
			return errorResult(taskID, callID, err.Error()), nil
		}
	}
	ictx, finishAsks := watchAsks(wctx, sink) // mrtr.go
	var res api.CallResult
	drained := false // an attempt was turned away: the task is moving to a new run
	moved := false   // an attempt waited past pinnedAttempt and the call was sent again
	for {
		var h client.WorkflowUpdateHandle
		uo := client.UpdateWorkflowOptions{
			UpdateID: callID, WorkflowID: taskID, UpdateName: api.UpdateCallTool,
			Args: []any{creq}, WaitForStage: client.WorkflowUpdateStageCompleted,
		}
		if run, ok := g.running.Load(taskID); ok {
			uo.RunID, _ = run.(string)
			// An attempt pinned to a run is bounded: an Update admitted
			// while that run continues as new is aborted with a retryable
			// error, which the SDK retries against the same (now closed)
			// run until its context ends. Past the bound the call is sent
			// again unpinned, to whichever run is current; the same
			// Update ID joins the call if it was accepted.
			actx, acancel := context.WithTimeout(ictx, pinnedAttempt)
			h, err = g.opts.Temporal.UpdateWorkflow(actx, uo)
			if err == nil {
				err = h.Get(actx, &res)
			}
			// Ran out of time (gRPC's own timer may report it a moment
			// before actx is marked done), not the whole wait: ictx goes on.
			stalled := err != nil && ictx.Err() == nil && waitedOut(actx, err)
			acancel()
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) || stalled {
				// Ended (or never existed here), or the pinned attempt
				// ran out: let Update-with-Start decide, which reports
				// an ended task clearly.
				g.running.CompareAndDelete(taskID, run)
				moved = moved || stalled
				continue
			}
		} else {
			// A fresh start operation each time: one may be used only once.
			startOp := g.opts.Temporal.NewWithStartWorkflowOperation(startOpts, api.AgentTaskName, in)
			h, err = g.opts.Temporal.UpdateWithStartWorkflow(ictx, client.UpdateWithStartWorkflowOptions{
				StartWorkflowOperation: startOp, UpdateOptions: uo,
			})
			if err == nil {
				g.running.Store(taskID, h.RunID())
				err = h.Get(ictx, &res)
			}
		}
		// The task is rolling over to a new run: the same Update ID goes
		// to the new run.
		if rejectedAs(err, api.ErrTypeContinuingAsNew) != nil {
			drained = true
		}
		if rejectedAs(err, api.ErrTypeContinuingAsNew) != nil && ictx.Err() == nil {
			select {
			case <-time.After(50 * time.Millisecond):
				continue
			case <-ictx.Done():
			}
		}
		break
	}
	if asks := finishAsks(); len(asks) > 0 {
		log.Info().Int("requests", len(asks)).Msg("call asks the client for input (input-required)")
		return g.inputRequired(taskID, callID, pr.Name, req.Params.Name, asks), nil
	}
	if err != nil {
		// The inline wait may also run out during an attempt rather than
		// between two: if the task knows nothing of the call, it did not
		// start either.
		if drained && waitedOut(wctx, err) && ctx.Err() == nil && !g.callKnown(ctx, taskID, callID) {
			err = temporal.NewApplicationError("the task is moving to its next run", api.ErrTypeContinuingAsNew)
		}
		if rejectedAs(err, api.ErrTypeContinuingAsNew) != nil && ctx.Err() == nil {
			// The inline wait ran out while every attempt was turned
			// away: the call never started, so it is not "running".
			log.Info().Msg("call not started: the task is still moving to its next run")
			metrics.Calls.WithLabelValues(e.exposed, OutcomeError).Inc()
			return errorResult(taskID, "", g.notStartedDraining(ctx, taskID, e.exposed, callID)), nil
		}
		if waitedOut(wctx, err) && ctx.Err() == nil {
			log.Info().Msg("call pending past the inline wait")
			metrics.Calls.WithLabelValues(e.exposed, OutcomePending).Inc()
			return g.pendingResult(ctx, taskID, callID, e.exposed), nil
		}
		log.Warn().Err(err).Msg("call not completed")
		metrics.Calls.WithLabelValues(e.exposed, OutcomeError).Inc()
		return errorResult(taskID, callID, g.explain(ctx, wctx, taskID, callID, e.exposed, err)), nil
	}
	if r := res.Repeat; moved && r != nil && !r.Held && r.RunID != "" {
		// This send waited in a run that has continued as new since, and
		// the call ran there (through this send or a concurrent one of
		// the same key); the run that answered no longer holds the
		// result, that run's history does. A plain retry is answered by
		// the task as it is (README: what "never runs twice" covers).
		if full, ok := g.resultInRun(ctx, taskID, r.RunID, callID); ok {
			full.Repeat = &api.Repeat{Run: r.Run, RunID: r.RunID, Held: true}
			res = full
		}
	}
	log.Info().Str("outcome", string(res.Outcome)).Int("attempts", res.Attempts).Msg("call finished")
	metrics.Calls.WithLabelValues(e.exposed, string(res.Outcome)).Inc()
	countRefusal(res) // limits.go
	return toMCP(taskID, res), nil
}

// pinnedAttempt bounds one attempt of a call sent to the task's last
// known run (see the call loop): past it the call is sent again to the
// current run. Calls that take longer only lose the saving of naming the run.
// A variable for tests.
var pinnedAttempt = 5 * time.Second

// waitedOut reports whether err means the inline wait ran out (the SDK may
// report its own "timeout waiting for update" just before our deadline).
func waitedOut(wctx context.Context, err error) bool {
	var upd *client.WorkflowUpdateServiceTimeoutOrCanceledError
	if wctx.Err() != nil || errors.As(err, &upd) {
		return true
	}
	// gRPC reports the deadline from its own timer, which may fire a moment
	// before the context's marks it done.
	d, ok := wctx.Deadline()
	if !ok || time.Until(d) > 100*time.Millisecond {
		return false
	}
	var dl *serviceerror.DeadlineExceeded
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &dl) || status.Code(err) == codes.DeadlineExceeded
}

// explain turns a failure to get a call's result into words the model (and
// the person behind it) can act on.
func (g *Gateway) explain(ctx, wctx context.Context, taskID, callID, tool string, err error) string {
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &started):
		return fmt.Sprintf("task %s has ended; reconnect without the %s header to start a new task", taskID, HeaderTask)
	case ctx.Err() != nil:
		return fmt.Sprintf("the call %s was abandoned by the client; it may still run in task %s", callID, taskID)
	case wctx.Err() != nil:
		return fmt.Sprintf("%s is still running in task %s after %s (call %s). Call the tool again with _meta {%q: %q} to collect its result without running it twice.",
			tool, taskID, g.opts.InlineWait, callID, MetaIdempotencyKey, strings.TrimPrefix(callID, "k-"))
	}
	if fin := rejectedAs(err, api.ErrTypeFinishing); fin != nil {
		return fin.Message()
	}
	return fmt.Sprintf("airlock could not run %s in task %s: %v", tool, taskID, err)
}

// callKnown reports whether task has call in flight, waiting for approval
// or finished (it was admitted by some run).
func (g *Gateway) callKnown(ctx context.Context, task, call string) bool {
	if g.pendingApproval(ctx, task, call) != nil {
		return true
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if v, err := g.opts.Temporal.QueryWorkflow(qctx, task, "", api.QueryStatus); err == nil {
		var st api.Status
		if v.Get(&st) == nil && slices.Contains(st.InFlight, call) {
			return true
		}
	}
	_, done := g.finishedCall(ctx, task, call, time.Second)
	return done
}

// notStartedDraining explains a call turned away for as long as the
// inline wait because its task is moving to a new run (continue-as-new),
// which waits for the calls in flight to finish, such as one waiting for
// approval.
func (g *Gateway) notStartedDraining(ctx context.Context, taskID, tool, callID string) string {
	holding := "the calls in flight to finish"
	for _, a := range g.approvals(ctx, taskID) {
		if a.State == api.ApprovalPending {
			holding = fmt.Sprintf("the calls in flight to finish, among them %s (call %s), which waits for approval by %q (request %s)", a.Tool, a.CallID, a.Group, a.ID)
			break
		}
	}
	return fmt.Sprintf("%s has not run: task %s is moving to a new run, which waits for %s. Call the tool again with _meta {%q: %q} once that is done: it runs once.",
		tool, taskID, holding, MetaIdempotencyKey, strings.TrimPrefix(callID, "k-"))
}

// rejectedAs returns the application error of type errType with which the
// task's call_tool validator rejected an Update, or nil.
func rejectedAs(err error, errType string) *temporal.ApplicationError {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == errType {
		return appErr
	}
	return nil
}

// toMCP renders a workflow call result as an MCP tool result.
func toMCP(taskID string, res api.CallResult) *mcp.CallToolResult {
	switch res.Outcome {
	case api.OutcomeOK, api.OutcomeToolError:
		var r mcp.CallToolResult
		if err := json.Unmarshal(res.Result, &r); err != nil {
			return errorResult(taskID, res.CallID, fmt.Sprintf("airlock could not decode the result of %s: %v", res.Tool, err))
		}
		if r.Meta == nil {
			r.Meta = mcp.Meta{}
		}
		r.Meta[MetaTask] = taskID
		r.Meta[MetaCall] = res.CallID
		if r.Content == nil {
			r.Content = []mcp.Content{}
		}
		return &r
	}
	r := errorResult(taskID, res.CallID, res.Reason)
	limitMeta(r, res.Limit) // limits.go
	return r
}

func errorResult(taskID, callID, msg string) *mcp.CallToolResult {
	r := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}, Meta: mcp.Meta{}}
	if taskID != "" {
		r.Meta[MetaTask] = taskID
	}
	if callID != "" {
		r.Meta[MetaCall] = callID
	}
	return r
}
