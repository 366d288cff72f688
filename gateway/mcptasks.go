package gateway

// Pending calls as MCP Tasks (the io.modelcontextprotocol/tasks extension of
// protocol 2026-07-28). A client that declares the extension in a
// tools/call's per-request capabilities gets, when the call has no result
// within TaskHandleWait (it waits for a person's approval, or runs long), a
// task handle instead of airlock's pending result: resultType "task" and a
// taskId, which is "<task>~<call>", the call's approval request ID. The
// handle is durable because everything it names is in Temporal: tasks/get
// on any replica, before or after a restart, reads the call from its task.
//
// The go-sdk v1.8.0 has no hook for methods it does not know (it answers
// them -32601 before any middleware), so tasks/get, tasks/update and
// tasks/cancel are answered by the HTTP router (replica.go) from the
// request's Mcp-Method header, beside the go-sdk handlers: no fork.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
)

// ExtTasks is the identifier of the MCP Tasks extension.
const ExtTasks = "io.modelcontextprotocol/tasks"

// TaskHandleWait is how long a call of a client that declared the Tasks
// extension waits for its result before it is answered with a task handle.
const TaskHandleWait = time.Second

// taskResultRetention is how long, past an approval request's expiry, the
// ttlMs of a tool-approval handle says its result stays retrievable: the
// task keeps it for as long as its run (and Temporal's retention) lasts.
const taskResultRetention = 24 * time.Hour

// taskPollInterval is the pollIntervalMs suggested to clients.
const taskPollInterval = time.Second

const metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"

// Task methods of the extension.
const (
	methodTasksGet    = "tasks/get"
	methodTasksUpdate = "tasks/update"
	methodTasksCancel = "tasks/cancel"
)

type inlineWaitKey struct{}

// inlineWait is how long a call waits for its result before answering
// that it is pending.
func (g *Gateway) inlineWait(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(inlineWaitKey{}).(time.Duration); ok && d > 0 && d < g.opts.InlineWait {
		return d
	}
	return g.opts.InlineWait
}

// taskState is the Task shape of the extension (a CreateTaskResult when
// ResultType is "task", a tasks/get result when it is "complete").
type taskState struct {
	mcp.ResultBase
	ResultType     string           `json:"resultType"`
	TaskID         string           `json:"taskId"`
	Status         string           `json:"status"`
	StatusMessage  string           `json:"statusMessage,omitempty"`
	CreatedAt      string           `json:"createdAt"`
	LastUpdatedAt  string           `json:"lastUpdatedAt"`
	TTLMs          *int64           `json:"ttlMs"`
	PollIntervalMs int64            `json:"pollIntervalMs,omitempty"`
	Result         *json.RawMessage `json:"result,omitempty"`
	// InputRequests, with status input_required, are the call's upstream
	// requests waiting for the client's answer (tasks/update; mrtr.go).
	InputRequests mcp.InputRequestMap `json:"inputRequests,omitempty"`
}

// declaresTasks reports whether a request's per-request capabilities
// include the Tasks extension.
func declaresTasks(meta mcp.Meta) bool {
	var caps struct {
		Extensions map[string]any `json:"extensions"`
	}
	raw, err := json.Marshal(meta[metaClientCapabilities])
	if err != nil || json.Unmarshal(raw, &caps) != nil {
		return false
	}
	_, ok := caps.Extensions[ExtTasks]
	return ok
}

// tasksMiddleware answers a pending tools/call of a client that declared
// the Tasks extension with a task handle, and adds what the approval
// extensions it declared say (toolapproval.go).
func (g *Gateway) tasksMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ctr, ok := req.(*mcp.CallToolRequest)
		if !ok || method != "tools/call" || ctr.Params == nil {
			return next(ctx, method, req)
		}
		ext, jerr := declaredApprovalExts(ctr.Params.Meta)
		if jerr != nil {
			return nil, jerr
		}
		if !ext.tasks || slices.Contains([]string{ToolStatus, ToolAwait, ToolRollback}, ctr.Params.Name) {
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.CallToolResult); ok && err == nil && ext.any() {
				g.decorateDenied(ctx, r, ext)
			}
			return res, err
		}
		res, err := next(context.WithValue(ctx, inlineWaitKey{}, TaskHandleWait), method, req)
		r, ok := res.(*mcp.CallToolResult)
		if err != nil || !ok {
			return res, err
		}
		if r.IsError {
			if ext.any() {
				g.decorateDenied(ctx, r, ext)
			}
			return res, err
		}
		sc, _ := r.StructuredContent.(map[string]any)
		task, _ := r.Meta[MetaTask].(string)
		call, _ := r.Meta[MetaCall].(string)
		if sc["status"] != "pending" || task == "" || call == "" {
			return res, err
		}
		st, jerr := g.taskOfCall(ctx, task, call, ext)
		if jerr != nil {
			return res, nil // the pending result still tells the client what to do
		}
		st.ResultType = "task"
		if ext.approval {
			if st.Meta == nil {
				st.Meta = mcp.Meta{}
			}
			st.Meta[MetaRelatedTask] = map[string]any{"taskId": st.TaskID}
		}
		return st, nil
	}
}

