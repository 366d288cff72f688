package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
)

// TestTasksExtensionSurvivesKill: a 2026-07-28 client with the tasks
// extension gets a task handle for a call that needs approval from
// `airlock dev`; dev is killed with SIGKILL and restarted on the same data
// directory; tasks/get on the handle still reports the call waiting, and
// after the approval it reports completed with the tool's result; the tool
// ran once. The handle is the Update, so it lives in Temporal, not in the
// gateway.
func TestTasksExtensionSurvivesKill(t *testing.T) {
	t.Parallel()
	d := newCounterDev(t, appendNeedsOpsTools)
	d.writeApprovalsConfig(t, "2s")
	args, base, temporal := d.devArgs(t, "--no-ui")
	p1 := startDev(t, d.bin, args...)
	p1.waitHealthy(t, base)

	var res, rerr map[string]any
	waitFor(t, "the tool to be listed", time.Minute, func() bool {
		res, rerr = rpc2026(t, base+"/mcp", "alice-key", "t-killed", "tools/call", "counter__append",
			map[string]any{"name": "counter__append", "arguments": map[string]any{"key": "survivor"}}, true)
		return rerr == nil || !strings.Contains(fmt.Sprint(rerr), "unknown tool")
	})
	if rerr != nil || res["resultType"] != "task" {
		t.Fatalf("tools/call with the extension: %v %v; want a task handle", res, rerr)
	}
	handle, _ := res["taskId"].(string)
	if !strings.HasPrefix(handle, "t-killed~") {
		t.Fatalf("taskId %q", handle)
	}

	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.exited
	p2 := startDev(t, d.bin, args...)
	p2.waitHealthy(t, base)

	got, rerr := rpc2026(t, base+"/mcp", "alice-key", "", "tasks/get", "", map[string]any{"taskId": handle}, true)
	if rerr != nil || got["status"] != "working" {
		t.Fatalf("tasks/get after the restart: %v %v; want working", got, rerr)
	}
	c := dialTest(t, temporal, "default")
	local := approver.Local{Temporal: c, Namespace: "default"}
	ar, err := local.Show(context.Background(), handle)
	if err != nil || ar.State != api.ApprovalPending {
		t.Fatalf("request after restart: %+v %v", ar, err)
	}
	if _, err := local.Decide(context.Background(), approver.Decision{RequestID: handle, Approver: "bob", Approve: true, Via: "cli", Digest: ar.Digest}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task completed", time.Minute, func() bool {
		got, rerr = rpc2026(t, base+"/mcp", "alice-key", "", "tasks/get", "", map[string]any{"taskId": handle}, true)
		return rerr == nil && got["status"] == "completed"
	})
	result, _ := got["result"].(map[string]any)
	if !strings.Contains(mustJSON(t, result["structuredContent"]), `"count":1`) {
		t.Fatalf("completed task's result %v", result)
	}
	if n := sideEffects(t, d.effects, "append", "survivor"); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
}

// TestToolApprovalSurvivesKill: a client that declares SEP-2848's
// tool-approval gets a handle with the envelope from `airlock dev`; dev is
// killed with SIGKILL and restarted; tasks/get (only the taskId is left)
// repeats the envelope while the call waits, and after bob approves it
// with the airlock_approvals_decide tool reports it completed,
// approved-executed, with the tool's result; the tool ran once.
func TestToolApprovalSurvivesKill(t *testing.T) {
	t.Parallel()
	d := newCounterDev(t, appendNeedsOpsTools)
	d.writeApprovalsConfig(t, "2s")
	args, base, temporal := d.devArgs(t, "--no-ui")
	p1 := startDev(t, d.bin, args...)
	p1.waitHealthy(t, base)
	caps := map[string]any{"extensions": approvalExtensions}

	var res, rerr map[string]any
	waitFor(t, "the tool to be listed", time.Minute, func() bool {
		res, rerr = rpcCaps(t, base+"/mcp", "alice-key", "t-approved-killed", "tools/call", "counter__append",
			map[string]any{"name": "counter__append", "arguments": map[string]any{"key": "survivor"}}, caps)
		return rerr == nil || !strings.Contains(fmt.Sprint(rerr), "unknown tool")
	})
	handle, _ := res["taskId"].(string)
	if env, _ := mapAt(res, "_meta", gateway.MetaAuthorization); rerr != nil || res["resultType"] != "task" || env["remediation"] != "available" ||
		!strings.HasPrefix(handle, "t-approved-killed~") {
		t.Fatalf("tools/call with tool-approval: %v %v; want a handle with the envelope", res, rerr)
	}

	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.exited
	p2 := startDev(t, d.bin, args...)
	p2.waitHealthy(t, base)

	got, rerr := rpcCaps(t, base+"/mcp", "alice-key", "", "tasks/get", "", map[string]any{"taskId": handle}, caps)
	if env, _ := mapAt(got, "_meta", gateway.MetaAuthorization); rerr != nil || got["status"] != "working" || env["remediation"] != "available" {
		t.Fatalf("tasks/get after the restart: %v %v; want working with the envelope", got, rerr)
	}
	c := dialTest(t, temporal, "default")
	local := approver.Local{Temporal: c, Namespace: "default"}
	ar, err := local.Show(context.Background(), handle)
	if err != nil || ar.State != api.ApprovalPending {
		t.Fatalf("request after restart: %+v %v", ar, err)
	}
	// Bob approves with airlock's approval tool, from his own MCP client.
	bob := connectURL(t, base+"/mcp", bearer("bob-key"))
	waitTools(t, bob, gateway.ToolApprovalsDecide)
	if out := call(t, bob, gateway.ToolApprovalsDecide, map[string]any{"request_id": handle, "decision": "approve", "digest": ar.Digest}, ""); out.IsError {
		t.Fatalf("bob's %s: %q", gateway.ToolApprovalsDecide, text(out))
	}
	waitFor(t, "the task completed", time.Minute, func() bool {
		got, rerr = rpcCaps(t, base+"/mcp", "alice-key", "", "tasks/get", "", map[string]any{"taskId": handle}, caps)
		return rerr == nil && got["status"] == "completed"
	})
	result, _ := got["result"].(map[string]any)
	meta, _ := result["_meta"].(map[string]any)
	if !strings.Contains(mustJSON(t, result["structuredContent"]), `"count":1`) || meta[gateway.MetaDisposition] != gateway.DispositionExecuted ||
		meta[gateway.MetaAuthorization] != nil {
		t.Fatalf("completed task's result %v; want the tool's result, approved-executed", result)
	}
	if n := sideEffects(t, d.effects, "append", "survivor"); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
}
