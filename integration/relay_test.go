package integration

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/timeline"
	"github.com/airlock-run/airlock/manifests"
)

// relayManifest declares the everything-server's tools that report
// progress, log, sample and elicit. test_elicitation may elicit, with the
// answer's username masked; test_elicitation_sep1034_defaults may not.
func relayManifest(t *testing.T, bin string) *manifests.Manifest {
	t.Helper()
	const low = "side_effects: [none], data_access_level: public, risk: low, idempotent: true"
	// Its tools sample and elicit with a request during the call, which a
	// server may send on 2025-11-25 but not on 2026-07-28.
	y := "server:\n  name: everything\n  protocol_version: \"2025-11-25\"\n  stdio:\n    command: " + bin + "\ntools:\n" +
		"  test_tool_with_progress: {" + low + "}\n" +
		"  test_tool_with_logging: {" + low + "}\n" +
		"  test_sampling: {" + low + ", sampling: allow}\n" +
		"  test_elicitation: {" + low + ", elicitation: allow, redact: [username]}\n" +
		"  test_elicitation_sep1034_defaults: {" + low + "}\n"
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "everything.yaml"), []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("everything manifest: %v", ps)
	}
	return m
}

// relayClient is an MCP client of the gateway that records what the
// gateway relays to it and answers sampling and elicitation.
type relayClient struct {
	mu        sync.Mutex
	progress  []*mcp.ProgressNotificationParams
	logs      []*mcp.LoggingMessageParams
	sampled   []*mcp.CreateMessageParams
	elicited  []*mcp.ElicitParams
	cs        *mcp.ClientSession
	sessionMu sync.Mutex
}

func newRelayClient(t *testing.T, url string) *relayClient {
	t.Helper()
	return newRelayClientAt(t, url, sessionProtocol, nil)
}

// newRelayClientAt is newRelayClient speaking the revision opts names (a
// 2026-07-28 client answers sampling and elicitation by multi round trip),
// sending headers too.
func newRelayClientAt(t *testing.T, url string, opts *mcp.ClientSessionOptions, headers map[string]string) *relayClient {
	t.Helper()
	rc := &relayClient{}
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-relay-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			rc.mu.Lock()
			rc.progress = append(rc.progress, r.Params)
			rc.mu.Unlock()
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			rc.mu.Lock()
			rc.logs = append(rc.logs, r.Params)
			rc.mu.Unlock()
		},
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			rc.mu.Lock()
			rc.sampled = append(rc.sampled, r.Params)
			rc.mu.Unlock()
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: "sampled-by-the-test-client"}}, nil
		},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			rc.mu.Lock()
			rc.elicited = append(rc.elicited, r.Params)
			rc.mu.Unlock()
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "secret-user-4711"}}, nil
		},
	})
	h := map[string]string{"Authorization": "Bearer " + testKey}
	for k, v := range headers {
		h[k] = v
	}
	hc := &http.Client{Transport: headerRT{headers: h}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A session (2025-11-25): the gateway sends sampling and elicitation to
	// the client as requests on it; on 2026-07-28 (stateless) as an
	// input-required result, which the go-sdk client answers by calling
	// again with the answers (its multi round trip middleware).
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, opts)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	rc.cs = cs
	return rc
}

func (rc *relayClient) snapshot() (p []*mcp.ProgressNotificationParams, l []*mcp.LoggingMessageParams, s []*mcp.CreateMessageParams, e []*mcp.ElicitParams) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append(p, rc.progress...), append(l, rc.logs...), append(s, rc.sampled...), append(e, rc.elicited...)
}

