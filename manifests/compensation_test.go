package manifests_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/internal/expr"
	"github.com/airlock-run/airlock/manifests"
)

// resolve picks the call of a compensation chain whose when holds (nil when
// none does) and evaluates its arguments, as a rollback would.
func resolve(t *testing.T, c *manifests.Call, vars map[string]any) (string, map[string]any) {
	t.Helper()
	for ; c != nil; c = c.Else {
		if c.When != "" {
			p, err := expr.CompileBool(expr.Compensation, c.When)
			if err != nil {
				t.Fatal(err)
			}
			ok, err := p.EvalBool(vars)
			if err != nil {
				t.Fatalf("when %s: %v", c.When, err)
			}
			if !ok {
				continue
			}
		}
		args := map[string]any{}
		for name, src := range c.Args {
			p, err := expr.Compile(expr.Compensation, src)
			if err != nil {
				t.Fatal(err)
			}
			if args[name], err = p.Eval(vars); err != nil {
				t.Fatalf("args.%s: %v", name, err)
			}
		}
		return c.Tool, args
	}
	return "", nil
}

// The example compensations, evaluated over results shaped like the real
// servers' (structuredContent as their dist/index.js returns it).
func TestExampleCompensations(t *testing.T) {
	fs, err := manifests.Load("examples/filesystem.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mem, err := manifests.Load("examples/memory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	roots := fs.Server.Expand(map[string]string{"AIRLOCK_DATA_DIR": "/data"}).PathRoots
	call := map[string]any{"id": "c1", "task": "t1", "tool": "x", "slug": expr.Slug("t1", "c1")}
	trash := "/data/files/rollback-trash/" + expr.Slug("t1", "c1")
	text := func(s string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}, "structuredContent": map[string]any{"content": s}})
		return b
	}
	failed := json.RawMessage(`{"content":[{"type":"text","text":"ENOENT"}],"isError":true}`)

	tests := []struct {
		name     string
		tool     *manifests.Tool
		args     string
		result   json.RawMessage
		before   json.RawMessage // the capture's result; a failed one is null
		wantTool string
		wantArgs map[string]any
	}{
		{
			name: "write_file over an existing file", tool: fs.Tools["write_file"],
			args: `{"path":"/data/sandbox/a.md","content":"new"}`, result: text("Successfully wrote"), before: text("old"),
			wantTool: "write_file", wantArgs: map[string]any{"path": "/data/sandbox/a.md", "content": "old"},
		},
		{
			name: "write_file of a new file", tool: fs.Tools["write_file"],
			args: `{"path":"/data/sandbox/a.md","content":"new"}`, result: text("Successfully wrote"), before: failed,
			wantTool: "move_file", wantArgs: map[string]any{"source": "/data/sandbox/a.md", "destination": trash},
		},
		{
			name: "create_directory of a new directory", tool: fs.Tools["create_directory"],
			args: `{"path":"/data/sandbox/d"}`, result: text("Successfully created"), before: failed,
			wantTool: "move_file", wantArgs: map[string]any{"source": "/data/sandbox/d", "destination": trash},
		},
		{
			name: "create_directory of an existing directory", tool: fs.Tools["create_directory"],
			args: `{"path":"/data/sandbox/d"}`, result: text("Successfully created"), before: text("size: 4096\nisDirectory: true"),
		},
		{
			name: "create_entities", tool: mem.Tools["create_entities"],
			args:     `{"entities":[{"name":"a","entityType":"t","observations":[]},{"name":"b","entityType":"t","observations":[]}]}`,
			result:   json.RawMessage(`{"content":[{"type":"text","text":"..."}],"structuredContent":{"entities":[{"name":"b","entityType":"t","observations":[]}]}}`),
			wantTool: "delete_entities", wantArgs: map[string]any{"entityNames": []any{"b"}},
		},
		{
			name: "create_entities that created nothing", tool: mem.Tools["create_entities"],
			args:   `{"entities":[{"name":"a","entityType":"t","observations":[]}]}`,
			result: json.RawMessage(`{"content":[{"type":"text","text":"[]"}],"structuredContent":{"entities":[]}}`),
		},
		{
			name: "add_observations", tool: mem.Tools["add_observations"],
			args:     `{"observations":[{"entityName":"a","contents":["x","y"]}]}`,
			result:   json.RawMessage(`{"content":[],"structuredContent":{"results":[{"entityName":"a","addedObservations":["y"]}]}}`),
			wantTool: "delete_observations", wantArgs: map[string]any{"deletions": []any{map[string]any{"entityName": "a", "observations": []any{"y"}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := expr.JSONValue(json.RawMessage(tt.args))
			if err != nil {
				t.Fatal(err)
			}
			var before any
			if string(tt.before) != string(failed) {
				before = expr.ResultValue(tt.before)
			}
			vars := map[string]any{"args": args, "result": expr.ResultValue(tt.result), "before": before, "call": call, "roots": roots}
			tool, got := resolve(t, tt.tool.Compensation, vars)
			if tool != tt.wantTool {
				t.Fatalf("compensation calls %q, want %q", tool, tt.wantTool)
			}
			if diff := cmp.Diff(tt.wantArgs, got); diff != "" {
				t.Errorf("arguments (-want +got):\n%s", diff)
			}
		})
	}
}