// taskOfCall reads the state of call in task from the task. A call only
// moves forward (in flight, possibly waiting for approval, then finished),
// and the task answers one query at a time, so a call that is not in
// flight when asked is looked for among the finished ones once more: it
// may have finished between the two queries.
//
// ext is what the asking request declared of the approval extensions
// (toolapproval.go): with none, the state is today's.
func (g *Gateway) taskOfCall(ctx context.Context, task, call string, ext approvalExts) (*taskState, *jsonrpc.Error) {
	now := time.Now().UTC().Format(time.RFC3339)
	st := &taskState{ResultType: "complete", TaskID: api.RequestID(task, call), CreatedAt: now, LastUpdatedAt: now,
		PollIntervalMs: taskPollInterval.Milliseconds()}
	finished := func() (bool, *jsonrpc.Error) {
		res, ok := g.finishedCall(ctx, task, call, 5*time.Second)
		if !ok {
			return false, nil
		}
		r := g.deliver(task, res)
		st.Status = terminalStatus(res.Outcome)
		if ext.any() {
			decorateFinished(r, task, res, ext)
			st.Status = approvalStatus(res, ext)
		}
		b, err := json.Marshal(r)
		if err != nil {
			return true, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		raw := json.RawMessage(b)
		st.Result = &raw
		st.StatusMessage = fmt.Sprintf("%s: %s", res.Tool, res.Outcome)
		return true, nil
	}
	if ok, jerr := finished(); ok {
		return st, jerr
	}
	v, err := g.opts.Temporal.QueryWorkflow(ctx, task, "", api.QueryStatus)
	var s api.Status
	if err == nil && v.Get(&s) == nil && slices.Contains(s.InFlight, call) {
		if a := g.pendingApproval(ctx, task, call); a != nil {
			// A person decides, not the client: the call is working (the
			// extension's input_required asks the client for input).
			st.Status = "working"
			st.CreatedAt = a.RequestedAt.UTC().Format(time.RFC3339)
			st.StatusMessage = fmt.Sprintf("%s is waiting for approval by %q (request %s: %d of %d approvals, expires %s); nothing has run yet",
				a.Tool, a.Group, a.ID, a.Approvals(), a.Quorum, a.ExpiresAt.UTC().Format(time.RFC3339))
			if ext.approval {
				// SEP-2848: the envelope on the handle and on every
				// tasks/get while it waits; the handle's lifetime covers
				// the request's expiry (ttlMs from createdAt).
				ttl := a.ExpiresAt.Sub(a.RequestedAt).Milliseconds() + taskResultRetention.Milliseconds()
				st.TTLMs = &ttl
				st.Meta = mcp.Meta{MetaAuthorization: pendingEnvelope(),
					MetaModelResponse: fmt.Sprintf("%s is waiting for approval and has not run; check back on task %s.", a.Tool, st.TaskID)}
			}
			return st, nil
		}
		st.Status, st.StatusMessage = "working", "running"
		if reqs := g.pendingInputs(ctx, task, call); len(reqs) > 0 { // mrtr.go
			st.Status, st.InputRequests = "input_required", reqs
			st.StatusMessage = fmt.Sprintf("running; its upstream asks the client (%d request(s)): answer with tasks/update", len(reqs))
		}
		return st, nil
	}
	if ok, jerr := finished(); ok {
		return st, jerr
	}
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("task %s~%s: reading task %s: %v", task, call, task, err)}
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("task %s~%s: task %s has no call %s in flight or finished", task, call, task, call)}
}