func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestRelay checks, against the go-sdk conformance everything-server behind
// airlock, that what an upstream sends during a call reaches the client
// that made it: the client's progress token reaches the upstream and its
// progress comes back in order; log messages arrive at the level the
// client set; sampling and elicitation are forwarded when the tool's
// manifest allows them, refused when it does not, and recorded in the
// task's history with the answer masked.
func TestRelay(t *testing.T) {
	t.Parallel()
	bin, err := buildEverythingServer(t)
	if err != nil {
		t.Fatalf("the go-sdk conformance everything-server does not build: %v", err)
	}
	m := relayManifest(t, bin)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	waitTools(t, s.connect(t, nil), "everything__test_tool_with_progress")
	rc := newRelayClient(t, s.url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	call := func(name string, args map[string]any, meta mcp.Meta) *mcp.CallToolResult {
		t.Helper()
		res, err := rc.cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__" + name, Arguments: args, Meta: meta})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}

	t.Run("progress", func(t *testing.T) {
		res := call("test_tool_with_progress", nil, mcp.Meta{"progressToken": "client-token-1"})
		if res.IsError || resultText(res) != "client-token-1" {
			t.Fatalf("the upstream did not get the client's progress token: result %q (error %v)", resultText(res), res.IsError)
		}
		var got []*mcp.ProgressNotificationParams
		waitFor(t, "three progress notifications", 10*time.Second, func() bool {
			got, _, _, _ = rc.snapshot()
			return len(got) >= 3
		})
		for i, want := range []float64{0, 50, 100} {
			if got[i].Progress != want || got[i].Total != 100 || got[i].ProgressToken != "client-token-1" {
				t.Errorf("progress %d: got %v/%v token %v, want %v/100 token client-token-1", i, got[i].Progress, got[i].Total, got[i].ProgressToken, want)
			}
		}
		// A numeric token (JSON number, as most clients send) too.
		res = call("test_tool_with_progress", nil, mcp.Meta{"progressToken": 7})
		if res.IsError || resultText(res) != "7" {
			t.Fatalf("the upstream did not get the client's numeric progress token: result %q (error %v)", resultText(res), res.IsError)
		}
		waitFor(t, "three more progress notifications", 10*time.Second, func() bool {
			got, _, _, _ = rc.snapshot()
			return len(got) >= 6
		})
		for i, want := range []float64{0, 50, 100} {
			if p := got[3+i]; p.Progress != want || p.ProgressToken != float64(7) {
				t.Errorf("progress %d with token 7: got %v token %v (%T)", i, p.Progress, p.ProgressToken, p.ProgressToken)
			}
		}
	})

	t.Run("logging", func(t *testing.T) {
		if err := rc.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "error"}); err != nil {
			t.Fatalf("logging/setLevel: %v", err)
		}
		call("test_tool_with_logging", nil, nil) // info messages: filtered out
		if err := rc.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatalf("logging/setLevel: %v", err)
		}
		call("test_tool_with_logging", nil, nil)
		var logs []*mcp.LoggingMessageParams
		waitFor(t, "three log messages", 10*time.Second, func() bool {
			_, logs, _, _ = rc.snapshot()
			return len(logs) >= 3
		})
		want := []string{"Tool execution started", "Tool processing data", "Tool execution completed"}
		if len(logs) != 3 {
			t.Fatalf("got %d log messages, want the 3 of the second call only (the first was below the client's level)", len(logs))
		}
		for i, l := range logs {
			if l.Data != want[i] || l.Level != "info" {
				t.Errorf("log %d: %v %v, want info %q", i, l.Level, l.Data, want[i])
			}
		}
	})

	t.Run("sampling", func(t *testing.T) {
		res := call("test_sampling", map[string]any{"prompt": "say hi"}, nil)
		if res.IsError || resultText(res) != "LLM response: sampled-by-the-test-client" {
			t.Fatalf("sampling result: %q (error %v)", resultText(res), res.IsError)
		}
		_, _, sampled, _ := rc.snapshot()
		if len(sampled) != 1 || sampled[0].Messages[0].Content.(*mcp.TextContent).Text != "say hi" {
			t.Fatalf("the client was asked to sample %d times, want once with the prompt", len(sampled))
		}
	})

	t.Run("elicitation", func(t *testing.T) {
		res := call("test_elicitation", map[string]any{"message": "who are you?"}, nil)
		if res.IsError || !strings.Contains(resultText(res), "username:secret-user-4711") {
			t.Fatalf("elicitation result: %q (error %v)", resultText(res), res.IsError)
		}
		task, _ := res.Meta[gateway.MetaTask].(string)
		checkElicitationRecorded(t, s, task, "who are you?")
	})

	t.Run("elicitation denied by the manifest", func(t *testing.T) {
		_, _, _, before := rc.snapshot()
		res := call("test_elicitation_sep1034_defaults", nil, nil)
		_, _, _, after := rc.snapshot()
		if len(after) != len(before) {
			t.Fatalf("the client was asked although the manifest does not allow elicitation")
		}
		if !res.IsError || !strings.Contains(resultText(res), "elicitation: allow") {
			t.Fatalf("want an error result saying the manifest does not allow elicitation, got %q (error %v)", resultText(res), res.IsError)
		}
	})

	// A 2026-07-28 client has no session to take the upstream's request:
	// the call answers input-required with it, the go-sdk client answers
	// by calling again with the answer, and the same call (still waiting
	// in its activity) goes on with it.
	mc := newRelayClientAt(t, s.url, &mcp.ClientSessionOptions{ProtocolVersion: gateway.StatelessProtocol}, nil)
	t.Run("elicitation by multi round trip", func(t *testing.T) {
		res, err := mc.cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__test_elicitation", Arguments: map[string]any{"message": "who are you, stateless?"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || !strings.Contains(resultText(res), "username:secret-user-4711") {
			t.Fatalf("elicitation result: %q (error %v)", resultText(res), res.IsError)
		}
		if _, _, _, e := mc.snapshot(); len(e) != 1 || e[0].Message != "who are you, stateless?" {
			t.Fatalf("the 2026-07-28 client was asked %d times, want once with the upstream's message", len(e))
		}
		task, _ := res.Meta[gateway.MetaTask].(string)
		checkElicitationRecorded(t, s, task, "who are you, stateless?")
	})
	t.Run("elicitation for a Tasks client", func(t *testing.T) { checkTasksAsk(t, s, "relay-tasks-ask") })
	t.Run("sampling by multi round trip", func(t *testing.T) {
		res, err := mc.cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__test_sampling", Arguments: map[string]any{"prompt": "say hi statelessly"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || resultText(res) != "LLM response: sampled-by-the-test-client" {
			t.Fatalf("sampling result: %q (error %v)", resultText(res), res.IsError)
		}
		if _, _, sampled, _ := mc.snapshot(); len(sampled) != 1 {
			t.Fatalf("the 2026-07-28 client was asked to sample %d times, want once", len(sampled))
		}
	})
}

