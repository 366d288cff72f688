package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestEveryProtocolRevision: issue 14 item 3. On one endpoint (two replicas
// behind a round-robin proxy), go-sdk v1.8.0 clients forced to each
// revision: 2024-11-05 … 2025-11-25 initialize a session, get the revision
// they asked for and call tools in the session's task; a 2026-07-28 client
// works without a session (server/discover, Mcp-Method / Mcp-Name headers,
// per-request _meta), in the task its Airlock-Task header names, which a
// second client reattaches to, or else in the principal's default task.
func TestEveryProtocolRevision(t *testing.T) {
	t.Parallel()
	m, _ := counterManifest(t, echoTool)
	dir := allGrants(nil, "alice")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir})
	r := newReplicas(t, s, 2, gateway.Options{Manifests: []*manifests.Manifest{m}, Directory: dir})
	ctx := context.Background()

	connect := func(t *testing.T, version string, headers map[string]string) *mcp.ClientSession {
		t.Helper()
		h := map[string]string{"Authorization": "Bearer alice-key"}
		for k, v := range headers {
			h[k] = v
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "rev-" + version, Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: r.url, HTTPClient: newHeaderClient(h)},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("connecting at %s: %v", version, err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		if got := cs.InitializeResult().ProtocolVersion; got != version {
			t.Fatalf("asked for %s, negotiated %s", version, got)
		}
		return cs
	}

	for _, version := range []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			cs := connect(t, version, nil)
			task, _ := cs.InitializeResult().Meta[gateway.MetaTask].(string)
			if cs.ID() == "" || !strings.HasPrefix(task, "task-") {
				t.Fatalf("session %q task %q: want a session bound to a new task", cs.ID(), task)
			}
			waitTools(t, cs, "counter__echo")
			for range 3 { // round robin: both replicas
				res := call(t, cs, "counter__echo", map[string]any{"text": version}, "")
				if res.IsError || text(res) != version || res.Meta[gateway.MetaTask] != task {
					t.Fatalf("call: isError=%v %q in %v; want it in %s", res.IsError, text(res), res.Meta[gateway.MetaTask], task)
				}
			}
			if by := r.proxy.servedBy("tools/call", cs.ID()); len(by) != 2 {
				t.Errorf("calls served by replicas %v; want both", by)
			}
		})
	}

	t.Run("2026-07-28", func(t *testing.T) {
		hdr := map[string]string{gateway.HeaderTask: "t-2026"}
		first := connect(t, gateway.StatelessProtocol, hdr)
		if first.ID() != "" {
			t.Fatalf("a 2026-07-28 client got session %q; want none", first.ID())
		}
		waitTools(t, first, "counter__echo")
		r1 := call(t, first, "counter__echo", map[string]any{"text": "one"}, "")
		if r1.IsError || r1.Meta[gateway.MetaTask] != "t-2026" {
			t.Fatalf("call: isError=%v %q in %v; want task t-2026", r1.IsError, text(r1), r1.Meta[gateway.MetaTask])
		}
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}

		// Another client (another process, replica) reattaches by header.
		second := connect(t, gateway.StatelessProtocol, hdr)
		r2 := call(t, second, "counter__echo", map[string]any{"text": "two"}, "")
		if r2.IsError || r2.Meta[gateway.MetaTask] != "t-2026" {
			t.Fatalf("reattached call: isError=%v %q in %v; want task t-2026", r2.IsError, text(r2), r2.Meta[gateway.MetaTask])
		}
		st := call(t, second, gateway.ToolStatus, map[string]any{}, "")
		if st.IsError || !strings.Contains(text(st), "task t-2026") || !strings.Contains(text(st), "2 call(s)") {
			t.Fatalf("airlock_status of the reattached client: %q; want task t-2026 with both calls", text(st))
		}

		anon := connect(t, gateway.StatelessProtocol, nil)
		a1 := call(t, anon, "counter__echo", map[string]any{"text": "x"}, "")
		a2 := call(t, anon, "counter__echo", map[string]any{"text": "y"}, "")
		if a1.IsError || a2.IsError || a1.Meta[gateway.MetaTask] == a2.Meta[gateway.MetaTask] || a1.Meta[gateway.MetaTask] == "alice-default" {
			t.Fatalf("calls without %s: isError=%v/%v in %v and %v; want each in a task of its own", gateway.HeaderTask, a1.IsError, a2.IsError, a1.Meta[gateway.MetaTask], a2.Meta[gateway.MetaTask])
		}

		// What made it stateless: server/discover, no session, the
		// SEP-2575 headers and _meta on every request.
		if d := r.proxy.requests("server/discover"); len(d) == 0 || d[0].status != http.StatusOK {
			t.Fatalf("server/discover: %+v; want it answered", d)
		}
		calls := 0
		for _, q := range r.proxy.requests("tools/call") {
			if q.header.Get("Mcp-Protocol-Version") != gateway.StatelessProtocol {
				continue
			}
			calls++
			if q.session != "" || q.header.Get("Mcp-Method") != "tools/call" || q.header.Get("Mcp-Name") == "" || q.status != http.StatusOK {
				t.Errorf("a 2026-07-28 tools/call: session %q, Mcp-Method %q, Mcp-Name %q, status %d", q.session, q.header.Get("Mcp-Method"), q.header.Get("Mcp-Name"), q.status)
			}
		}
		if calls < 4 {
			t.Fatalf("%d tools/call at 2026-07-28 passed the proxy, want at least 4", calls)
		}
	})
}

