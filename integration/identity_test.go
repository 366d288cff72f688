package integration

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/manifests"
)

// twoPrincipals: alice and bob, both allowed everything, different keys.
func twoPrincipals() *identity.Directory { return allGrants(nil, "alice", "bob") }

func bearer(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }

// TestIdentityAttacks: unauthenticated and wrongly authenticated requests
// get 401; a session ID or a task of one principal cannot be used by
// another.
func TestIdentityAttacks(t *testing.T) {
	t.Parallel()
	m := testupstreamManifest(t, filepath.Join(t.TempDir(), "effects.log"))
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: twoPrincipals()})

	// 401 without a key or with a wrong one, with WWW-Authenticate.
	for name, hdr := range map[string]map[string]string{"no key": {}, "wrong key": bearer("mallory-key")} {
		req, _ := http.NewRequest("POST", s.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `Bearer realm="airlock"`) {
			t.Errorf("%s: status %d, WWW-Authenticate %q, body %s", name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
		}
	}
	// The go-sdk client without a key cannot connect.
	c := mcp.NewClient(&mcp.Implementation{Name: "anon", Version: "1"}, nil)
	if _, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url}, nil); err == nil {
		t.Error("a client without a key connected")
	}

	alice := connectURL(t, s.url, bearer("alice-key"))
	waitTools(t, alice, "counter__echo")
	res := call(t, alice, "counter__echo", map[string]any{"text": "mine"}, "")
	if res.IsError {
		t.Fatalf("alice: %s", text(res))
	}
	aliceTask, _ := res.Meta[gateway.MetaTask].(string)

	// bob presents alice's session ID: 403.
	sid := alice.ID()
	req, _ := http.NewRequest("POST", s.url, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Authorization", "Bearer bob-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "another principal") {
		t.Fatalf("bob with alice's session: %d %s", resp.StatusCode, body)
	}

	// bob names alice's task when connecting: refused.
	c = mcp.NewClient(&mcp.Implementation{Name: "bob", Version: "1"}, nil)
	hc := &http.Client{Transport: headerRT{headers: map[string]string{"Authorization": "Bearer bob-key", gateway.HeaderTask: aliceTask}}}
	_, err = c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: hc}, sessionProtocol)
	if err == nil || !strings.Contains(err.Error(), "belongs to another principal") {
		t.Fatalf("bob reattaching to alice's task: %v", err)
	}

	// A stateless request naming alice's task is refused by the workflow.
	stateless := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.gw.Server() }, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httpServer(t, gateway.Edge(twoPrincipals(), stateless))
	bob := connectStateless(t, srv, map[string]string{"Authorization": "Bearer bob-key", gateway.HeaderTask: aliceTask})
	res = call(t, bob, "counter__echo", map[string]any{"text": "theirs"}, "")
	if !res.IsError || !strings.Contains(text(res), "belongs to another principal") {
		t.Fatalf("bob calling in alice's task: isError=%v %q", res.IsError, text(res))
	}
	// ...while bob's own calls work, in a task of their own.
	bob2 := connectStateless(t, srv, bearer("bob-key"))
	res = call(t, bob2, "counter__echo", map[string]any{"text": "bob's"}, "")
	if task, _ := res.Meta[gateway.MetaTask].(string); res.IsError || task == aliceTask || !strings.HasPrefix(task, "task-") {
		t.Fatalf("bob's own call: isError=%v task=%v %s", res.IsError, res.Meta[gateway.MetaTask], text(res))
	}
}

// httpServer serves h on a loopback test server and returns its URL.
func httpServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestDefaultTaskCannotBeSquatted: issue 13 item 7. bob tries to start
// alice's default task before alice does, by session and by stateless
// request; both are refused before any workflow starts, and alice's own
// stateless call then runs in alice-default, which belongs to her. A task
// alice names herself stays hers: bob calling in it is refused.
func TestDefaultTaskCannotBeSquatted(t *testing.T) {
	t.Parallel()
	m := testupstreamManifest(t, filepath.Join(t.TempDir(), "effects.log"))
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: twoPrincipals()})
	stateless := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.gw.Server() }, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httpServer(t, gateway.Edge(twoPrincipals(), stateless))

	// bob's session naming alice-default.
	c := mcp.NewClient(&mcp.Implementation{Name: "bob", Version: "1"}, nil)
	hc := &http.Client{Transport: headerRT{headers: map[string]string{"Authorization": "Bearer bob-key", gateway.HeaderTask: "alice-default"}}}
	if _, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: hc}, sessionProtocol); err == nil ||
		!strings.Contains(err.Error(), "reserved") {
		t.Fatalf("bob's session naming alice-default: %v; want it refused as reserved", err)
	}
	// bob's stateless call naming alice-default.
	bob := connectStateless(t, srv, map[string]string{"Authorization": "Bearer bob-key", gateway.HeaderTask: "alice-default"})
	waitTools(t, bob, "counter__echo")
	res := call(t, bob, "counter__echo", map[string]any{"text": "squat"}, "")
	if !res.IsError || !strings.Contains(text(res), "reserved") {
		t.Fatalf("bob's stateless call in alice-default: isError=%v %q; want it refused as reserved", res.IsError, text(res))
	}
	if _, err := s.client.DescribeWorkflowExecution(context.Background(), "alice-default", ""); err == nil {
		t.Fatal("alice-default exists after bob's attempts; want no workflow started")
	}

	// alice's default task is hers (named: a request naming no task gets
	// a task of its own).
	alice := connectStateless(t, srv, map[string]string{"Authorization": "Bearer alice-key", gateway.HeaderTask: "alice-default"})
	res = call(t, alice, "counter__echo", map[string]any{"text": "mine"}, "")
	if res.IsError || res.Meta[gateway.MetaTask] != "alice-default" {
		t.Fatalf("alice's call: isError=%v task=%v %q; want it run in alice-default", res.IsError, res.Meta[gateway.MetaTask], text(res))
	}
	if st := taskStatus(t, s, "alice-default"); st.Principal != "alice" {
		t.Fatalf("alice-default belongs to %q, want alice", st.Principal)
	}

	// A task alice names is hers too: bob cannot call in it.
	alice2 := connectStateless(t, srv, map[string]string{"Authorization": "Bearer alice-key", gateway.HeaderTask: "alice-named"})
	if res = call(t, alice2, "counter__echo", map[string]any{"text": "named"}, ""); res.IsError {
		t.Fatalf("alice's named task: %q", text(res))
	}
	bob2 := connectStateless(t, srv, map[string]string{"Authorization": "Bearer bob-key", gateway.HeaderTask: "alice-named"})
	if res = call(t, bob2, "counter__echo", map[string]any{"text": "theirs"}, ""); !res.IsError || !strings.Contains(text(res), "belongs to another principal") {
		t.Fatalf("bob calling in alice-named: isError=%v %q", res.IsError, text(res))
	}
}