// checkElicitationRecorded checks that task's history, and the audit
// timeline rendered from it (what airlock audit show prints), hold the
// elicitation with message msg and its answer masked by redact: [username].
func checkElicitationRecorded(t *testing.T, s *stack, task, msg string) {
	t.Helper()
	hist := historyText(t, s, task)
	// The call's result (the tool's own text) holds the username; the
	// recorded exchange holds the request and the masked answer.
	if !strings.Contains(hist, `"Kind":"elicitation","Request":{"mode":"form","message":"`+msg+`"`) ||
		!strings.Contains(hist, `"Answer":{"action":"accept","content":{"username":"[redacted]"}}`) {
		t.Errorf("the elicitation and its masked answer are not in the task's history:\n%s", hist)
	}
	if strings.Contains(hist, `"username":"secret-user-4711"`) {
		t.Errorf("the task's history holds the elicited answer unmasked; the manifest's redact: [username] should mask it")
	}
	tl, err := timeline.Build(fetchHistory(t, s.client, task, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	var audit strings.Builder
	if err := timeline.Render(&audit, tl, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(audit.String(), "elicitation requested by the upstream") || !strings.Contains(audit.String(), "[redacted]") ||
		strings.Contains(audit.String(), `"username":"secret-user-4711"`) {
		t.Errorf("the audit timeline does not show the elicitation with its masked answer:\n%s", audit.String())
	}
}

// historyText is the data of every payload in a task's history (activity
// and local activity results included), concatenated.
func historyText(t *testing.T, s *stack, task string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := s.client.GetWorkflowHistory(ctx, task, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var b strings.Builder
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", task, err)
		}
		payloads(ev.ProtoReflect(), &b)
	}
	return b.String()
}

// payloads appends the data of every Payload message under m to b.
func payloads(m protoreflect.Message, b *strings.Builder) {
	if p, ok := m.Interface().(*commonpb.Payload); ok {
		b.Write(p.GetData())
		b.WriteByte('\n')
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			for i := 0; i < v.List().Len(); i++ {
				payloads(v.List().Get(i).Message(), b)
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				payloads(mv.Message(), b)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Kind() == protoreflect.MessageKind:
			payloads(v.Message(), b)
		}
		return true
	})
}

// TestCancelCall checks that a client's notifications/cancelled for a
// running call reaches the upstream (its tool sees its context cancelled)
// and that the task records the call as cancelled; a call of the same
// session that is not cancelled is unaffected.
func TestCancelCall(t *testing.T) {
	t.Parallel()
	effects := filepath.Join(t.TempDir(), "effects.log")
	bin := buildBinary(t, "./integration/testupstream")
	y := "server:\n  name: counter\n  stdio:\n    command: " + bin + "\n    env:\n      SIDE_EFFECT_LOG: " + effects + "\ntools:\n" +
		"  wait: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n" +
		"  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n"
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "counter.yaml"), []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__wait")
	task, _ := cs.InitializeResult().Meta[gateway.MetaTask].(string)
	if task == "" {
		t.Fatal("initialize result names no task")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__wait", Arguments: map[string]any{"key": "k1"}})
		done <- err
	}()
	logHas := func(line string) bool {
		b, _ := os.ReadFile(effects)
		return slices.Contains(strings.Split(strings.TrimSpace(string(b)), "\n"), line)
	}
	waitFor(t, "the upstream tool to start", 30*time.Second, func() bool { return logHas("wait-started k1") })
	cancel() // the go-sdk client sends notifications/cancelled
	if err := <-done; err == nil {
		t.Fatal("the cancelled call returned no error to its client")
	}
	waitFor(t, "the upstream tool to see the cancellation", 30*time.Second, func() bool { return logHas("wait-cancelled k1") })
	if logHas("wait-done k1") {
		t.Fatal("the upstream tool ran to its end")
	}
	waitFor(t, "the call recorded as cancelled in the task's history", 30*time.Second, func() bool {
		return strings.Contains(historyText(t, s, task), `"Tool":"counter__wait","Outcome":"cancelled"`)
	})

	// The session goes on.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "counter__echo", Arguments: map[string]any{"text": "still here"}})
	if err != nil || res.IsError {
		t.Fatalf("a call after the cancelled one: %v %v", err, res)
	}
}

