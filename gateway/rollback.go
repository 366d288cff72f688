package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// ToolRollback is the built-in tool with which an agent undoes its own
// task's changes.
const ToolRollback = manifests.RollbackTool

type rollbackIn struct {
	Reason string `json:"reason,omitempty" jsonschema:"why you roll back (kept in the task's record)"`
	Task   string `json:"task,omitempty" jsonschema:"the task to roll back, from a result's _meta airlock.dev/task, when this request names no task otherwise (no session or Airlock-Task header)"`
}

func (g *Gateway) addRollbackTool() {
	mcp.AddTool(g.server, &mcp.Tool{Name: ToolRollback, Title: "airlock: roll this task back",
		Description: "Undoes every change this task made that its tools declare a compensation for, newest first, each exactly once. " +
			"Calls without a compensation are not undone. Returns what was undone and anything that could not be.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}}, g.rollbackTool)
}

func ptr[T any](v T) *T { return &v }

func (g *Gateway) rollbackTool(ctx context.Context, req *mcp.CallToolRequest, in rollbackIn) (*mcp.CallToolResult, any, error) {
	pr, err := g.principalFor(req.Extra)
	if err != nil {
		return errorResult("", "", err.Error()), nil, nil
	}
	tref, err := g.taskFor(ctx, req, pr.Name, taskHint{task: in.Task})
	if err != nil {
		return errorResult("", "", err.Error()), nil, nil
	}
	task := tref.id
	if !tref.exists {
		// Not sent: an Update reaching a task that appeared meanwhile
		// could be answered from another principal's (owner.go).
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
			"task %s has made no calls yet: nothing to roll back", task)}}, Meta: mcp.Meta{MetaTask: task}}, nil, nil
	}
	if len(in.Reason) > api.MaxReasonBytes {
		return errorResult(task, "", fmt.Sprintf("reason is %d bytes; keep it under %d", len(in.Reason), api.MaxReasonBytes)), nil, nil
	}
	id := newCallID()
	if k, ok := req.Params.Meta[MetaIdempotencyKey].(string); ok && k != "" && len(k) <= 200 {
		id = api.CallIDForKey(k)
	}
	wctx, cancel := context.WithTimeout(ctx, g.opts.InlineWait)
	defer cancel()
	h, err := g.opts.Temporal.UpdateWorkflow(wctx, client.UpdateWorkflowOptions{
		UpdateID: id, WorkflowID: task, UpdateName: api.UpdateRollback,
		Args:         []any{api.RollbackRequest{By: pr.Name, Reason: in.Reason, Principal: pr.Name}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res api.RollbackResult
	if err == nil {
		err = h.Get(wctx, &res)
	}
	if err != nil {
		if waitedOut(wctx, err) && ctx.Err() == nil {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
				"the rollback of task %s is still running; it continues without you, exactly once. Call %s to see what remains.", task, ToolStatus)}},
				Meta: mcp.Meta{MetaTask: task}}, nil, nil
		}
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
				"task %s has made no calls yet (or has ended): nothing to roll back", task)}}, Meta: mcp.Meta{MetaTask: task}}, nil, nil
		}
		return errorResult(task, "", fmt.Sprintf("task %s could not be rolled back: %v", task, err)), nil, nil
	}
	r := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: DescribeRollback(res)}},
		StructuredContent: res, Meta: mcp.Meta{MetaTask: task}}
	r.IsError = res.State == api.StateRollbackFailed
	return r, nil, nil
}

// DescribeRollback renders a rollback's result for people and models.
func DescribeRollback(res api.RollbackResult) string {
	var b strings.Builder
	switch res.State {
	case api.RollbackNothing:
		fmt.Fprintf(&b, "task %s: %s", res.TaskID, res.Reason)
	case api.StateRolledBack:
		fmt.Fprintf(&b, "task %s rolled back: %d change(s) undone", res.TaskID, len(res.Compensated))
	default:
		fmt.Fprintf(&b, "task %s: ROLLBACK FAILED: %s", res.TaskID, res.Reason)
	}
	if res.Joined {
		b.WriteString(" (a rollback was already running; this waited for it)")
	}
	for _, e := range res.Compensated {
		fmt.Fprintf(&b, "\n- undone: call %s (%s) by %s", e.CallID, e.Tool, e.Compensation.Tool)
	}
	for _, e := range res.Remaining {
		what := "no compensation could be computed"
		if e.Compensation != nil {
			what = "compensation " + e.Compensation.Tool
		}
		fmt.Fprintf(&b, "\n- NOT undone: call %s (%s), %s, %s", e.CallID, e.Tool, what, e.State)
		if e.Reason != "" {
			fmt.Fprintf(&b, ": %s", e.Reason)
		}
	}
	if len(res.Remaining) > 0 {
		b.WriteString("\nThe task refuses new calls until an operator retries the rollback or finishes the task; the approver group has been told.")
	}
	return b.String()
}