// serveTasks answers a tasks/* request of the Tasks extension.
func (g *Gateway) serveTasks(w http.ResponseWriter, r *http.Request, principal string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			TaskID string `json:"taskId"`
		} `json:"params"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || len(msg.ID) == 0 {
		writeRPC(w, nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "not a JSON-RPC request"})
		return
	}
	if msg.Method != r.Header.Get("Mcp-Method") {
		writeRPC(w, msg.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("the Mcp-Method header %q does not match the method %q", r.Header.Get("Mcp-Method"), msg.Method)})
		return
	}
	task, call, ok := api.SplitRequestID(msg.Params.TaskID)
	if !ok || !taskIDAllowed(task, principal) {
		writeRPC(w, msg.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("params.taskId %q is not a task handle of this server", msg.Params.TaskID)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if jerr := g.checkTaskOwner(ctx, task, principal); jerr != nil {
		writeRPC(w, msg.ID, nil, jerr)
		return
	}
	var decl struct {
		Params struct {
			Meta mcp.Meta `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &decl)
	ext, jerr := declaredApprovalExts(decl.Params.Meta)
	if jerr != nil {
		writeRPC(w, msg.ID, nil, jerr)
		return
	}
	switch msg.Method {
	case methodTasksGet:
		st, jerr := g.taskOfCall(ctx, task, call, ext)
		writeRPC(w, msg.ID, st, jerr)
	case methodTasksUpdate:
		var upd struct {
			Params struct {
				InputResponses map[string]json.RawMessage `json:"inputResponses"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &upd)
		writeRPC(w, msg.ID, map[string]any{}, g.updateTask(ctx, task, call, upd.Params.InputResponses))
	default: // tasks/cancel
		st, jerr := g.cancelTask(ctx, task, call, ext)
		writeRPC(w, msg.ID, st, jerr)
	}
}

// terminalStatus is the extension's status of a finished call: cancelled
// (the client cancelled it, or its approval request was withdrawn),
// completed (it ran, even if its tool reported an error), failed (anything else: denied, refused, its tool
// failed or its outcome is unknown; the result says which).
func terminalStatus(o api.Outcome) string {
	switch o {
	case api.OutcomeCancelled:
		return "cancelled"
	case api.OutcomeOK, api.OutcomeToolError:
		return "completed" // a tool's own error is its result (isError)
	}
	return "failed"
}

// cancelTask answers tasks/cancel: the task is told (api.SignalCancelCall,
// recorded in its history): an approval request is withdrawn, a running
// call's activity cancelled; the answer is the call's state once the task
// has recorded it (or still working, if that takes longer). A call that
// has finished cannot be cancelled.
func (g *Gateway) cancelTask(ctx context.Context, task, call string, ext approvalExts) (*taskState, *jsonrpc.Error) {
	st, jerr := g.taskOfCall(ctx, task, call, ext)
	if jerr != nil {
		return nil, jerr
	}
	if st.Status != "working" && st.Status != "input_required" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("task %s~%s is already %s", task, call, st.Status)}
	}
	if err := g.opts.Temporal.SignalWorkflow(ctx, task, "", api.SignalCancelCall,
		api.CancelCall{CallID: call, Reason: "the client sent tasks/cancel"}); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("telling task %s to cancel call %s: %v", task, call, err)}
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if st, jerr = g.taskOfCall(ctx, task, call, ext); jerr == nil && st.Status != "working" && st.Status != "input_required" {
			return st, nil
		}
	}
	if jerr != nil {
		return nil, jerr
	}
	st.StatusMessage = "cancellation requested; " + st.StatusMessage
	return st, nil
}

// checkTaskOwner refuses a task handle of a task that is not the
// caller's (authorizeTask), or of none: a handle names a call, so its
// task exists once the handle is real.
func (g *Gateway) checkTaskOwner(ctx context.Context, task, principal string) *jsonrpc.Error {
	exists, err := g.authorizeTask(ctx, task, principal)
	var foreign errNotYourTask
	switch {
	case errors.As(err, &foreign):
		return &jsonrpc.Error{Code: CodeAccessDenied, Message: err.Error()}
	case err != nil:
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	case !exists:
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("no task %s here: the handle names no call of yours", task)}
	}
	return nil
}

func writeRPC(w http.ResponseWriter, id json.RawMessage, result any, jerr *jsonrpc.Error) {
	resp := map[string]any{"jsonrpc": "2.0", "id": id}
	if jerr != nil {
		resp["error"] = jerr
	} else {
		resp["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}
