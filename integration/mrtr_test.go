package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestAsksAcrossProcesses checks sampling and elicitation when the worker
// runs in another process than the gateway (no relay in common): the
// activity publishes the upstream's request in its heartbeats, the
// gateway asks its client and sends the answer, sealed to the activity's
// key, through the task. A 2026-07-28 client answers an elicitation by
// multi round trip (recorded, masked, in the audit timeline); a session
// client answers sampling on its session; the answer of an input-required
// result may reach another gateway replica than the one that asked; and a
// request nobody answers fails in the upstream after the ask timeout.
func TestAsksAcrossProcesses(t *testing.T) {
	t.Parallel()
	bin, err := buildEverythingServer(t)
	if err != nil {
		t.Fatalf("the go-sdk conformance everything-server does not build: %v", err)
	}
	m := relayManifest(t, bin)
	// The ask timeout is short, for the unanswered request, but leaves the
	// answering round trips time on a machine loaded by the parallel tests.
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, split: true, askTimeout: 10 * time.Second})
	waitTools(t, s.connect(t, nil), "everything__test_elicitation")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("elicitation by multi round trip", func(t *testing.T) {
		mc := newRelayClientAt(t, s.url, &mcp.ClientSessionOptions{ProtocolVersion: gateway.StatelessProtocol}, nil)
		res, err := mc.cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__test_elicitation", Arguments: map[string]any{"message": "who are you, split?"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || !strings.Contains(resultText(res), "username:secret-user-4711") {
			t.Fatalf("elicitation result: %q (error %v)", resultText(res), res.IsError)
		}
		if _, _, _, e := mc.snapshot(); len(e) != 1 || e[0].Message != "who are you, split?" {
			t.Fatalf("the client was asked %d times, want once with the upstream's message", len(e))
		}
		task, _ := res.Meta[gateway.MetaTask].(string)
		checkElicitationRecorded(t, s, task, "who are you, split?")
		// The answer came through the task, sealed (checkElicitationRecorded
		// found no clear copy in any payload).
		signalled := false
		for _, e := range fetchHistory(t, s.client, task, "").Events {
			if e.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == api.SignalCallInput {
				signalled = true
			}
		}
		if !signalled {
			t.Errorf("no %s signal in task %s: the answer did not go through the task", api.SignalCallInput, task)
		}
		// What an auditor runs: the airlock binary's audit show.
		cmd := exec.Command(buildBinary(t, "./cmd/airlock"), "audit", "show", "--temporal-address", s.srv.HostPort(), "--namespace", s.srv.Namespace(), task)
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS=", "AIRLOCK_UI_URL=")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("airlock audit show %s: %v", task, err)
		}
		if !strings.Contains(string(out), "elicitation requested by the upstream") || !strings.Contains(string(out), "who are you, split?") ||
			!strings.Contains(string(out), "[redacted]") || strings.Contains(string(out), "secret-user-4711\"") {
			t.Errorf("airlock audit show does not show the elicitation with its masked answer:\n%s", out)
		}
	})

	t.Run("sampling on a session", func(t *testing.T) {
		rc := newRelayClient(t, s.url)
		res, err := rc.cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__test_sampling", Arguments: map[string]any{"prompt": "say hi across"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || resultText(res) != "LLM response: sampled-by-the-test-client" {
			t.Fatalf("sampling result: %q (error %v)", resultText(res), res.IsError)
		}
	})

	// Two more gateway replicas sharing a session key: the client is asked
	// through one and answers through the other.
	key := []byte(gateway.NewSessionKey())
	replica := func() string {
		gw := gateway.New(gateway.Options{Temporal: s.client, Manifests: []*manifests.Manifest{m}, Upstreams: s.pool,
			Principal: "tester", SessionKey: key, IdleTimeout: time.Hour, Logger: s.log})
		gw.Refresh()
		mux := http.NewServeMux()
		mux.Handle("/mcp", gw.Handler())
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL + "/mcp"
	}
	urlA, urlB := replica(), replica()
	manual := func(url string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "airlock-mrtr-test", Version: "1"},
			&mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: gateway.StatelessProtocol})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	a, b := manual(urlA), manual(urlB)

	t.Run("answer through another replica", func(t *testing.T) {
		first, err := a.CallTool(ctx, &mcp.CallToolParams{Name: "everything__test_elicitation", Arguments: map[string]any{"message": "replica?"}})
		if err != nil {
			t.Fatal(err)
		}
		if !first.NeedsInput() || len(first.InputRequests) != 1 || first.RequestState == "" {
			t.Fatalf("want an input-required result with one request, got %q (needs input %v, %d requests)", resultText(first), first.NeedsInput(), len(first.InputRequests))
		}
		answers := mcp.InputResponseMap{}
		for id, r := range first.InputRequests {
			if p, ok := r.(*mcp.ElicitParams); !ok || p.Message != "replica?" {
				t.Fatalf("input request %s: %#v, want the upstream's elicitation", id, r)
			}
			answers[id] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "secret-user-4711"}}
		}
		res, err := b.CallTool(ctx, &mcp.CallToolParams{Name: "everything__test_elicitation", Arguments: map[string]any{"message": "replica?"},
			InputResponses: answers, RequestState: first.RequestState})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || res.NeedsInput() || !strings.Contains(resultText(res), "username:secret-user-4711") {
			t.Fatalf("the answer given to replica B did not reach the call asked through A: %q (error %v)", resultText(res), res.IsError)
		}
		if first.Meta[gateway.MetaCall] != res.Meta[gateway.MetaCall] {
			t.Errorf("the answer ran call %v, want the call that asked, %v", res.Meta[gateway.MetaCall], first.Meta[gateway.MetaCall])
		}
	})

	// A client of the Tasks extension gets a task handle; tasks/get reports
	// the upstream's request (input_required) and tasks/update answers it.
	t.Run("tasks extension", func(t *testing.T) { checkTasksAsk(t, s, "tasks-ask") })

	t.Run("no answer", func(t *testing.T) {
		params := &mcp.CallToolParams{Name: "everything__test_elicitation", Arguments: map[string]any{"message": "anyone?"},
			Meta: mcp.Meta{gateway.MetaIdempotencyKey: "unanswered-1"}}
		first, err := a.CallTool(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if !first.NeedsInput() {
			t.Fatalf("want an input-required result, got %q", resultText(first))
		}
		// Never answered: after the ask timeout the upstream gets an error
		// and the call ends; the same key collects its result.
		var res *mcp.CallToolResult
		waitFor(t, "the unanswered call to end", time.Minute, func() bool {
			res, err = a.CallTool(ctx, params)
			return err == nil && !res.NeedsInput()
		})
		if !strings.Contains(resultText(res), "did not answer") {
			t.Fatalf("want the upstream's error saying the client did not answer, got %q (error %v)", resultText(res), res.IsError)
		}
		task, _ := res.Meta[gateway.MetaTask].(string)
		if hist := historyText(t, s, task); !strings.Contains(hist, `"Refused":"the client did not answer the elicitation request`) {
			t.Errorf("the refused elicitation is not recorded in the task's history:\n%s", hist)
		}
	})
}

