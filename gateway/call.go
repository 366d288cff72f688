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
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/metrics"
)

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call-" + hex.EncodeToString(b[:])
}

// call runs one tools/call through the task's workflow: prepareCall,
// sendCall, answerCall.
func (g *Gateway) call(ctx context.Context, e *toolEntry, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, refusal, err := g.prepareCall(ctx, e, req)
	if refusal != nil || err != nil {
		return refusal, err
	}
	wctx, cancel := context.WithTimeout(ctx, g.inlineWait(ctx)) // mcptasks.go
	defer cancel()
	sink, unrelay := g.relayCall(ctx, req, c.taskID, c.callID, true)
	defer unrelay()
	if c.resume != nil {
		sink.answered = c.resume.Asks
	}
	stopProgress := g.progress(ctx, req, c.taskID, c.callID, sink.upstreamProgress.Load)
	defer stopProgress()
	defer g.heartbeatProgress(ctx, req, c.taskID, c.callID, sink)()
	if c.resume != nil {
		if err := g.deliverAnswers(req, c.resume); err != nil {
			return errorResult(c.taskID, c.callID, err.Error()), nil
		}
	}
	ictx, finishAsks := watchAsks(wctx, sink)                  // mrtr.go
	release, busy := g.admit(ictx, c.pr.Name, c.taskID, c.log) // admission.go
	if busy != nil {
		finishAsks()
		metrics.Calls.WithLabelValues(c.e.exposed, OutcomeError).Inc()
		return busyResult(c.taskID, busy), nil
	}
	out := g.sendCall(ictx, c)
	release()
	if busy := serverBusy(out.err, c.taskID); busy != nil { // serverbusy.go
		c.log.Info().Str("server", busy.Server).Msg("call refused: the task is busy at the server")
		finishAsks()
		metrics.Calls.WithLabelValues(c.e.exposed, OutcomeError).Inc()
		return busyResult(c.taskID, busy), nil
	}
	if asks := finishAsks(); len(asks) > 0 {
		c.log.Info().Int("requests", len(asks)).Msg("call asks the client for input (input-required)")
		return g.inputRequired(c.taskID, c.callID, c.pr.Name, req.Params.Name, asks), nil
	}
	return g.answerCall(ctx, wctx, c, out), nil
}

// preparedCall is a tools/call ready to be sent to its task.
type preparedCall struct {
	e      *toolEntry
	pr     *identity.Principal
	taskID string
	callID string
	resume *askState // the call resumed by a 2026-07-28 client's answers (mrtr.go), or nil
	creq   api.CallRequest
	in     api.TaskInput // the task's input, should the call start it
	start  client.StartWorkflowOptions
	log    zerolog.Logger
}

