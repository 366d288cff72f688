package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/manifests"
)

// scriptedUpstream is a streamable HTTP MCP server written by hand, so
// that a test decides byte for byte what each SSE stream of a tools/call
// carries and when it ends. The call's POST stream is posts[0]; each GET
// with Last-Event-ID is answered by the next entry of resumes.
type scriptedUpstream struct {
	t       *testing.T
	post    func(w http.ResponseWriter, id string)
	resumes []func(w http.ResponseWriter, id string)

	mu          sync.Mutex
	calls       int      // tools/call POSTs received
	lastEventID []string // the Last-Event-ID of each resume GET
}

func (s *scriptedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodDelete:
		return
	case http.MethodGet:
		leid := r.Header.Get("Last-Event-ID")
		if leid == "" {
			http.Error(w, "no standalone stream", http.StatusMethodNotAllowed)
			return
		}
		if r.Header.Get("Mcp-Session-Id") != "sess-1" || r.Header.Get("X-Api-Key") != "secret" {
			s.t.Errorf("resume GET without the session or the manifest header: %v", r.Header)
		}
		s.mu.Lock()
		n := len(s.lastEventID)
		s.lastEventID = append(s.lastEventID, leid)
		s.mu.Unlock()
		if n >= len(s.resumes) {
			s.t.Errorf("resume %d (Last-Event-ID %q) not scripted", n+1, leid)
			http.Error(w, "unscripted", http.StatusBadRequest)
			return
		}
		s.resumes[n](w, "")
		return
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch msg.Method {
	case "initialize":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", "sess-1")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"scripted","version":"1"}}}`, msg.ID)
	case "tools/list":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"drop","inputSchema":{"type":"object"}}]}}`, msg.ID)
	case "tools/call":
		s.mu.Lock()
		s.calls++
		s.mu.Unlock()
		s.post(w, string(msg.ID))
	default:
		w.WriteHeader(http.StatusAccepted)
	}
}

func (s *scriptedUpstream) counts() (calls int, leids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, append([]string(nil), s.lastEventID...)
}

// sse starts an event stream and writes events, flushing each; the
// handler's return ends the stream.
func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, e := range events {
		io.WriteString(w, e)
		w.(http.Flusher).Flush()
	}
}

func status(code int) func(http.ResponseWriter, string) {
	return func(w http.ResponseWriter, _ string) { http.Error(w, "scripted", code) }
}

const (
	progress1 = "id: e1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"tok\",\"progress\":1}}\n\n"
	progress2 = "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"tok\",\"progress\":2}}\n\n"
	priming   = "id: e0\nretry: 5\ndata:\n\n"
)

// result is the call's response event; the scripted server does not know
// the id the client picked until the POST, so resumes use callIDHolder.
func resultEvent(id string) string {
	return "id: e3\ndata: {\"jsonrpc\":\"2.0\",\"id\":" + id + ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n"
}

// TestResumeDroppedStream calls a tool on upstreams that end the call's
// SSE stream before its response in the ways SEP-1699 and real networks
// allow, through an SDK client on resumeTransport (as the pool builds
// it). In every case the call is POSTed once and never re-sent; when it
// can be resumed its result and each progress notification arrive
// exactly once, and otherwise the call fails with the reason.
func TestResumeDroppedStream(t *testing.T) {
	t.Parallel()
	var callID atomic.Value // the call's JSON-RPC id, for the resumed streams
	remember := func(events ...string) func(http.ResponseWriter, string) {
		return func(w http.ResponseWriter, id string) { callID.Store(id); sse(w, events...) }
	}
	answer := func(events ...string) func(http.ResponseWriter, string) {
		return func(w http.ResponseWriter, _ string) {
			sse(w, append(events, resultEvent(callID.Load().(string)))...)
		}
	}
	tests := []struct {
		name         string
		post         func(http.ResponseWriter, string)
		resumes      []func(http.ResponseWriter, string)
		wantErr      string // "" when the result must arrive
		wantProgress []float64
		wantLEIDs    []string
	}{
		{
			name:         "closed after priming and a progress event",
			post:         remember(priming, progress1),
			resumes:      []func(http.ResponseWriter, string){answer(progress2)},
			wantProgress: []float64{1, 2},
			wantLEIDs:    []string{"e1"},
		},
		{
			name: "resume answered 503 twice, then served",
			post: remember(priming, progress1),
			resumes: []func(http.ResponseWriter, string){
				status(http.StatusServiceUnavailable), status(http.StatusBadGateway), answer(progress2),
			},
			wantProgress: []float64{1, 2},
			wantLEIDs:    []string{"e1", "e1", "e1"},
		},
		{
			name: "replays events the client has (hostile or sloppy server)",
			post: remember(priming, progress1),
			resumes: []func(http.ResponseWriter, string){
				answer(priming, progress1, progress1, progress2, progress2),
			},
			wantProgress: []float64{1, 2},
			wantLEIDs:    []string{"e1"},
		},
		{
			name: "dropped twice, resumed from the newest event each time",
			post: remember(priming),
			resumes: []func(http.ResponseWriter, string){
				func(w http.ResponseWriter, _ string) { sse(w, progress1) },
				answer(progress2),
			},
			wantProgress: []float64{1, 2},
			wantLEIDs:    []string{"e0", "e1"},
		},
		{
			name:         "cut inside an event: the unfinished event is not delivered",
			post:         remember(priming, progress1, "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifi"),
			resumes:      []func(http.ResponseWriter, string){answer(progress2)},
			wantProgress: []float64{1, 2},
			wantLEIDs:    []string{"e1"},
		},
		{
			name:         "no event ID: nothing to resume",
			post:         remember(progress1[len("id: e1\n"):]),
			wantErr:      "request terminated without response",
			wantProgress: []float64{1},
		},
		{
			name:         "resume refused",
			post:         remember(priming, progress1),
			resumes:      []func(http.ResponseWriter, string){status(http.StatusBadRequest)},
			wantErr:      "request terminated without response",
			wantProgress: []float64{1},
			wantLEIDs:    []string{"e1"},
		},
	}
	fruitless := make([]func(http.ResponseWriter, string), resumeMaxFruitless)
	for i := range fruitless {
		fruitless[i] = func(w http.ResponseWriter, _ string) { sse(w, progress1) } // replay only
	}
	tests = append(tests, struct {
		name         string
		post         func(http.ResponseWriter, string)
		resumes      []func(http.ResponseWriter, string)
		wantErr      string
		wantProgress []float64
		wantLEIDs    []string
	}{
		name:         "every resume brings nothing new: given up",
		post:         remember(priming, progress1),
		resumes:      fruitless,
		wantErr:      "request terminated without response",
		wantProgress: []float64{1},
		wantLEIDs:    strings.Fields(strings.Repeat("e1 ", resumeMaxFruitless)),
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &scriptedUpstream{t: t, post: tt.post, resumes: tt.resumes}
			srv := httptest.NewServer(up)
			t.Cleanup(srv.Close)
			var mu sync.Mutex
			var got []float64
			c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
					mu.Lock()
					got = append(got, r.Params.Progress)
					mu.Unlock()
				},
			})
			hc := &http.Client{Transport: &resumeTransport{
				base:  &headerTransport{base: http.DefaultTransport, headers: map[string]string{"X-Api-Key": "secret"}},
				sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
			}}
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			defer cancel()
			// MaxRetries 1, as the pool sets it.
			cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxRetries: 1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			params := &mcp.CallToolParams{Name: "drop", Meta: mcp.Meta{"progressToken": "tok"}}
			res, err := cs.CallTool(ctx, params)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("CallTool: %v", err)
			case tt.wantErr == "" && resultText(res) != "done":
				t.Errorf("result %q, want done", resultText(res))
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("CallTool = %v, %v; want an error containing %q", res, err, tt.wantErr)
			}
			calls, leids := up.counts()
			if calls != 1 {
				t.Errorf("the upstream received the call %d times, want once", calls)
			}
			if diff := cmp.Diff(tt.wantLEIDs, leids); diff != "" {
				t.Errorf("Last-Event-ID of the resume GETs (-want +got):\n%s", diff)
			}
			// Notifications are handled asynchronously: wait for the count.
			deadline := time.Now().Add(time.Second)
			for {
				mu.Lock()
				n := len(got)
				mu.Unlock()
				if n >= len(tt.wantProgress) || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond) // a duplicate would land now
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tt.wantProgress, got); diff != "" {
				t.Errorf("progress notifications (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResumeWithinCallTimeout: an upstream that never lets the stream be
// resumed holds the call no longer than the call's own deadline.
func TestResumeWithinCallTimeout(t *testing.T) {
	t.Parallel()
	var resumes atomic.Int32
	up := &scriptedUpstream{t: t, post: func(w http.ResponseWriter, _ string) { sse(w, priming) }}
	many := make([]func(http.ResponseWriter, string), 1000)
	for i := range many {
		many[i] = func(w http.ResponseWriter, _ string) {
			resumes.Add(1)
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	}
	up.resumes = many
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: &resumeTransport{base: &headerTransport{base: http.DefaultTransport, headers: map[string]string{"X-Api-Key": "secret"}}}}
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxRetries: 1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "drop"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("CallTool error = %v, want the call's deadline", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the call returned after %v, past its 400ms deadline", d)
	}
	if n := resumes.Load(); n < 2 {
		t.Errorf("%d resume attempts in 400ms, want several (the 503s are transient)", n)
	}
	if calls, _ := up.counts(); calls != 1 {
		t.Errorf("the upstream received the call %d times, want once", calls)
	}
}

// TestPoolResumesGoSDKUpstream: a go-sdk upstream with an event store
// closes the call's stream (CloseSSEStream, as the conformance suite's
// test_reconnection tool does) and the first resume hits a 503; through
// the pool, the tool runs once and its result arrives.
func TestPoolResumesGoSDKUpstream(t *testing.T) {
	t.Parallel()
	var runs, resumes atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "dropper", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "drop"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: 10 * time.Millisecond})
		time.Sleep(50 * time.Millisecond)
		return textResult("done"), nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-ID") != "" && resumes.Add(1) == 1 {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p := startPool(t, []manifests.Server{{Name: "web", HTTP: &manifests.HTTPServer{URL: srv.URL}}}, testOptions())
	waitState(t, p, "web", StateConnected)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	res, err := p.CallTool(ctx, "web", "drop", nil)
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if got := resultText(res); got != "done" {
		t.Errorf("result %q, want done", got)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
	if n := resumes.Load(); n != 2 {
		t.Errorf("%d resume GETs, want 2 (a 503, then the resume)", n)
	}
	if st := p.Status("web"); st.State != StateConnected {
		t.Errorf("after the call the upstream is %s (%s), want connected on the same session", st.State, st.Reason)
	}
}

// TestPoolResumeRefused: when the upstream refuses the resume, the pool
// reports the call's outcome as unknown, says why, and does not re-send.
func TestPoolResumeRefused(t *testing.T) {
	t.Parallel()
	up := &scriptedUpstream{t: t,
		post:    func(w http.ResponseWriter, _ string) { sse(w, priming, progress1) },
		resumes: []func(http.ResponseWriter, string){status(http.StatusBadRequest)},
	}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	p := startPool(t, []manifests.Server{{Name: "web", ProtocolVersion: "2025-11-25",
		HTTP: &manifests.HTTPServer{URL: srv.URL, Headers: map[string]string{"X-Api-Key": "secret"}}}}, testOptions())
	waitState(t, p, "web", StateConnected)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	_, err := p.CallTool(ctx, "web", "drop", nil)
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("CallTool error = %v (%s), want ErrOutcomeUnknown", err, errKind(err))
	}
	for _, want := range []string{"request terminated without response", `refused to resume the stream after event "e1": HTTP 400`, "may have run"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if calls, _ := up.counts(); calls != 1 {
		t.Errorf("the upstream received the call %d times, want once", calls)
	}
}

// TestEventScanner covers the SSE grammar the resumer relies on.
func TestEventScanner(t *testing.T) {
	in := ": comment\n\nid: a\r\nevent: message\ndata: {\"x\":\ndata: 1}\nretry: 7\n\n\n\nid\ndata:x\n\ndata: cut"
	sc := newEventScanner(strings.NewReader(in))
	var got []event
	for {
		ev, err := sc.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("next: %v", err)
			}
			break
		}
		ev.raw = nil
		got = append(got, ev)
	}
	want := []event{
		{},
		{id: "a", name: "message", retry: "7", data: []byte("{\"x\":\n1}")},
		{id: "", data: []byte("x")},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(event{})); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	big := "data: " + strings.Repeat("x", resumeMaxEventBytes) + "\n\n"
	if _, err := newEventScanner(strings.NewReader(big)).next(); !errors.Is(err, errEventTooLarge) {
		t.Errorf("an event past %d bytes: err = %v, want errEventTooLarge", resumeMaxEventBytes, err)
	}
}

func TestJSONRPCID(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want any
		ok   bool
	}{
		{`1`, "n:1", true}, {`"1"`, "s:1", true}, {` 7 `, "n:7", true}, {`1.0`, "n:1.0", true},
		{`null`, nil, false}, {``, nil, false}, {`{}`, nil, false}, {`"x`, nil, false},
	} {
		got, ok := jsonrpcID(json.RawMessage(tt.raw))
		if got != tt.want || ok != tt.ok {
			t.Errorf("jsonrpcID(%s) = %v, %v; want %v, %v", tt.raw, got, ok, tt.want, tt.ok)
		}
	}
}
