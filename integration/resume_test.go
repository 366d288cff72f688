package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestHTTPUpstreamResumesThroughAirlock: an HTTP upstream (the go-sdk
// server with an event store) closes the SSE stream of a tools/call
// mid-call, as SEP-1699 allows and the conformance suite's
// test_reconnection tool does, and answers afterwards; the first resume
// is answered 503, as a restarting replica behind a load balancer would.
// The agent's call through airlock gets the result, and the tool ran
// once: airlock resumed the stream with Last-Event-ID instead of failing
// the call or sending it again.
func TestHTTPUpstreamResumesThroughAirlock(t *testing.T) {
	t.Parallel()
	var runs, resumes atomic.Int32
	up := mcp.NewServer(&mcp.Implementation{Name: "dropper", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "reconnect"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		if req.Extra == nil || req.Extra.CloseSSEStream == nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no SSE stream to close"}}}, nil, nil
		}
		req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: 10 * time.Millisecond})
		time.Sleep(100 * time.Millisecond)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "after the reconnect"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up },
		&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" && resumes.Add(1) == 1 {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	m, err := manifests.Parse(filepath.Join(t.TempDir(), "dropper.yaml"), []byte(`server:
  name: dropper
  protocol_version: "2025-11-25"
  http:
    url: `+srv.URL+`
tools:
  reconnect: {side_effects: [none], data_access_level: public, risk: low, idempotent: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: allGrants(nil, "tester")})
	cs := s.connect(t, map[string]string{"Authorization": "Bearer tester-key"})
	waitTools(t, cs, "dropper__reconnect")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "dropper__reconnect", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("call through airlock: %v", err)
	}
	if res.IsError || resultText(res) != "after the reconnect" {
		t.Errorf("call through airlock = %q (isError %v), want the upstream's answer after the reconnect", resultText(res), res.IsError)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the upstream tool ran %d times, want once", n)
	}
	if n := resumes.Load(); n != 2 {
		t.Errorf("%d resume GETs with Last-Event-ID, want 2 (a 503, then the resume)", n)
	}
}

// sseEvent is one server-sent event as a raw client reads it.
type sseEvent struct{ name, id, retry, data string }

// readEvents reads events from an SSE body until stop says so or the
// stream ends.
func readEvents(t *testing.T, body io.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []sseEvent
	var ev sseEvent
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if data == nil && ev == (sseEvent{}) {
				continue
			}
			ev.data = strings.Join(data, "\n")
			out = append(out, ev)
			if stop(ev) {
				return out
			}
			ev, data = sseEvent{}, nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.name = value
		case "id":
			ev.id = value
		case "retry":
			ev.retry = value
		case "data":
			data = append(data, value)
		}
	}
	return out
}