// prepareCall admits a tools/call (admitCall), names its task and call ID,
// reads its arguments and makes the Update and the task's start options.
// A refusal is the tool result to answer with.
func (g *Gateway) prepareCall(ctx context.Context, e *toolEntry, req *mcp.CallToolRequest) (_ *preparedCall, refusal *mcp.CallToolResult, _ error) {
	e, pr, refusal, err := g.admitCall(e, req)
	if refusal != nil || err != nil {
		return nil, refusal, err
	}
	key, _ := req.Params.Meta[MetaIdempotencyKey].(string)
	tref, err := g.taskFor(ctx, req, pr.Name, taskHint{key: key})
	if err != nil {
		return nil, errorResult("", "", err.Error()), nil
	}
	taskID := tref.id
	// A 2026-07-28 client answering an input-required result resumes the
	// call that asked (mrtr.go).
	resume, err := g.resumeState(req, taskID, pr.Name)
	if err != nil {
		return nil, errorResult(taskID, "", err.Error()), nil
	}
	callID := ""
	if resume != nil {
		callID = resume.Call
	} else if req.Params.Meta != nil {
		if k, ok := req.Params.Meta[MetaIdempotencyKey].(string); ok && k != "" {
			if len(k) > 200 {
				return nil, errorResult(taskID, "", "_meta."+MetaIdempotencyKey+" is longer than 200 characters; use a shorter unique key"), nil
			}
			callID = api.CallIDForKey(k)
		}
	}
	if callID == "" {
		callID = newCallID()
	}
	traceCall(ctx, taskID, callID, pr.Name)
	log := g.log.With().Str("task", taskID).Str("call", callID).Str("tool", e.exposed).Logger()
	args, err := callArguments(e.exposed, req.Params.Arguments)
	if err != nil {
		log.Warn().Err(err).Msg("call refused: arguments")
		return nil, errorResult(taskID, callID, err.Error()), nil
	}
	args, findings, err := g.guardArguments(e, pr.Roles, args) // guard.go: before anything records them
	if err != nil {
		return nil, errorResult(taskID, callID, err.Error()), nil
	}
	// Arguments too large for the task's history must never reach its
	// workflow. (Below that, the policy's max_arg_bytes denies them, and
	// the denial is recorded with the task.)
	if limit := api.MaxArgumentBytes; len(args) > limit {
		return nil, errorResult(taskID, callID, fmt.Sprintf("denied: the arguments of %s are %d bytes, more than the %d a task can record; nothing ran. Send less, e.g. a path instead of the content.", e.exposed, len(args), limit)), nil
	}
	c := &preparedCall{e: e, pr: pr, taskID: taskID, callID: callID, resume: resume, log: log,
		creq: api.CallRequest{
			CallID: callID, Tool: e.exposed, Server: e.server, UpstreamTool: e.upstream,
			Arguments: args, Spec: api.SpecFor(e.decl), Principal: pr.Name,
			ProgressToken: req.Params.GetProgressToken(), Findings: findings,
			ResultKey: g.resultKey(e, pr.Roles), // guard.go: guard.results: require_approval
		}}
	if c.creq.Subject, err = g.subjectFor(ctx, taskID, e.server, pr); err != nil {
		log.Warn().Err(err).Msg("call refused: cannot act as the caller upstream")
		return nil, errorResult(taskID, callID, err.Error()), nil
	}
	if refusal, err := g.userConsent(ctx, req, c); refusal != nil || err != nil { // useroauth.go
		return nil, refusal, err
	}
	c.in, c.start = g.taskStart(taskID, tref.client, pr)
	if !tref.exists && tref.named {
		// Another client may name this task too: create it before
		// sending the call (owner.go).
		if err := g.claimTask(ctx, c.start, c.in); err != nil {
			return nil, errorResult(taskID, "", err.Error()), nil
		}
	}
	return c, nil, nil
}

// admitCall settles that the caller may call e: the tool is not blocked
// by its pin (since the list was built), the principal may see it, and
// the token's scopes cover it. It returns the current entry of the tool.
func (g *Gateway) admitCall(e *toolEntry, req *mcp.CallToolRequest) (_ *toolEntry, _ *identity.Principal, refusal *mcp.CallToolResult, _ error) {
	if e.blocked { // unless `airlock manifests pin` accepted it since the list was built
		g.Refresh()
		g.mu.Lock()
		cur := g.tools[e.exposed]
		g.mu.Unlock()
		if cur == nil || cur.blocked {
			return nil, nil, errorResult("", "", e.avail), nil
		}
		e = cur
	}
	pr, err := g.principalFor(req.Extra)
	if err != nil {
		return nil, nil, errorResult("", "", err.Error()), nil
	}
	if !g.visibleTo(pr, e) {
		// A tool the caller may not call answers as one that does not
		// exist (the SDK's own answer), so names cannot be probed.
		g.log.Info().Str("principal", pr.Name).Str("tool", e.exposed).Msg("call refused: the tool is not one the principal may call")
		return nil, nil, nil, unknownTool(req.Params.Name)
	}
	if d := g.opts.Directory; d != nil {
		// The step-up check on the tool dispatched, whichever way it was
		// named (a direct call, airlock_call_tool); the HTTP edge made the
		// same check on the body (identity.Directory.ScopeError).
		if err := d.ScopeError(pr, e.exposed); err != nil {
			g.log.Info().Str("principal", pr.Name).Str("tool", e.exposed).Err(err).Msg("call refused: insufficient scope")
			metrics.AuthFailures.WithLabelValues(strconv.Itoa(http.StatusForbidden)).Inc()
			g.opts.Audit.AuthFailed(auditstream.AuthFailure{Status: http.StatusForbidden, Channel: "mcp", Principal: pr.Name, Reason: err.Error(), Method: http.MethodPost})
			return nil, nil, errorResult("", "", err.Error()+". Nothing ran"), nil
		}
	}
	return e, pr, nil, nil
}

