package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// approvalStack serves testupstream's append as a high-risk tool that ops
// (bob) must approve; alice calls it.
func approvalStack(t *testing.T, o stackOptions) (*stack, string) {
	t.Helper()
	m, effects := counterManifest(t, appendNeedsOps)
	o.manifests = []*manifests.Manifest{m}
	o.directory = allGrants(nil, "alice", "bob")
	o.groups = map[string][]string{"ops": {"bob"}}
	return newStack(t, o), effects
}

// TestPendingApprovalAndAwait: a call waiting for approval outlives the
// inline wait and comes back as a non-error pending result naming the
// request, with progress notifications meanwhile; airlock_status shows it;
// after bob approves, airlock_await returns the result, and the tool ran
// exactly once whatever the agent did (including retrying the call).
func TestPendingApprovalAndAwait(t *testing.T) {
	t.Parallel()
	s, effects := approvalStack(t, stackOptions{inlineWait: 5 * time.Second, progressEvery: 200 * time.Millisecond})

	var mu sync.Mutex
	var progress []string
	c := mcp.NewClient(&mcp.Implementation{Name: "alice-agent", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, req.Params.Message)
			mu.Unlock()
		},
	})
	hc := newHeaderClient(map[string]string{"Authorization": "Bearer alice-key"})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: hc}, sessionProtocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	waitTools(t, cs, "counter__append", gateway.ToolAwait, gateway.ToolStatus)

	params := &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": "deploy"},
		Meta: mcp.Meta{gateway.MetaIdempotencyKey: "append-1"}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := res.StructuredContent.(map[string]any)
	if res.IsError || sc["status"] != "pending" || !strings.Contains(text(res), `approval by "ops"`) || sc["approval_request"] == nil {
		t.Fatalf("pending result: isError=%v %q %v", res.IsError, text(res), res.StructuredContent)
	}
	callID, _ := res.Meta[gateway.MetaCall].(string)
	reqID, _ := sc["approval_request"].(string)
	mu.Lock()
	got := strings.Join(progress, "|")
	mu.Unlock()
	if !strings.Contains(got, `waiting for approval by "ops"`) {
		t.Errorf("progress notifications %q: want them to say what the call waits for", got)
	}
	if n := sideEffects(t, effects, "append", "deploy"); n != 0 {
		t.Fatalf("the tool ran %d times before approval", n)
	}

	st := call_(t, cs, gateway.ToolStatus, map[string]any{"call": callID})
	if !strings.Contains(text(st), "waits for approval") || !strings.Contains(text(st), reqID) {
		t.Fatalf("airlock_status: %q", text(st))
	}

	// The agent retries the original call meanwhile: still pending, no run.
	if again := call(t, cs, "counter__append", map[string]any{"key": "deploy"}, "append-1"); again.IsError || again.Meta[gateway.MetaCall] != callID {
		t.Fatalf("retry while pending: %v %q", again.IsError, text(again))
	}

	// bob approves (the local path: the same Update Slack clicks use).
	ctx := context.Background()
	ar, err := approver.Lookup(ctx, s.client, reqID)
	if err != nil {
		t.Fatal(err)
	}
	dres, err := approver.Deliver(ctx, s.client, "test:bob", api.DecideRequest{RequestID: reqID, Digest: ar.Digest, Approver: "bob", Approve: true, Via: "cli"})
	if err != nil || dres.State != api.ApprovalApproved {
		t.Fatalf("approve: %+v %v", dres, err)
	}

	out := call_(t, cs, gateway.ToolAwait, map[string]any{"call": callID})
	if out.IsError || !strings.Contains(text(out)+mustJSON(t, out.StructuredContent), `"count":1`) {
		t.Fatalf("airlock_await: isError=%v %q %v", out.IsError, text(out), out.StructuredContent)
	}
	again := call(t, cs, "counter__append", map[string]any{"key": "deploy"}, "append-1")
	if again.IsError || mustJSON(t, again.StructuredContent) != mustJSON(t, out.StructuredContent) {
		t.Fatalf("the retried call after approval: %q", text(again))
	}
	if n := sideEffects(t, effects, "append", "deploy"); n != 1 {
		t.Fatalf("the approved call ran %d times, want exactly 1", n)
	}
}

// call_ calls a built-in tool (no idempotency key).
func call_(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	return call(t, cs, name, args, "")
}

// TestCallWhileTaskDrainsForApproval: the task is due to continue as new
// after one call, and that call waits for approval, so the run drains
// (new calls go to the next run) and cannot end until the call is
// decided. A new call in the task is turned away for the whole inline
// wait: it is answered that it has not run, what holds the task (the
// pending request) and the key to call again with, not that it is "still
// running"; and it did not run nor ask for approval.
func TestCallWhileTaskDrainsForApproval(t *testing.T) {
	t.Parallel()
	s, effects := approvalStack(t, stackOptions{inlineWait: 2 * time.Second, continueAsNewAfter: 1})
	cs := connectURL(t, s.url, map[string]string{"Authorization": "Bearer alice-key"})
	waitTools(t, cs, "counter__append")

	first := call(t, cs, "counter__append", map[string]any{"key": "deploy"}, "append-1")
	sc, _ := first.StructuredContent.(map[string]any)
	reqID, _ := sc["approval_request"].(string)
	if first.IsError || sc["status"] != "pending" || reqID == "" {
		t.Fatalf("first call: isError=%v %q %v; want it pending approval", first.IsError, text(first), first.StructuredContent)
	}

	next := call(t, cs, "counter__append", map[string]any{"key": "later"}, "append-2")
	txt := text(next)
	for _, w := range []string{"counter__append has not run", "moving to a new run", "waits for approval", reqID, `"append-2"`} {
		if !next.IsError || !strings.Contains(txt, w) {
			t.Fatalf("call while the task drains: isError=%v %q; want an error containing %q", next.IsError, txt, w)
		}
	}
	if strings.Contains(txt, "still running") {
		t.Fatalf("call while the task drains: %q presents it as running", txt)
	}
	if n := sideEffects(t, effects, "append", "later"); n != 0 {
		t.Fatalf("the turned-away call ran %d times", n)
	}
	st := call_(t, cs, gateway.ToolStatus, map[string]any{})
	if strings.Count(text(st), "waits for approval") != 1 {
		t.Fatalf("airlock_status: %q; want only the first call waiting for approval", text(st))
	}
}