// rpc2026 sends one JSON-RPC request at protocol 2026-07-28, as a
// stateless client does (headers and per-request _meta), declaring the
// Tasks extension when tasks is set, and returns its result or error.
func rpc2026(t *testing.T, url, key, task, method, name string, params map[string]any, tasks bool) (result, rpcErr map[string]any) {
	t.Helper()
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{gateway.ExtTasks: map[string]any{}}
	}
	return rpcCaps(t, url, key, task, method, name, params, caps)
}

// rpcCaps is rpc2026 declaring the client capabilities caps.
func rpcCaps(t *testing.T, url, key, task, method, name string, params map[string]any, caps map[string]any) (result, rpcErr map[string]any) {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["io.modelcontextprotocol/protocolVersion"] = gateway.StatelessProtocol
	meta["io.modelcontextprotocol/clientCapabilities"] = caps
	meta["io.modelcontextprotocol/clientInfo"] = map[string]any{"name": "raw-2026", "version": "1"}
	params["_meta"] = meta
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Protocol-Version", gateway.StatelessProtocol)
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	if task != "" {
		req.Header.Set(gateway.HeaderTask, task)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	// A streamed answer: the JSON-RPC response is the last data line.
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				raw = []byte(d)
			}
		}
	}
	var msg struct {
		Result map[string]any `json:"result"`
		Error  map[string]any `json:"error"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		t.Fatalf("%s: HTTP %d, %s: %v", method, resp.StatusCode, raw, err)
	}
	return msg.Result, msg.Error
}

// TestTasksExtension: issue 14 item 4. A 2026-07-28 client that declares
// the Tasks extension gets a task handle at once for a call waiting for
// approval; tasks/get (on the other replica: the handle is durable, it
// names the call in Temporal) reports it working with what it waits for,
// then completed with the result after approval; another principal cannot
// read it; a client without the extension keeps the pending result.
func TestTasksExtension(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, appendNeedsOps+echoTool)
	dir := allGrants(nil, "alice", "bob")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir, groups: map[string][]string{"ops": {"bob"}}})
	r := newReplicas(t, s, 2, gateway.Options{Manifests: []*manifests.Manifest{m}, Directory: dir, InlineWait: 3 * time.Second})
	a, b := r.srvs[0].URL+"/mcp", r.srvs[1].URL+"/mcp"

	cs := connectStateless(t, r.url, bearer("alice-key"))
	if _, ok := cs.InitializeResult().Capabilities.Extensions[gateway.ExtTasks]; !ok {
		t.Fatalf("server/discover capabilities %+v: want the %s extension", cs.InitializeResult().Capabilities, gateway.ExtTasks)
	}
	waitTools(t, cs, "counter__append")

	start := time.Now()
	res, rerr := rpc2026(t, a, "alice-key", "t-tasks", "tools/call", "counter__append",
		map[string]any{"name": "counter__append", "arguments": map[string]any{"key": "tasked"}}, true)
	if rerr != nil || res["resultType"] != "task" || res["status"] != "working" {
		t.Fatalf("tools/call with the extension: %v %v; want a task handle", res, rerr)
	}
	if waited := time.Since(start); waited >= 3*time.Second {
		t.Errorf("the task handle came after %s, the whole inline wait; want it at once", waited)
	}
	handle, _ := res["taskId"].(string)
	if !strings.HasPrefix(handle, "t-tasks~") {
		t.Fatalf("taskId %q: want t-tasks~<call>", handle)
	}

	got, rerr := rpc2026(t, b, "alice-key", "", "tasks/get", "", map[string]any{"taskId": handle}, true)
	if rerr != nil || got["status"] != "working" || !strings.Contains(fmt.Sprint(got["statusMessage"]), `approval by "ops"`) || got["resultType"] != "complete" {
		t.Fatalf("tasks/get on the other replica: %v %v; want working, waiting for ops", got, rerr)
	}
	if _, rerr := rpc2026(t, b, "bob-key", "", "tasks/get", "", map[string]any{"taskId": handle}, true); rerr == nil ||
		!strings.Contains(fmt.Sprint(rerr["message"]), "another principal") {
		t.Fatalf("bob's tasks/get of alice's task: %v; want it refused", rerr)
	}
	// A second call, cancelled with tasks/cancel while it waits: its
	// approval request is withdrawn and the tool never runs.
	res2, rerr := rpc2026(t, a, "alice-key", "t-tasks", "tools/call", "counter__append",
		map[string]any{"name": "counter__append", "arguments": map[string]any{"key": "cancelled"}}, true)
	handle2, _ := res2["taskId"].(string)
	if rerr != nil || res2["resultType"] != "task" || handle2 == "" {
		t.Fatalf("second tools/call: %v %v", res2, rerr)
	}
	got2, rerr := rpc2026(t, b, "alice-key", "", "tasks/cancel", "", map[string]any{"taskId": handle2}, true)
	if rerr != nil || got2["status"] != "cancelled" {
		t.Fatalf("tasks/cancel: %v %v; want cancelled", got2, rerr)
	}
	if got2, rerr = rpc2026(t, a, "alice-key", "", "tasks/get", "", map[string]any{"taskId": handle2}, true); rerr != nil || got2["status"] != "cancelled" {
		t.Fatalf("tasks/get after tasks/cancel: %v %v", got2, rerr)
	}
	if ar, err := (approver.Local{Temporal: s.client, Namespace: s.srv.Namespace()}).Show(context.Background(), handle2); err != nil || ar.State != api.ApprovalWithdrawn {
		t.Errorf("the cancelled call's approval request: %+v %v; want withdrawn", ar, err)
	}
	if _, rerr := rpc2026(t, b, "alice-key", "", "tasks/cancel", "", map[string]any{"taskId": handle2}, true); rerr == nil ||
		!strings.Contains(fmt.Sprint(rerr["message"]), "already cancelled") {
		t.Errorf("tasks/cancel of a cancelled task: %v", rerr)
	}
	if n := sideEffects(t, effects, "append", "cancelled"); n != 0 {
		t.Errorf("the cancelled call ran %d times", n)
	}
	if n := sideEffects(t, effects, "append", "tasked"); n != 0 {
		t.Fatalf("the tool ran %d times before approval", n)
	}

	approve(t, s, handle) // the handle is the approval request's ID
	waitFor(t, "the task completed", 30*time.Second, func() bool {
		got, rerr = rpc2026(t, a, "alice-key", "", "tasks/get", "", map[string]any{"taskId": handle}, true)
		return rerr == nil && got["status"] == "completed"
	})
	result, _ := got["result"].(map[string]any)
	if !strings.Contains(mustJSON(t, result["structuredContent"]), `"count":1`) || result["isError"] == true {
		t.Fatalf("completed task's result %v; want the tool's result", result)
	}
	if n := sideEffects(t, effects, "append", "tasked"); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}

	// Without the extension: today's pending result, no task handle.
	plain, rerr := rpc2026(t, a, "alice-key", "t-tasks", "tools/call", "counter__append",
		map[string]any{"name": "counter__append", "arguments": map[string]any{"key": "plain"}}, false)
	sc, _ := plain["structuredContent"].(map[string]any)
	if rerr != nil || plain["resultType"] == "task" || sc["status"] != "pending" {
		t.Fatalf("tools/call without the extension: %v %v; want the pending result", plain, rerr)
	}
}