// taskStart is the input and start options of task taskID, should a call
// of pr start it: the limits of the live configuration and of pr's roles.
func (g *Gateway) taskStart(taskID, clientName string, pr *identity.Principal) (api.TaskInput, client.StartWorkflowOptions) {
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
	return in, client.StartWorkflowOptions{
		ID:                       taskID,
		TaskQueue:                g.opts.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			api.SAPrincipal.ValueSet(pr.Name), api.SAStatus.ValueSet(api.StateRunning)),
	}
}

// sendOutcome is how sending a call ended.
type sendOutcome struct {
	res api.CallResult
	err error
	// drained: an attempt was turned away, the task moving to a new run.
	drained bool
}

// sendCall sends the call's Update until a run of the task answers it or
// ictx ends: to the run last known to be running (an attempt bounded by
// pinnedAttempt), else with Update-with-Start, and again to the next run
// while the task is continuing as new.
func (g *Gateway) sendCall(ictx context.Context, c *preparedCall) sendOutcome {
	var res api.CallResult
	s := g.sendUpdate(ictx, taskUpdate{taskID: c.taskID, id: c.callID, name: api.UpdateCallTool, arg: c.creq, start: c.start, in: c.in}, &res)
	s.res = res
	return s
}

// taskUpdate is one Update of a task, and how to start the task should it
// not run yet: a call's (api.UpdateCallTool) or a program's
// (api.UpdateRunProgram).
type taskUpdate struct {
	taskID, id, name string
	arg              any
	start            client.StartWorkflowOptions
	in               api.TaskInput
}

