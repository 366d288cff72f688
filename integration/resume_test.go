package integration

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
