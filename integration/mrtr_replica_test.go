package integration

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/relay"
	"github.com/airlock-run/airlock/manifests"
)

// TestAsksOnAnyReplica checks an upstream's elicitation in a combined
// deployment (each gateway replica runs a worker, so a request may wait in
// a replica's memory): the answer of an input-required result may reach
// another replica, which sends it through the task to the replica holding
// the request; and a request the upstream makes while only airlock_await
// waits on the call reaches that client — as an input-required result of
// airlock_await (2026-07-28), or on its session (2025-11-25) when it came
// while no client waited at all.
func TestAsksOnAnyReplica(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t, "./integration/testupstream")
	root := t.TempDir()
	y := "server:\n  name: counter\n  protocol_version: \"2025-11-25\"\n  path_roots: [" + root + "]\n  stdio:\n    command: " + bin + "\ntools:\n" +
		"  ask_later: {side_effects: [none], data_access_level: public, risk: low, idempotent: true, elicitation: allow, redact: [username]}\n" +
		"  list_roots: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n"
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "counter.yaml"), []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("manifest: %v", ps)
	}
	key := []byte(gateway.NewSessionKey())
	// Replica A: the stack's gateway and the only worker, sharing a relay.
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, sessionKey: key,
		inlineWait: 2 * time.Second, askTimeout: 45 * time.Second})
	// Replica B: a gateway with a relay of its own (as in a combined
	// deployment) whose worker does not take this call.
	gwB := gateway.New(gateway.Options{Temporal: s.client, Relay: relay.New(), Manifests: []*manifests.Manifest{m}, Upstreams: s.pool,
		Principal: "tester", SessionKey: key, IdleTimeout: time.Hour, Logger: s.log, InlineWait: 2 * time.Second, AskTimeout: 45 * time.Second})
	gwB.Refresh()
	mux := http.NewServeMux()
	mux.Handle("/mcp", gwB.Handler())
	srvB := httptest.NewServer(mux)
	t.Cleanup(srvB.Close)
	urlB := srvB.URL + "/mcp"
	waitTools(t, s.connect(t, nil), "counter__ask_later", "counter__list_roots")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// An upstream's roots/list is answered with the manifest's path_roots,
	// not the roots of the client whose call is running.
	t.Run("roots are the manifest's", func(t *testing.T) {
		c := mcp.NewClient(&mcp.Implementation{Name: "airlock-roots-test", Version: "1"}, nil)
		c.AddRoots(&mcp.Root{URI: "file:///client-private", Name: "client"})
		hc := &http.Client{Transport: headerRT{headers: map[string]string{gateway.HeaderTask: "roots"}}}
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: hc}, sessionProtocol)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res := call(t, cs, "counter__list_roots", map[string]any{"text": "x"}, "")
		if want := "file://" + filepath.ToSlash(root); res.IsError || resultText(res) != want {
			t.Fatalf("the upstream's roots/list got %q (error %v), want the manifest's path_roots %q", resultText(res), res.IsError, want)
		}
	})

	t.Run("answer through another replica", func(t *testing.T) {
		manual := func(url string) *mcp.ClientSession {
			c := mcp.NewClient(&mcp.Implementation{Name: "airlock-replica-test", Version: "1"},
				&mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
			hc := &http.Client{Transport: headerRT{headers: map[string]string{gateway.HeaderTask: "replica-ask"}}}
			cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: gateway.StatelessProtocol})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			return cs
		}
		a, b := manual(s.url), manual(urlB)
		params := &mcp.CallToolParams{Name: "counter__ask_later", Arguments: map[string]any{"message": "which replica?"}}
		first, err := a.CallTool(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if !first.NeedsInput() || len(first.InputRequests) != 1 {
			t.Fatalf("want an input-required result with one request, got %q (needs input %v)", resultText(first), first.NeedsInput())
		}
		answers := mcp.InputResponseMap{}
		for id, r := range first.InputRequests {
			if p, ok := r.(*mcp.ElicitParams); !ok || p.Message != "which replica?" {
				t.Fatalf("input request %s: %#v, want the upstream's elicitation", id, r)
			}
			answers[id] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "secret-user-4711"}}
		}
		res, err := b.CallTool(ctx, &mcp.CallToolParams{Name: params.Name, Arguments: params.Arguments,
			InputResponses: answers, RequestState: first.RequestState})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || res.NeedsInput() || resultText(res) != "accept username:secret-user-4711" {
			t.Fatalf("the answer given to replica B did not reach the request waiting in replica A: %q (error %v)", resultText(res), res.IsError)
		}
		if first.Meta[gateway.MetaCall] != res.Meta[gateway.MetaCall] {
			t.Errorf("the answer ran call %v, want the call that asked, %v", res.Meta[gateway.MetaCall], first.Meta[gateway.MetaCall])
		}
		checkElicitationRecorded(t, s, "replica-ask", "which replica?")
	})

	// The upstream asks delayMS after the call starts, past the 2 s
	// inline wait: while an airlock_await waits (3 s), or while nobody
	// waits (the test waits before calling airlock_await).
	pendingCall := func(t *testing.T, cs *mcp.ClientSession, message string, delayMS int) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__ask_later", Arguments: map[string]any{"message": message, "delay_ms": delayMS}})
		if err != nil {
			t.Fatal(err)
		}
		call, _ := res.Meta[gateway.MetaCall].(string)
		if sc, _ := res.StructuredContent.(map[string]any); sc["status"] != "pending" || call == "" {
			t.Fatalf("want a pending result (the upstream asks after the inline wait), got %q %v", resultText(res), res.StructuredContent)
		}
		return call
	}
	await := func(t *testing.T, cs *mcp.ClientSession, call string) *mcp.CallToolResult {
		t.Helper()
		for {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: gateway.ToolAwait, Arguments: map[string]any{"call": call}})
			if err != nil {
				t.Fatal(err)
			}
			if sc, _ := res.StructuredContent.(map[string]any); sc["status"] != "pending" {
				return res
			}
		}
	}

	t.Run("airlock_await returns input-required", func(t *testing.T) {
		rc := newRelayClientAt(t, s.url, &mcp.ClientSessionOptions{ProtocolVersion: gateway.StatelessProtocol}, map[string]string{gateway.HeaderTask: "await-ask-2026"})
		call := pendingCall(t, rc.cs, "asked while awaiting", 3000)
		res := await(t, rc.cs, call)
		if res.IsError || resultText(res) != "accept username:secret-user-4711" {
			t.Fatalf("airlock_await: %q (error %v); want the tool's answer with the elicited username", resultText(res), res.IsError)
		}
		if _, _, _, e := rc.snapshot(); len(e) != 1 || e[0].Message != "asked while awaiting" {
			t.Fatalf("the client was asked %d times, want once with the upstream's message", len(e))
		}
	})

	t.Run("airlock_await takes a request nobody waited for", func(t *testing.T) {
		const task = "await-ask-session"
		rc := newRelayClientAt(t, s.url, sessionProtocol, map[string]string{gateway.HeaderTask: task})
		call := pendingCall(t, rc.cs, "asked while nobody waited", 4000)
		// The request waits in the activity's heartbeats until a client
		// waits on the call.
		waitFor(t, "the upstream's request in the call's heartbeats", 30*time.Second, func() bool {
			desc, err := s.client.DescribeWorkflowExecution(ctx, task, "")
			if err != nil {
				return false
			}
			for _, pa := range desc.GetPendingActivities() {
				var cp api.CallProgress
				if pa.GetHeartbeatDetails() != nil && converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &cp) == nil && len(cp.Asks) > 0 {
					return true
				}
			}
			return false
		})
		res := await(t, rc.cs, call)
		if res.IsError || resultText(res) != "accept username:secret-user-4711" {
			t.Fatalf("airlock_await: %q (error %v); want the tool's answer with the elicited username", resultText(res), res.IsError)
		}
		if _, _, _, e := rc.snapshot(); len(e) != 1 || !strings.Contains(e[0].Message, "nobody waited") {
			t.Fatalf("the client was asked %d times, want once with the upstream's message", len(e))
		}
	})
}