// TestCancelApprovalWait checks that a client's notifications/cancelled
// for a call waiting for approval withdraws the request (nobody can
// approve it any more, the tool never runs) and that the task records the
// call as cancelled.
func TestCancelApprovalWait(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, appendNeedsOps)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, groups: map[string][]string{"ops": {"bob"}}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__append")
	task, _ := cs.InitializeResult().Meta[gateway.MetaTask].(string)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": "k1"},
			Meta: mcp.Meta{gateway.MetaIdempotencyKey: "cancel-me"}})
		done <- err
	}()
	reqID := task + "~k-cancel-me"
	bg := context.Background()
	waitFor(t, "the approval request", 30*time.Second, func() bool {
		ar, err := approver.Lookup(bg, s.client, reqID)
		return err == nil && ar.State == api.ApprovalPending
	})
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled call returned no error to its client")
	}
	waitFor(t, "the request withdrawn", 30*time.Second, func() bool {
		ar, err := approver.Lookup(bg, s.client, reqID)
		return err == nil && ar.State == api.ApprovalWithdrawn
	})
	ar, _ := approver.Lookup(bg, s.client, reqID)
	if _, err := approver.Deliver(bg, s.client, "late-bob", api.DecideRequest{RequestID: ar.ID, Digest: ar.Digest, Approver: "bob", Approve: true, Via: "cli"}); err == nil {
		t.Error("bob approved a withdrawn request")
	}
	hist := historyText(t, s, task)
	if !strings.Contains(hist, `"Tool":"counter__append","Outcome":"cancelled"`) || !strings.Contains(hist, "the client sent notifications/cancelled") {
		t.Errorf("the task's history does not record the call as cancelled by the client")
	}
	if b, _ := os.ReadFile(effects); strings.Contains(string(b), "append k1") {
		t.Errorf("the tool ran although its request was withdrawn: %s", b)
	}
}

// TestProgressAcrossProcesses checks the path for a gateway without a
// worker in its process: the worker's activity heartbeats its upstream's
// latest progress and the gateway, reading the running call's heartbeats,
// relays it to the client in order (sampling and elicitation take the
// same way out: TestAsksAcrossProcesses).
func TestProgressAcrossProcesses(t *testing.T) {
	t.Parallel()
	m, _ := counterManifest(t,
		"  progress: {side_effects: [none], data_access_level: public, risk: medium, idempotent: false, timeout: 60s, heartbeat_timeout: 1s}\n")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, split: true})
	waitTools(t, s.connect(t, nil), "counter__progress")
	rc := newRelayClient(t, s.url)
	if err := rc.cs.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	res, err := rc.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "counter__progress",
		Arguments: map[string]any{"steps": 6, "interval_ms": 1000}, Meta: mcp.Meta{"progressToken": "split-1"}})
	if err != nil || res.IsError {
		t.Fatalf("progress call: %v %v", err, res)
	}
	if got := resultText(res); got != "split-1" {
		t.Errorf("the upstream got progress token %q, want the client's split-1", got)
	}
	got, _, _, _ := rc.snapshot()
	if len(got) == 0 {
		t.Fatal("no progress reached the client from the call's heartbeats")
	}
	last := 0.0
	for _, p := range got {
		if p.ProgressToken != "split-1" || p.Total != 6 || p.Progress <= last {
			t.Errorf("progress %v/%v token %v after %v: want increasing values of 6 with token split-1", p.Progress, p.Total, p.ProgressToken, last)
		}
		last = p.Progress
	}
	t.Logf("%d of 6 progress notifications relayed from heartbeats", len(got))
	// The upstream's log messages came the same way, each once, in order.
	_, logs, _, _ := rc.snapshot()
	var steps []string
	for _, l := range logs {
		if s, ok := l.Data.(string); ok && strings.HasPrefix(s, "step ") {
			steps = append(steps, s)
		}
	}
	if len(steps) == 0 {
		t.Fatal("no upstream log message reached the client from the call's heartbeats")
	}
	for i := 1; i < len(steps); i++ {
		if steps[i] <= steps[i-1] {
			t.Errorf("log messages out of order or repeated: %q", steps)
		}
	}
	t.Logf("%d of 6 log messages relayed from heartbeats: %q", len(steps), steps)
}
