package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
)

// TestStateToolsListedAndCalledInTheTask: the state tools are listed like
// the other built-ins, in both catalog modes and whatever the policy hides,
// and a call goes to the caller's task as a call of the airlock server,
// with the configured state limits in the task's input.
func TestStateToolsListedAndCalledInTheTask(t *testing.T) {
	pol, err := policy.Compile(policy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &api.StateConfig{MaxBytes: 1000, Schema: json.RawMessage(`{"type":"object"}`)}
	for _, mode := range []string{CatalogFull, CatalogSearch} {
		t.Run(mode, func(t *testing.T) {
			ft := &fakeTemporal{answer: func(u sentUpdate, _ int) (api.CallResult, error) {
				return api.CallResult{CallID: u.req.CallID, Tool: u.req.Tool, Outcome: api.OutcomeOK,
					Result: json.RawMessage(`{"content":[{"type":"text","text":"set"}]}`)}, nil
			}}
			// A principal with no grants: the policy hides every upstream
			// tool, never the built-ins.
			g := newTestGateway(t, ft, Options{Principal: "alice", Policy: pol, Catalog: mode, State: cfg})
			g.open.Permissions, g.open.AllowTools = nil, nil
			cs := connectMemory(t, g)
			lr, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range lr.Tools {
				names = append(names, tl.Name)
			}
			for _, want := range []string{api.ToolStateGet, api.ToolStateSet, api.ToolStateDelete} {
				if !slices.Contains(names, want) {
					t.Errorf("tools/list %v lacks %s", names, want)
				}
			}
			if slices.Contains(names, "counter__echo") {
				t.Errorf("tools/list %v shows a tool the principal may not call", names)
			}

			res := callTool(t, cs, api.ToolStateSet, map[string]any{"key": "k", "value": 1}, "s1")
			if res.IsError || textOf(res) != "set" {
				t.Fatalf("result isError=%v %q", res.IsError, textOf(res))
			}
			u := ft.last(t)
			if u.req.Server != api.StateServer || u.req.Tool != api.ToolStateSet || u.req.Principal != "alice" ||
				string(u.req.Arguments) != `{"key":"k","value":1}` || u.update.UpdateName != api.UpdateCallTool {
				t.Errorf("call request %+v", u.req)
			}
			if u.in.State == nil || u.in.State.MaxBytes != 1000 || string(u.in.State.Schema) != `{"type":"object"}` {
				t.Errorf("task input state %+v", u.in.State)
			}
		})
	}
}
