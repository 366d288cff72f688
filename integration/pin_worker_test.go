package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/pin"
	"github.com/airlock-run/airlock/manifests"
)

// TestWorkerRefusesChangedTool: even a call that reaches the workflow
// without the gateway's check (a stale gateway replica) is refused by the
// worker when the upstream's definition differs from its pin, and the
// refusal is recorded as a policy decision with check "pin".
func TestWorkerRefusesChangedTool(t *testing.T) {
	t.Parallel()
	store, err := pin.Open(filepath.Join(t.TempDir(), "pins.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Pin a definition of echo that the upstream does not serve.
	if _, err := store.Pin("counter", []*mcp.Tool{{Name: "echo", Description: "An older, different echo.", InputSchema: map[string]any{"type": "object"}}}, ""); err != nil {
		t.Fatal(err)
	}
	m := testupstreamManifest(t, filepath.Join(t.TempDir(), "effects.log"))
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, pins: store})
	waitFor(t, "the upstream to connect", 30*time.Second, func() bool { return len(s.pool.Status("counter").Tools) > 0 })

	ctx := context.Background()
	in := api.TaskInput{TaskID: "stale-gateway", Principal: "tester",
		Identity: &api.Identity{Name: "tester", Permissions: []string{"*"}, DataLevel: "restricted", AllowTools: []string{"*"}},
		Limits:   api.Limits{MaxCalls: 10, IdleTimeout: time.Hour}}
	req := api.CallRequest{CallID: "c1", Tool: "counter__echo", Server: "counter", UpstreamTool: "echo",
		Arguments: json.RawMessage(`{"text":"hi"}`), Spec: api.ToolSpec{Timeout: 30 * time.Second, Retry: api.RetrySpec{MaxAttempts: 1}}}
	op := s.client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{ID: in.TaskID, TaskQueue: api.DefaultTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING}, api.AgentTaskName, in)
	h, err := s.client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{UpdateID: "c1", UpdateName: api.UpdateCallTool, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted}})
	if err != nil {
		t.Fatal(err)
	}
	var res api.CallResult
	if err := h.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Outcome != api.OutcomeDenied || res.Decision == nil || res.Decision.Check != api.CheckPin ||
		!strings.Contains(res.Reason, "airlock manifests pin counter echo") {
		t.Fatalf("call with a changed tool definition: %+v (decision %+v)", res, res.Decision)
	}
}