// sendUpdate is sendCall for any Update: its result goes to out (s.res
// is left empty).
func (g *Gateway) sendUpdate(ictx context.Context, c taskUpdate, out any) sendOutcome {
	var s sendOutcome
	for {
		var h client.WorkflowUpdateHandle
		uo := client.UpdateWorkflowOptions{
			UpdateID: c.id, WorkflowID: c.taskID, UpdateName: c.name,
			Args: []any{c.arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
		}
		if run, ok := g.running.Load(c.taskID); ok {
			uo.RunID, _ = run.(string)
			// An attempt pinned to a run is bounded: an Update admitted
			// while that run continues as new is aborted with a retryable
			// error, which the SDK retries against the same (now closed)
			// run until its context ends. Past the bound the call is sent
			// again unpinned, to whichever run is current; the same
			// Update ID joins the call if it was accepted.
			actx, acancel := context.WithTimeout(ictx, pinnedAttempt)
			h, s.err = g.opts.Temporal.UpdateWorkflow(actx, uo)
			if s.err == nil {
				s.err = h.Get(actx, out)
			}
			// Ran out of time (gRPC's own timer may report it a moment
			// before actx is marked done), not the whole wait: ictx goes on.
			stalled := s.err != nil && ictx.Err() == nil && waitedOut(actx, s.err)
			acancel()
			var nf *serviceerror.NotFound
			if errors.As(s.err, &nf) || stalled {
				// Ended (or never existed here), or the pinned attempt
				// ran out: let Update-with-Start decide, which reports
				// an ended task clearly.
				g.running.CompareAndDelete(c.taskID, run)
				continue
			}
		} else {
			// A fresh start operation each time: one may be used only once.
			startOp := g.opts.Temporal.NewWithStartWorkflowOperation(c.start, api.AgentTaskName, c.in)
			h, s.err = g.opts.Temporal.UpdateWithStartWorkflow(ictx, client.UpdateWithStartWorkflowOptions{
				StartWorkflowOperation: startOp, UpdateOptions: uo,
			})
			if s.err == nil {
				g.running.Store(c.taskID, h.RunID())
				s.err = h.Get(ictx, out)
			}
		}
		// The task is rolling over to a new run: the same Update ID goes
		// to the new run.
		if rejectedAs(s.err, api.ErrTypeContinuingAsNew) != nil {
			s.drained = true
		}
		if rejectedAs(s.err, api.ErrTypeContinuingAsNew) != nil && ictx.Err() == nil {
			select {
			case <-time.After(50 * time.Millisecond):
				continue
			case <-ictx.Done():
			}
		}
		return s
	}
}

// answerCall turns how sending a call ended into its tool result: the
// result, or that it is pending past the inline wait (wctx), has not
// started, or could not be had.
func (g *Gateway) answerCall(ctx, wctx context.Context, c *preparedCall, s sendOutcome) *mcp.CallToolResult {
	taskID, callID, tool, log := c.taskID, c.callID, c.e.exposed, c.log
	if err := s.err; err != nil {
		// The inline wait may also run out during an attempt rather than
		// between two: if the task knows nothing of the call, it did not
		// start either.
		if s.drained && waitedOut(wctx, err) && ctx.Err() == nil && !g.callKnown(ctx, taskID, callID) {
			err = temporal.NewApplicationError("the task is moving to its next run", api.ErrTypeContinuingAsNew)
		}
		if rejectedAs(err, api.ErrTypeContinuingAsNew) != nil && ctx.Err() == nil {
			// The inline wait ran out while every attempt was turned
			// away: the call never started, so it is not "running".
			log.Info().Msg("call not started: the task is still moving to its next run")
			metrics.Calls.WithLabelValues(tool, OutcomeError).Inc()
			return errorResult(taskID, "", g.notStartedDraining(ctx, taskID, tool, callID))
		}
		if waitedOut(wctx, err) && ctx.Err() == nil {
			log.Info().Msg("call pending past the inline wait")
			metrics.Calls.WithLabelValues(tool, OutcomePending).Inc()
			return g.pendingResult(ctx, taskID, callID, tool)
		}
		log.Warn().Err(err).Msg("call not completed")
		metrics.Calls.WithLabelValues(tool, OutcomeError).Inc()
		return errorResult(taskID, callID, g.explain(ctx, wctx, taskID, callID, tool, err))
	}
	// A retry of a call that ran in an earlier run of the task, whose
	// result the task no longer holds, gets that result from the run's
	// history (history.go).
	res := g.firstResult(ctx, taskID, callID, s.res)
	log.Info().Str("outcome", string(res.Outcome)).Int("attempts", res.Attempts).Msg("call finished")
	metrics.Calls.WithLabelValues(tool, string(res.Outcome)).Inc()
	countRefusal(res)             // limits.go
	return g.deliver(taskID, res) // guard.go: a held result approved
}

// pinnedAttempt bounds one attempt of a call sent to the task's last
// known run (see sendCall): past it the call is sent again to the
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
			tool, taskID, g.opts.InlineWait, callID, MetaIdempotencyKey, keyOf(callID))
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
		tool, taskID, holding, MetaIdempotencyKey, keyOf(callID))
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
		if err := decodeResult(res.Result, &r); err != nil { // result.go
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

// keyOf is the idempotency key to quote back for callID: the key it was
// made from (api.CallIDForKey), else callID itself.
func keyOf(callID string) string {
	key, _ := api.KeyOfCallID(callID)
	return key
}
