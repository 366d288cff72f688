package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
		if res := call(t, anon, "counter__echo", map[string]any{"text": "x"}, ""); res.IsError || res.Meta[gateway.MetaTask] != "alice-default" {
			t.Fatalf("call without %s: isError=%v in %v; want alice's default task alice-default", gateway.HeaderTask, res.IsError, res.Meta[gateway.MetaTask])
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