// checkTasksAsk: a client of the Tasks extension calls an eliciting tool in
// task; it gets a task handle, tasks/get reports the upstream's request
// (input_required), tasks/update answers it, and the call completes with
// the answer, recorded masked.
func checkTasksAsk(t *testing.T, s *stack, task string) {
	t.Helper()
	res, rerr := rpc2026(t, s.url, testKey, task, "tools/call", "everything__test_elicitation",
		map[string]any{"name": "everything__test_elicitation", "arguments": map[string]any{"message": "task?"}}, true)
	handle, _ := res["taskId"].(string)
	if rerr != nil || res["resultType"] != "task" || handle == "" {
		t.Fatalf("tools/call of a Tasks client: %v %v; want a task handle", res, rerr)
	}
	get := func() map[string]any {
		got, rerr := rpc2026(t, s.url, testKey, "", "tasks/get", "", map[string]any{"taskId": handle}, true)
		if rerr != nil {
			t.Fatalf("tasks/get: %v", rerr)
		}
		return got
	}
	var st map[string]any
	waitFor(t, "the task to ask for input", 30*time.Second, func() bool { st = get(); return st["status"] == "input_required" })
	reqs, _ := st["inputRequests"].(map[string]any)
	if len(reqs) != 1 {
		t.Fatalf("tasks/get: %v; want one input request", st)
	}
	answers := map[string]any{}
	for id, r := range reqs {
		ir, _ := r.(map[string]any)
		params, _ := ir["params"].(map[string]any)
		if ir["method"] != "elicitation/create" || params["message"] != "task?" {
			t.Fatalf("input request %s: %v; want the upstream's elicitation", id, r)
		}
		answers[id] = map[string]any{"action": "accept", "content": map[string]any{"username": "secret-user-4711"}}
	}
	if _, rerr := rpc2026(t, s.url, testKey, "", "tasks/update", "", map[string]any{"taskId": handle, "inputResponses": map[string]any{"ask-nope": answers}}, true); rerr == nil {
		t.Errorf("tasks/update for a request that does not wait was accepted")
	}
	if _, rerr := rpc2026(t, s.url, testKey, "", "tasks/update", "", map[string]any{"taskId": handle, "inputResponses": answers}, true); rerr != nil {
		t.Fatalf("tasks/update: %v", rerr)
	}
	waitFor(t, "the task to complete", 30*time.Second, func() bool { st = get(); return st["status"] == "completed" })
	if b, _ := json.Marshal(st["result"]); !strings.Contains(string(b), "username:secret-user-4711") {
		t.Fatalf("completed task's result: %s; want the tool's answer with the elicited username", b)
	}
	checkElicitationRecorded(t, s, task, "task?")
}
