package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestNPMServersThroughGateway drives the real npm filesystem and memory
// servers through the real gateway, workflow and embedded Temporal.
func TestNPMServersThroughGateway(t *testing.T) {
	t.Parallel()
	sandbox := t.TempDir()
	memFile := filepath.Join(t.TempDir(), "memory.jsonl")
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox}, nil)
	mem := loadExample(t, "memory.yaml", "server-memory", nil, map[string]string{"MEMORY_FILE_PATH": memFile})
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{fsm, mem}})
	cs := s.connect(t, nil)

	tools := waitTools(t, cs, "filesystem__read_text_file", "filesystem__write_file", "memory__create_entities", "memory__open_nodes")

	// Only manifest-covered tools are exposed, each under server__tool.
	for name := range tools {
		if name == gateway.ToolStatus || name == gateway.ToolAwait || name == gateway.ToolRollback || strings.HasPrefix(name, "airlock_state_") {
			continue // airlock's own tools
		}
		srv, tool, ok := strings.Cut(name, "__")
		if !ok {
			t.Errorf("tool %q is not named server__tool", name)
			continue
		}
		m := map[string]*manifests.Manifest{"filesystem": fsm, "memory": mem}[srv]
		if m == nil || m.Tools[tool] == nil {
			t.Errorf("tool %q is exposed but no manifest declares it", name)
		}
	}
	// Schemas pass through unchanged; annotations and _meta say what the
	// manifest declares (README.md, "Tools say what they are").
	up := s.pool.Status("filesystem")
	for _, ut := range up.Tools {
		gt, ok := tools["filesystem__"+ut.Name]
		if !ok {
			continue
		}
		if !reflect.DeepEqual(normalize(t, ut.InputSchema), normalize(t, gt.InputSchema)) {
			t.Errorf("%s: input schema changed:\nupstream %s\ngateway  %s", ut.Name, mustJSON(t, ut.InputSchema), mustJSON(t, gt.InputSchema))
		}
		checkListedMeta(t, fsm, ut, gt)
	}

	// Write a file through airlock; it is on disk.
	path := filepath.Join(sandbox, "report.md")
	res := call(t, cs, "filesystem__write_file", map[string]any{"path": path, "content": "# Q3\nall good\n"}, "")
	if res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "# Q3\nall good\n" {
		t.Fatalf("file on disk: %q, %v", b, err)
	}
	taskID, _ := res.Meta[gateway.MetaTask].(string)
	if taskID == "" || res.Meta[gateway.MetaCall] == nil {
		t.Fatalf("result _meta lacks task/call: %v", res.Meta)
	}
	// Read it back.
	res = call(t, cs, "filesystem__read_text_file", map[string]any{"path": path}, "")
	if res.IsError || !strings.Contains(text(res), "all good") {
		t.Fatalf("read_text_file: %s", text(res))
	}
	// An upstream tool error stays an isError result with its content.
	res = call(t, cs, "filesystem__read_text_file", map[string]any{"path": filepath.Join(sandbox, "missing.txt")}, "")
	if !res.IsError || !strings.Contains(strings.ToLower(text(res)), "no such file") {
		t.Fatalf("missing file: isError=%v %s", res.IsError, text(res))
	}

	// Create entities in the memory server and read them back.
	res = call(t, cs, "memory__create_entities", map[string]any{"entities": []any{
		map[string]any{"name": "airlock", "entityType": "project", "observations": []string{"durable"}},
	}}, "")
	if res.IsError {
		t.Fatalf("create_entities: %s", text(res))
	}
	res = call(t, cs, "memory__open_nodes", map[string]any{"names": []string{"airlock"}}, "")
	if res.IsError || !strings.Contains(text(res), "durable") {
		t.Fatalf("open_nodes: %s", text(res))
	}

	// Every call ran in the session's one task workflow, visible to
	// operators through the status query and search attributes.
	v, err := s.client.QueryWorkflow(context.Background(), taskID, "", api.QueryStatus)
	if err != nil {
		t.Fatal(err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	if st.Calls != 5 || st.Principal != "tester" || len(st.ToolsUsed) != 4 {
		t.Fatalf("status: calls=%d principal=%q tools=%v", st.Calls, st.Principal, st.ToolsUsed)
	}
	waitVisible(t, s, `AirlockTools = 'memory__open_nodes' AND AirlockPrincipal = 'tester'`, taskID)
}

// waitVisible waits until a visibility query finds the task.
func waitVisible(t *testing.T, s *stack, query, taskID string) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("query %q to find task %s", query, taskID), 20*time.Second, func() error {
		resp, err := s.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			return err
		}
		for _, ex := range resp.GetExecutions() {
			if ex.GetExecution().GetWorkflowId() == taskID {
				return nil
			}
		}
		return fmt.Errorf("%d other executions", len(resp.GetExecutions()))
	})
}

// normalize round-trips through JSON so typed and map schemas compare.
func normalize(t *testing.T, v any) any {
	var out any
	b := mustJSON(t, v)
	if err := jsonUnmarshal([]byte(b), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

var _ = mcp.CallToolParams{}

// checkListedMeta checks what the gateway lists of an upstream tool (gt)
// against its manifest's declaration: the risk and recovery metadata in
// _meta and the annotations, whose title alone is the upstream's (ut).
func checkListedMeta(t *testing.T, m *manifests.Manifest, ut, gt *mcp.Tool) {
	t.Helper()
	d := m.Tools[ut.Name]
	risk, _ := gt.Meta[manifests.MetaRisk].(map[string]any)
	rec, _ := gt.Meta[manifests.MetaRecovery].(map[string]any)
	if risk == nil || rec == nil {
		t.Errorf("%s: _meta lacks the risk or recovery metadata: %s", gt.Name, mustJSON(t, gt.Meta))
		return
	}
	var ses []any
	readOnly := true
	for _, se := range d.SideEffects {
		ses = append(ses, string(se))
		readOnly = readOnly && (se == manifests.SideEffectRead || se == manifests.SideEffectNone)
	}
	if risk["riskLevel"] != string(d.Risk) || !reflect.DeepEqual(risk["sideEffects"], ses) || risk["dataAccessLevel"] != string(d.DataAccessLevel) ||
		risk["idempotent"] != d.Idempotent || risk["covered"] != true {
		t.Errorf("%s: risk metadata %s does not say what the manifest declares (%+v)", gt.Name, mustJSON(t, risk), d)
	}
	if rec["compensable"] != d.Compensable() {
		t.Errorf("%s: recovery metadata %s, but compensable is %v", gt.Name, mustJSON(t, rec), d.Compensable())
	}
	if d.Compensable() {
		c, _ := rec["compensation"].(map[string]any)
		if c == nil || c["tool"] != m.Exposed(d.Compensation.Tool) || rec["trigger"] != gateway.ToolRollback || risk["reversibility"] != "auto" {
			t.Errorf("%s: recovery metadata %s, want compensation by %s on %s", gt.Name, mustJSON(t, rec), m.Exposed(d.Compensation.Tool), gateway.ToolRollback)
		}
	}
	a := gt.Annotations
	if a == nil || a.ReadOnlyHint != readOnly || a.IdempotentHint != (d.Idempotent || readOnly) {
		t.Errorf("%s: annotations %s disagree with side effects %v, idempotent %v", gt.Name, mustJSON(t, a), d.SideEffects, d.Idempotent)
	} else if ut.Annotations != nil && a.Title != ut.Annotations.Title {
		t.Errorf("%s: title %q, the upstream's is %q", gt.Name, a.Title, ut.Annotations.Title)
	}
}
