package integration

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestTaskOwnership: issue 25 item 1. bob knows the ID of alice's task and
// of her call (an approver or a webhook bridge has seen them) and tries
// every way in: the Airlock-Task header on airlock_status (whole task and
// one call), airlock_await, the state tools, airlock_rollback, a tools/call
// with alice's idempotency key, tasks/get, and a session opened with
// alice's task as its header, replayed on the replica that refused it and
// on another sharing its session key. Each is refused with the same
// message, nothing of alice's task comes back, and her call never runs
// again. alice@corp@ext cannot reach alice@corp's tasks, and each names
// its own default task.
func TestTaskOwnership(t *testing.T) {
	t.Parallel()
	effects := filepath.Join(t.TempDir(), "effects.log")
	m := testupstreamManifest(t, effects)
	dir := allGrants(nil, "alice", "bob", "alice@corp", "alice@corp@ext")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir})
	r := newReplicas(t, s, 2, gateway.Options{Manifests: []*manifests.Manifest{m}, Directory: dir})

	ok := func(res *mcp.CallToolResult, what string) {
		t.Helper()
		if res.IsError {
			t.Fatalf("%s: %s", what, text(res))
		}
	}

	const victim = "alice-payroll"
	alice := connectStateless(t, s.url, map[string]string{"Authorization": "Bearer alice-key", gateway.HeaderTask: victim})
	waitTools(t, alice, "counter__append")
	first := call(t, alice, "counter__append", map[string]any{"key": "salary-secret"}, "k1")
	if first.IsError {
		t.Fatalf("alice's call: %s", text(first))
	}
	firstText := text(first)
	if n := sideEffects(t, effects, "append", "salary-secret"); n != 1 {
		t.Fatalf("alice's call ran %d times, want 1", n)
	}
	ok(call(t, alice, api.ToolStateSet, map[string]any{"key": "plan", "value": "raise-secret"}, ""), "alice sets her state")

	// refused checks one answer of bob's: an error saying the task is not
	// his, with nothing of alice's task in it.
	refused := func(t *testing.T, what string, res *mcp.CallToolResult) {
		t.Helper()
		got := text(res)
		if !res.IsError || !strings.Contains(got, "belongs to another principal") {
			t.Errorf("%s: isError=%v %q; want it refused as another principal's task", what, res.IsError, got)
		}
		for _, leak := range []string{"salary-secret", "raise-secret", "counter__append", "k-k1", firstText} {
			if strings.Contains(got, leak) {
				t.Errorf("%s: the answer %q shows %q of alice's task", what, got, leak)
			}
		}
		if sc := mustJSON(t, res.StructuredContent); strings.Contains(sc, "secret") {
			t.Errorf("%s: structured content %s", what, sc)
		}
	}
	// bob over 2026-07-28 (stateless): each request names the task.
	for name, url := range map[string]string{"replica 0": s.url, "replica 1": r.srvs[1].URL + "/mcp"} {
		t.Run("header "+name, func(t *testing.T) {
			bob := connectStateless(t, url, map[string]string{"Authorization": "Bearer bob-key", gateway.HeaderTask: victim})
			refused(t, "airlock_status", call(t, bob, gateway.ToolStatus, map[string]any{}, ""))
			refused(t, "airlock_status {call}", call(t, bob, gateway.ToolStatus, map[string]any{"call": "k-k1"}, ""))
			refused(t, "airlock_await {call}", call(t, bob, gateway.ToolAwait, map[string]any{"call": "k-k1", "timeout_seconds": 1}, ""))
			refused(t, "airlock_state_get", call(t, bob, api.ToolStateGet, map[string]any{}, ""))
			refused(t, "airlock_state_set", call(t, bob, api.ToolStateSet, map[string]any{"key": "plan", "value": "bob's"}, ""))
			refused(t, "airlock_rollback", call(t, bob, gateway.ToolRollback, map[string]any{"reason": "bob"}, ""))
			// alice's idempotency key: the task has completed that
			// Update ID, and would answer it without its validator.
			refused(t, "tools/call with alice's key", call(t, bob, "counter__append", map[string]any{"key": "salary-secret"}, "k1"))
			refused(t, "tools/call with alice's key, other arguments", call(t, bob, "counter__echo", map[string]any{"text": "x"}, "k1"))
			_, rerr := rpc2026(t, url, "bob-key", "", "tasks/get", "", map[string]any{"taskId": victim + "~k-k1"}, true)
			if msg := fmt.Sprint(rerr["message"]); rerr == nil || !strings.Contains(msg, "belongs to another principal") || strings.Contains(msg, "secret") {
				t.Errorf("tasks/get of alice's call: %v; want it refused", rerr)
			}
		})
	}

	// A session opened naming alice's task is refused, with no session
	// ID; one the old gateway gave anyway would be refused where it is
	// replayed, on this replica and on another with the same key.
	t.Run("refused initialize", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bob","version":"1"}}}`
		resp, got := post(t, r.srvs[0].URL+"/mcp", "bob-key", "", map[string]string{gateway.HeaderTask: victim}, body)
		if !strings.Contains(got, "belongs to another principal") {
			t.Errorf("initialize naming alice's task: %d %s; want it refused", resp.StatusCode, got)
		}
		sid := resp.Header.Get("Mcp-Session-Id")
		if sid != "" {
			t.Errorf("the refused initialize carries Mcp-Session-Id %q; want none", sid)
		}
		if sid == "" {
			return
		}
		for i, srv := range r.srvs {
			for tool, args := range map[string]string{gateway.ToolStatus: `{"call":"k-k1"}`, gateway.ToolAwait: `{"call":"k-k1","timeout_seconds":1}`} {
				call := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args)
				_, got := post(t, srv.URL+"/mcp", "bob-key", sid, nil, call)
				if strings.Contains(got, "salary-secret") || strings.Contains(got, "counter__append") || !strings.Contains(got, "belongs to another principal") {
					t.Errorf("replica %d, %s with the refused session's ID: %s", i, tool, got)
				}
			}
		}
	})

	if n := sideEffects(t, effects, "append", "salary-secret"); n != 1 {
		t.Errorf("alice's call ran %d times after bob's attempts, want once", n)
	}
	if st := taskStatus(t, s, victim); st.Principal != "alice" {
		t.Errorf("the task belongs to %q, want alice", st.Principal)
	}
	// alice herself still reaches everything.
	if res := call(t, alice, gateway.ToolStatus, map[string]any{"call": "k-k1"}, ""); res.IsError || !strings.Contains(text(res), "finished") {
		t.Errorf("alice's own airlock_status {call}: %q", text(res))
	}
	if res := call(t, alice, gateway.ToolAwait, map[string]any{"call": "k-k1"}, ""); res.IsError || text(res) != firstText {
		t.Errorf("alice's own airlock_await: %q, want %q", text(res), firstText)
	}

	// alice@corp@ext against alice@corp: exact names, never a prefix.
	t.Run("issuer-qualified names", func(t *testing.T) {
		corp := connectStateless(t, s.url, map[string]string{"Authorization": "Bearer alice@corp-key", gateway.HeaderTask: "alice@corp-default"})
		if res := call(t, corp, "counter__echo", map[string]any{"text": "corp"}, ""); res.IsError || res.Meta[gateway.MetaTask] != "alice@corp-default" {
			t.Fatalf("alice@corp's call: %v %q; want it in alice@corp-default", res.Meta[gateway.MetaTask], text(res))
		}
		corpNamed := connectStateless(t, s.url, map[string]string{"Authorization": "Bearer alice@corp-key", gateway.HeaderTask: "corp-books"})
		ok(call(t, corpNamed, "counter__echo", map[string]any{"text": "books"}, ""), "alice@corp's named task")
		// Its own default task, named: the @ is allowed there (issue 25, low).
		own := connectStateless(t, s.url, map[string]string{"Authorization": "Bearer alice@corp-key", gateway.HeaderTask: "alice@corp-default"})
		if res := call(t, own, gateway.ToolStatus, map[string]any{}, ""); res.IsError || !strings.Contains(text(res), "task alice@corp-default") {
			t.Errorf("alice@corp naming its own default task: %q", text(res))
		}

		for _, task := range []string{"alice@corp-default", "corp-books"} {
			ext := connectStateless(t, s.url, map[string]string{"Authorization": "Bearer alice@corp@ext-key", gateway.HeaderTask: task})
			for tool, args := range map[string]map[string]any{gateway.ToolStatus: {}, "counter__echo": {"text": "ext"}} {
				// alice@corp-default is refused for its shape (a name with
				// @ is only its principal's to use) or as another's task.
				res := call(t, ext, tool, args, "")
				if got := text(res); !res.IsError || !(strings.Contains(got, "belongs to another principal") || strings.Contains(got, "is not a task ID")) || strings.Contains(got, "corp") && strings.Contains(got, "call(s)") {
					t.Errorf("alice@corp@ext, %s in %s: isError=%v %q; want it refused", tool, task, res.IsError, text(res))
				}
			}
		}
		extOwn := connectStateless(t, s.url, map[string]string{"Authorization": "Bearer alice@corp@ext-key", gateway.HeaderTask: "alice@corp@ext-default"})
		if res := call(t, extOwn, "counter__echo", map[string]any{"text": "ext"}, ""); res.IsError || res.Meta[gateway.MetaTask] != "alice@corp@ext-default" {
			t.Errorf("alice@corp@ext naming its own default task: %v %q", res.Meta[gateway.MetaTask], text(res))
		}
		if st := taskStatus(t, s, "alice@corp-default"); st.Principal != "alice@corp" || st.Calls != 1 {
			t.Errorf("alice@corp-default: principal %q, %d call(s); want alice@corp's one call", st.Principal, st.Calls)
		}
	})
}

