package activities

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

type countingCaller struct{ calls []string }

func (c *countingCaller) CallTool(_ context.Context, server, tool string, _ json.RawMessage) (*mcp.CallToolResult, error) {
	c.calls = append(c.calls, server+"/"+tool)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran"}}}, nil
}

// TestDecideAndCallRunsOnlyWhatItMay: the worker runs a call in the local
// activity only when its own manifest declares the tool idempotent and
// low-risk and policy allows it outright; every other call gets its
// decision alone, and nothing runs.
func TestDecideAndCallRunsOnlyWhatItMay(t *testing.T) {
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "fs.yaml"), []byte(`server:
  name: fs
  stdio: {command: /bin/true}
tools:
  read: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
  append: {side_effects: [write], data_access_level: public, risk: low, idempotent: false}
  put: {side_effects: [write], data_access_level: public, risk: medium, idempotent: true}
  purge: {side_effects: [delete], data_access_level: public, risk: high, idempotent: true}
  secret: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Compile(policy.Config{ApprovalGroup: "ops", Rules: []policy.Rule{
		{Name: "no-secret", When: `tool.upstream == "secret"`, Effect: api.Deny, Reason: "no"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tool   string
		ran    bool
		effect api.Effect
	}{
		{tool: "fs__read", ran: true, effect: api.Allow},
		{tool: "fs__append", effect: api.Allow},
		{tool: "fs__put", effect: api.Allow},
		{tool: "fs__purge", effect: api.RequireApproval},
		{tool: "fs__secret", effect: api.Deny},
		{tool: "fs__missing", effect: api.Deny},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			caller := &countingCaller{}
			a := &Activities{Tools: caller, Policy: pol, Catalog: NewCatalog([]*manifests.Manifest{m}, nil, nil, false)}
			out, err := a.DecideAndCall(context.Background(), api.DecideAndCallInput{
				Decide: api.DecideInput{TaskID: "t1", CallID: "c1", Tool: tc.tool, Arguments: json.RawMessage(`{}`), AllowTools: []string{"*"},
					Principal: api.Principal{Name: "alice", Permissions: []string{"*"}, DataLevel: manifests.DataRestricted}},
				Call: api.CallToolInput{TaskID: "t1", CallID: "c1", Attempt: 1, Server: "fs", Tool: tc.tool[len("fs__"):], Arguments: json.RawMessage(`{}`)},
			})
			if err != nil {
				t.Fatal(err)
			}
			if out.Decision.Effect != tc.effect || out.Ran != tc.ran || (len(caller.calls) == 1) != tc.ran {
				t.Fatalf("effect %s (%s), ran %v, upstream calls %q; want %s, ran %v", out.Decision.Effect, out.Decision.Reason, out.Ran, caller.calls, tc.effect, tc.ran)
			}
			if tc.ran && (out.Call == nil || out.Call.IsError) {
				t.Fatalf("result %+v", out.Call)
			}
		})
	}
}

// TestDecideAndCallLeavesTaskCounterRulesToTheRegularPath (issue 25 item
// 3): a rule over task.calls or task.elapsed_seconds decides on what the
// task had admitted when the workflow task ran; an attempt that is
// dropped and retried may see other counts and deny what the first
// attempt let run, so such a call is decided in the local activity but
// not run there. A rule over task.id, or one restricted to other tools,
// leaves the fast path alone.
func TestDecideAndCallLeavesTaskCounterRulesToTheRegularPath(t *testing.T) {
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "fs.yaml"), []byte(`server:
  name: fs
  stdio: {command: /bin/true}
tools:
  read: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		when string
		ran  bool
	}{
		{when: `tool.upstream == "read" && task.calls > 100`},
		{when: `task.elapsed_seconds > 3600.0`},
		{when: `[task].exists(x, x.calls > 100)`},
		{when: `task.id == "other"`, ran: true},
		{when: `tool.name == "fs__other" && task.calls > 1`, ran: true},
		{when: `args.?path.orValue("") == "x"`, ran: true},
	} {
		t.Run(tc.when, func(t *testing.T) {
			pol, err := policy.Compile(policy.Config{ApprovalGroup: "ops", Rules: []policy.Rule{
				{Name: "r", When: tc.when, Effect: api.Deny, Reason: "no"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			caller := &countingCaller{}
			a := &Activities{Tools: caller, Policy: pol, Catalog: NewCatalog([]*manifests.Manifest{m}, nil, nil, false)}
			out, err := a.DecideAndCall(context.Background(), api.DecideAndCallInput{
				Decide: api.DecideInput{TaskID: "t1", CallID: "c1", Tool: "fs__read", Arguments: json.RawMessage(`{}`), AllowTools: []string{"*"},
					Principal: api.Principal{Name: "alice", Permissions: []string{"*"}, DataLevel: manifests.DataRestricted}},
				Call: api.CallToolInput{TaskID: "t1", CallID: "c1", Attempt: 1, Server: "fs", Tool: "read", Arguments: json.RawMessage(`{}`)},
			})
			if err != nil {
				t.Fatal(err)
			}
			if out.Decision.Effect != api.Allow || out.Ran != tc.ran || (len(caller.calls) == 1) != tc.ran {
				t.Fatalf("effect %s (%s), ran %v, upstream calls %q; want allow, ran %v", out.Decision.Effect, out.Decision.Reason, out.Ran, caller.calls, tc.ran)
			}
		})
	}
}
