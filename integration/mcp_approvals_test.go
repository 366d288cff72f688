package integration

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
)

// TestApprovalsOverMCP: on `airlock dev`, an approver (bob, in ops) sees
// airlock_approvals_list and airlock_approvals_decide in tools/list and
// decides alice's call from his MCP client, bound to the digest; alice (in
// no group) neither sees the tools nor may call them; bob may not decide
// twice differently; the call runs once and the vote is recorded via mcp.
func TestApprovalsOverMCP(t *testing.T) {
	t.Parallel()
	d := newCounterDev(t, `  append:
    side_effects: [write]
    data_access_level: internal
    risk: high
    redact: [key]
    approval: {group: ops, timeout: 30m}
`)
	bin, dir, effects := d.bin, d.dir, d.effects
	d.writeApprovalsConfig(t, "1s")
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startDev(t, bin, "--config", filepath.Join(dir, "airlock.yaml"), "--data-dir", filepath.Join(dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(freePort(t)), "--log-format", "json", "--no-ui")
	base := "http://" + listen
	p.waitHealthy(t, base)

	alice := connectURL(t, base+"/mcp", bearer("alice-key"))
	waitTools(t, alice, "counter__append")
	bob := connectURL(t, base+"/mcp", bearer("bob-key"))
	waitTools(t, bob, gateway.ToolApprovalsList, gateway.ToolApprovalsDecide)
	if names := toolNames(t, alice); slices.Contains(names, gateway.ToolApprovalsList) || slices.Contains(names, gateway.ToolApprovalsDecide) {
		t.Errorf("alice, in no approver group, is offered the approval tools: %v", names)
	}
	if out := call(t, alice, gateway.ToolApprovalsList, map[string]any{}, ""); !out.IsError || !strings.Contains(text(out), "in no approver group") {
		t.Errorf("alice listing approvals: %q", text(out))
	}

	pending := call(t, alice, "counter__append", map[string]any{"key": "deploy-42"}, "mcp-approve")
	sc, _ := pending.StructuredContent.(map[string]any)
	reqID, _ := sc["approval_request"].(string)
	if pending.IsError || reqID == "" {
		t.Fatalf("pending result: %q", text(pending))
	}

	list := call(t, bob, gateway.ToolApprovalsList, map[string]any{}, "")
	if list.IsError || !strings.Contains(text(list), reqID) || strings.Contains(text(list), "deploy-42") {
		t.Fatalf("bob's list: %q", text(list))
	}
	var digest string
	for _, r := range list.StructuredContent.(map[string]any)["requests"].([]any) {
		if m := r.(map[string]any); m["id"] == reqID {
			digest, _ = m["digest"].(string)
			if m["tool"] != "counter__append" || m["requested_by"] != "alice" {
				t.Errorf("listed request %v", m)
			}
		}
	}
	if digest == "" {
		t.Fatalf("no digest for %s in %v", reqID, list.StructuredContent)
	}
	if out := call(t, bob, gateway.ToolApprovalsDecide, map[string]any{"request_id": reqID, "decision": "approve", "digest": "00000000"}, ""); !out.IsError ||
		!strings.Contains(text(out), "not the call you saw") {
		t.Errorf("a stale digest: %q", text(out))
	}
	out := call(t, bob, gateway.ToolApprovalsDecide, map[string]any{"request_id": reqID, "decision": "approve", "digest": digest[:12]}, "")
	if out.IsError || !strings.Contains(text(out), "recorded") {
		t.Fatalf("bob approving: %q", text(out))
	}
	if out := call(t, bob, gateway.ToolApprovalsDecide, map[string]any{"request_id": reqID, "decision": "deny", "digest": digest}, ""); !out.IsError {
		t.Errorf("bob's second, different decision was accepted: %q", text(out))
	}
	waitFor(t, "the approved call's result", time.Minute, func() bool {
		r := call(t, alice, gateway.ToolAwait, map[string]any{"call": "k-mcp-approve"}, "")
		return !r.IsError && strings.Contains(mustJSON(t, r.StructuredContent), `"count":1`)
	})
	if n := sideEffects(t, effects, "append", "deploy-42"); n != 1 {
		t.Fatalf("the approved call ran %d times, want 1", n)
	}
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	return out
}