// TestGatewayStreamResumes: airlock as a server (SEP-1699). A 2025-11-25
// client's tools/call stream opens with a priming event that has an event
// ID and a retry field; the client drops the connection right after it,
// while the call runs (three progress steps), and resumes with GET +
// Last-Event-ID on the replica that holds the session: every progress
// notification and the result arrive, each once. The same GET on another
// replica gets an empty stream whose comment says where the events are and
// how to get the call's outcome (not an error status, on which a go-sdk
// client fails its whole session).
func TestGatewayStreamResumes(t *testing.T) {
	t.Parallel()
	m, _ := counterManifest(t, "  progress: {side_effects: [none], data_access_level: public, risk: low, idempotent: false, timeout: 60s}\n")
	dir := allGrants(nil, "alice")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir})
	// The replicas share the worker's relay, as airlock gateways with a
	// worker in their process do: progress comes through it.
	r := newReplicas(t, s, 2, gateway.Options{Manifests: []*manifests.Manifest{m}, Directory: dir, Relay: s.hub})
	home, other := r.srvs[0].URL+"/mcp", r.srvs[1].URL+"/mcp"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	sid := ""
	send := func(url, method, body string, hdr map[string]string) *http.Response {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer alice-key")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	isResponse := func(id string) func(sseEvent) bool {
		return func(ev sseEvent) bool {
			return strings.Contains(ev.data, `"id":`+id+`,`) && !strings.Contains(ev.data, `"method"`)
		}
	}

	resp := send(home, http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	sid = resp.Header.Get("Mcp-Session-Id")
	readEvents(t, resp.Body, isResponse("1"))
	resp.Body.Close()
	if sid == "" {
		t.Fatalf("initialize: HTTP %d without a session ID", resp.StatusCode)
	}
	resp = send(home, http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	resp.Body.Close()
	waitFor(t, "the tool to be listed", 30*time.Second, func() bool {
		resp := send(home, http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, nil)
		defer resp.Body.Close()
		evs := readEvents(t, resp.Body, isResponse("2"))
		return len(evs) > 0 && strings.Contains(evs[len(evs)-1].data, "counter__progress")
	})

	resp = send(home, http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__progress","arguments":{"steps":3,"interval_ms":300},"_meta":{"progressToken":"tok"}}}`, nil)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("tools/call: HTTP %d %s", resp.StatusCode, ct)
	}
	first := readEvents(t, resp.Body, func(sseEvent) bool { return true })
	resp.Body.Close() // the connection breaks while the call runs
	if len(first) != 1 || first[0].name != "prime" || first[0].id == "" || first[0].data != "" {
		t.Fatalf("the call's stream began with %+v; want a priming event with an event ID and no data", first)
	}
	if first[0].retry != "1000" {
		t.Errorf("priming event retry = %q, want 1000 (ms)", first[0].retry)
	}

	// Another replica holds none of the stream's events: an empty stream
	// (which ends that call's wait and keeps the session), saying why in
	// a comment.
	resp = send(other, http.MethodGet, "", map[string]string{"Last-Event-ID": first[0].id, "Accept": "text/event-stream"})
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") ||
		!strings.HasPrefix(string(b), ": ") || strings.Contains(string(b), "\ndata:") || !strings.Contains(string(b), "airlock.dev/idempotency-key") {
		t.Errorf("resume on another replica: HTTP %d %q; want an empty event stream whose comment names the idempotency key", resp.StatusCode, b)
	}

	// Until the replica notices the dropped connection the stream is still
	// claimed (409); a client waits the retry field's time anyway.
	var why string
	waitFor(t, "the session's replica to let the stream be resumed", 10*time.Second, func() bool {
		resp = send(home, http.MethodGet, "", map[string]string{"Last-Event-ID": first[0].id, "Accept": "text/event-stream"})
		if resp.StatusCode == http.StatusOK {
			return true
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		why = fmt.Sprintf("HTTP %d %s", resp.StatusCode, b)
		if resp.StatusCode != http.StatusConflict {
			t.Fatalf("resume on the session's replica: %s", why)
		}
		time.Sleep(20 * time.Millisecond)
		return false
	})
	defer resp.Body.Close()
	evs := readEvents(t, resp.Body, isResponse("3"))
	var progress []string
	var result string
	ids := map[string]bool{first[0].id: true}
	for _, ev := range evs {
		if ev.id == "" || ids[ev.id] {
			t.Errorf("resumed event %+v: want a new event ID", ev)
		}
		ids[ev.id] = true
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Progress float64 `json:"progress"`
			} `json:"params"`
			Result *mcp.CallToolResult `json:"result"`
		}
		if err := json.Unmarshal([]byte(ev.data), &msg); err != nil {
			t.Fatalf("event %+v: %v", ev, err)
		}
		switch {
		case msg.Method == "notifications/progress":
			progress = append(progress, fmt.Sprint(msg.Params.Progress))
		case msg.Result != nil:
			result = resultText(msg.Result)
		}
	}
	if got := strings.Join(progress, ","); got != "1,2,3" {
		t.Errorf("progress after the resume: %q, want 1,2,3 each once", got)
	}
	if result != "tok" {
		t.Errorf("result after the resume: %q, want tok (the upstream's answer)", result)
	}
}
