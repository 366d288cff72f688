package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestRecordMRTRHistory records an agent task whose upstream asks the
// client during its calls while the worker runs in another process than
// the gateway (changeMRTR): an elicitation and a sampling request that a
// 2026-07-28 client answers by multi round trip, both through the task
// (api.SignalCallInput, sealed), the calls kept off the fast path. With
// -record it writes mrtr_v1_run1.json.
func TestRecordMRTRHistory(t *testing.T) {
	t.Parallel()
	bin, err := buildEverythingServer(t)
	if err != nil {
		t.Fatalf("the go-sdk conformance everything-server does not build: %v", err)
	}
	m := relayManifest(t, bin)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, split: true})
	waitTools(t, s.connect(t, nil), "everything__test_elicitation")
	ctx := context.Background()
	const taskID = "record-mrtr"
	mc := newRelayClientAt(t, s.url, &mcp.ClientSessionOptions{ProtocolVersion: gateway.StatelessProtocol}, map[string]string{gateway.HeaderTask: taskID})
	call := func(name string, args map[string]any) string {
		t.Helper()
		res, err := mc.cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__" + name, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %q", name, err, resultText(res))
		}
		if task := res.Meta[gateway.MetaTask]; task != taskID {
			t.Fatalf("%s ran in task %v, want %s", name, task, taskID)
		}
		return resultText(res)
	}
	if got := call("test_elicitation", map[string]any{"message": "recorded?"}); !strings.Contains(got, "username:secret-user-4711") {
		t.Fatalf("elicitation: %q", got)
	}
	if got := call("test_sampling", map[string]any{"prompt": "recorded"}); got != "LLM response: sampled-by-the-test-client" {
		t.Fatalf("sampling: %q", got)
	}
	desc, err := s.client.DescribeWorkflowExecution(ctx, taskID, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.client.SignalWorkflow(ctx, taskID, "", api.SignalFinish, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.client.GetWorkflow(ctx, taskID, "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	replayRuns(t, s, taskID, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "mrtr_v1")
}