// post sends one JSON-RPC message over streamable HTTP with key, an
// optional session ID and extra headers, and returns the response and its
// body.
func post(t *testing.T, url, key, sid string, headers map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Authorization", "Bearer "+key)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestTaskOwnershipDevBinary: issue 25 item 1 against `airlock dev` with
// API keys. bob names alice's task with the Airlock-Task header: his
// airlock_status (whole task and one call) and airlock_await are refused
// and show nothing of it; alice's call ran once.
func TestTaskOwnershipDevBinary(t *testing.T) {
	t.Parallel()
	d := newCounterDev(t, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n"+
		"  append: {side_effects: [write], data_access_level: internal, risk: medium}\n")
	d.writeApprovalsConfig(t, "5s")
	args, base, _ := d.devArgs(t, "--no-ui")
	p := startDev(t, d.bin, args...)
	p.waitHealthy(t, base)

	const victim = "alice-books"
	alice := connectStateless(t, base+"/mcp", map[string]string{"Authorization": "Bearer alice-key", gateway.HeaderTask: victim})
	waitTools(t, alice, "counter__append")
	if res := call(t, alice, "counter__append", map[string]any{"key": "ledger-secret"}, "k1"); res.IsError {
		t.Fatalf("alice's call: %s", text(res))
	}
	bob := connectStateless(t, base+"/mcp", map[string]string{"Authorization": "Bearer bob-key", gateway.HeaderTask: victim})
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{gateway.ToolStatus, map[string]any{}},
		{gateway.ToolStatus, map[string]any{"call": "k-k1"}},
		{gateway.ToolAwait, map[string]any{"call": "k-k1", "timeout_seconds": 1}},
	} {
		res := call(t, bob, c.tool, c.args, "")
		got := text(res) + mustJSON(t, res.StructuredContent)
		if !res.IsError || !strings.Contains(got, "belongs to another principal") || strings.Contains(got, "ledger-secret") || strings.Contains(got, "counter__append") {
			t.Errorf("bob's %s %v in alice's task: isError=%v %q; want it refused, showing nothing", c.tool, c.args, res.IsError, got)
		}
	}
	if n := sideEffects(t, d.effects, "append", "ledger-secret"); n != 1 {
		t.Errorf("alice's call ran %d times, want once", n)
	}
}
