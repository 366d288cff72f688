package upstream

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// TestMemoryServer talks to the real @modelcontextprotocol/server-memory
// from the repository's node_modules.
func TestMemoryServer(t *testing.T) {
	t.Parallel() // its own pool and servers; waits on processes
	node := testenv.RequireNode(t)
	script := testenv.NPMServer(t, "server-memory")

	p := startPool(t, []manifests.Server{{
		Name: "memory",
		Stdio: &manifests.StdioServer{
			Command: node,
			Args:    []string{script},
			Env:     map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "memory.jsonl")},
		},
	}}, testOptions())
	ctx := context.Background()

	create := `{"entities":[{"name":"airlock","entityType":"project","observations":["guards MCP tool calls"]}]}`
	res, err := p.CallTool(ctx, "memory", "create_entities", json.RawMessage(create))
	if err != nil || res.IsError {
		t.Fatalf("create_entities = %+v, %v", res, err)
	}
	res, err = p.CallTool(ctx, "memory", "read_graph", json.RawMessage(`{}`))
	if err != nil || res.IsError {
		t.Fatalf("read_graph = %+v, %v", res, err)
	}
	got := resultText(res)
	for _, want := range []string{`"airlock"`, "guards MCP tool calls"} {
		if !strings.Contains(got, want) {
			t.Errorf("read_graph = %s, want it to contain %s", got, want)
		}
	}
}
