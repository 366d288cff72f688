package gateway

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
)

// Task-scoped state (issue 16 §5): airlock_state_get, airlock_state_set and
// airlock_state_delete keep a small JSON document in the caller's own task.
// Each goes through g.call like an upstream tool (Update-with-Start on the
// caller's task, idempotency keys, continue-as-new retries, the inline
// wait), and the task's workflow serves it (workflows/state.go), so every
// call is recorded in the task's history with its decision, and a set or
// delete is undone by a rollback of the task. Only the task's principal
// reaches its task (taskFor, and the workflow's validator).

// stateEntries are the state tools as the gateway calls them.
var stateEntries = map[string]*toolEntry{
	api.ToolStateGet:    {exposed: api.ToolStateGet, server: api.StateServer, upstream: "state_get"},
	api.ToolStateSet:    {exposed: api.ToolStateSet, server: api.StateServer, upstream: "state_set"},
	api.ToolStateDelete: {exposed: api.ToolStateDelete, server: api.StateServer, upstream: "state_delete"},
}

// isStateTool reports whether name is a built-in state tool.
func isStateTool(name string) bool { _, ok := stateEntries[name]; return ok }

var (
	stateKeySchema = map[string]any{"type": "string", "minLength": 1, "maxLength": 256,
		"description": "a top-level key of the task's state, e.g. \"checklist\""}
	stateTools = []*mcp.Tool{
		{Name: api.ToolStateGet, Title: "airlock: read this task's state",
			Description: "Reads the small JSON document this task keeps across its calls (your memory for a long task, e.g. a checklist): " +
				"one key's value, or the whole document without a key. Only your own task's state. Read-only.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{"key": stateKeySchema}, "additionalProperties": false}},
		{Name: api.ToolStateSet, Title: "airlock: write this task's state",
			Description: "Sets one key of this task's JSON state to a value (any JSON), or replaces the whole document (document: an object). " +
				"The state has a size limit and may have a schema; a write that breaks either is refused and changes nothing. " +
				"A rollback of the task restores the previous value.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true},
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{
				"key":      stateKeySchema,
				"value":    map[string]any{"description": "the key's new value: any JSON value"},
				"document": map[string]any{"type": "object", "description": "the whole new state (instead of key and value)"},
			}, "additionalProperties": false}},
		{Name: api.ToolStateDelete, Title: "airlock: delete a key of this task's state",
			Description: "Removes one key from this task's JSON state. A rollback of the task restores it.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true},
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{"key": stateKeySchema},
				"required": []string{"key"}, "additionalProperties": false}},
	}
)

func (g *Gateway) addStateTools() {
	for _, t := range stateTools {
		e := stateEntries[t.Name]
		g.server.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return g.call(ctx, e, req)
		})
	}
}
