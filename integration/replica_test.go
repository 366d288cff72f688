package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// replicas are gateway replicas over one Temporal (and one worker) behind a
// round-robin proxy, as behind a load balancer without session affinity.
type replicas struct {
	gws   []*gateway.Gateway
	srvs  []*httptest.Server
	proxy *rrProxy
	url   string // the proxy's /mcp
}

// newReplicas starts n gateways that share a session key over s's Temporal
// client and upstream pool.
func newReplicas(t *testing.T, s *stack, n int, o gateway.Options) *replicas {
	t.Helper()
	waitFor(t, "the upstream connected", 30*time.Second, func() bool {
		return s.pool.Status("counter").State == upstream.StateConnected
	})
	key := []byte(gateway.NewSessionKey())
	r := &replicas{proxy: &rrProxy{force: -1}}
	for range n {
		opts := o
		opts.Temporal, opts.Upstreams, opts.SessionKey, opts.Logger = s.client, s.pool, key, s.log
		opts.IdleTimeout = time.Hour
		g := gateway.New(opts)
		g.Refresh()
		mux := http.NewServeMux()
		mux.Handle("/mcp", g.Handler())
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		r.gws = append(r.gws, g)
		r.srvs = append(r.srvs, srv)
		r.proxy.backends = append(r.proxy.backends, &backend{url: srv.URL})
	}
	ps := httptest.NewServer(r.proxy)
	t.Cleanup(ps.Close)
	r.url = ps.URL + "/mcp"
	return r
}

// kill stops replica i as kill -9 would: its connections drop, its open
// streams end mid-way, and it answers nothing more.
func (r *replicas) kill(i int) {
	r.proxy.mu.Lock()
	r.proxy.backends[i].dead = true
	r.proxy.mu.Unlock()
	r.srvs[i].CloseClientConnections()
	r.srvs[i].Close()
}

type backend struct {
	url  string
	dead bool
}

// served is one request the proxy passed on.
type served struct {
	backend int
	method  string // the JSON-RPC method (POST), or the HTTP method
	session string // its Mcp-Session-Id
	status  int
	header  http.Header
}

// rrProxy hands requests to its backends in turn (skipping dead ones, as a
// load balancer's health check would), or all to one when force >= 0.
type rrProxy struct {
	mu       sync.Mutex
	backends []*backend
	next     int
	force    int
	log      []served
}

func (p *rrProxy) pick() (int, *backend) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.force >= 0 && !p.backends[p.force].dead {
		return p.force, p.backends[p.force]
	}
	for range p.backends {
		i := p.next % len(p.backends)
		p.next++
		if !p.backends[i].dead {
			return i, p.backends[i]
		}
	}
	return -1, nil
}

func (p *rrProxy) route(i int) {
	p.mu.Lock()
	p.force = i
	p.mu.Unlock()
}

func (p *rrProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	method := r.Method
	var msg struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &msg) == nil && msg.Method != "" {
		method = msg.Method
	}
	i, b := p.pick()
	if b == nil {
		http.Error(w, "no live backend", http.StatusBadGateway)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, b.url+r.URL.Path, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	p.mu.Lock()
	p.log = append(p.log, served{backend: i, method: method, session: r.Header.Get("Mcp-Session-Id"), status: resp.StatusCode, header: r.Header.Clone()})
	p.mu.Unlock()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	f, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			if f != nil {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// requests returns what the proxy passed on of method.
func (p *rrProxy) requests(method string) []served {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []served
	for _, s := range p.log {
		if s.method == method {
			out = append(out, s)
		}
	}
	return out
}

// servedBy returns the backends that served method in session sid.
func (p *rrProxy) servedBy(method, sid string) map[int]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int]int{}
	for _, s := range p.log {
		if s.method == method && s.session == sid && s.status < 300 {
			out[s.backend]++
		}
	}
	return out
}

// TestAnyReplicaServesAnySession: issue 15 item 1. An MCP session (protocol
// 2025-11-25) through a round-robin proxy over two gateway replicas, with
// no affinity: calls, tools, resources and prompts are served by both
// replicas in the session's one task; a call waiting for approval on
// replica 0 is collected with airlock_await on replica 1; a call retried
// with its idempotency key through the other replica gets the first
// result; replica 0 is
// killed while a call is in flight and the client's retry with the same
// idempotency key on replica 1 gets the first result, the tool having run
// once; another principal presenting the session ID gets 403 on either
// replica.
func TestAnyReplicaServesAnySession(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, appendNeedsOps+echoTool+putTool+"resources: {data_access_level: internal}\nprompts: {data_access_level: internal}\n")
	dir := allGrants(nil, "alice", "bob")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir, groups: map[string][]string{"ops": {"bob"}}})
	r := newReplicas(t, s, 2, gateway.Options{Manifests: []*manifests.Manifest{m}, Directory: dir,
		InlineWait: 3 * time.Second, ProgressEvery: 200 * time.Millisecond})
	ctx := context.Background()

	cs := connectURL(t, r.url, bearer("alice-key"))
	sid := cs.ID()
	task, _ := cs.InitializeResult().Meta[gateway.MetaTask].(string)
	if sid == "" || !strings.HasPrefix(task, "task-") || !strings.Contains(sid, ".") {
		t.Fatalf("session %q, task %q: want a signed session ID and a task-… task", sid, task)
	}
	waitTools(t, cs, "counter__echo", "counter__append", gateway.ToolAwait)

	t.Run("calls alternate between replicas in one task", func(t *testing.T) {
		for i := range 6 {
			res := call(t, cs, "counter__echo", map[string]any{"text": "x"}, "")
			if res.IsError || res.Meta[gateway.MetaTask] != task {
				t.Fatalf("call %d: isError=%v task %v %q; want it in %s", i, res.IsError, res.Meta[gateway.MetaTask], text(res), task)
			}
		}
		if by := r.proxy.servedBy("tools/call", sid); by[0] == 0 || by[1] == 0 {
			t.Fatalf("tools/call of the session served by replicas %v; want both", by)
		}
		if st := taskStatus(t, s, task); st.Calls != 6 || st.Principal != "alice" {
			t.Fatalf("task %s: %d calls by %q; want 6 by alice", task, st.Calls, st.Principal)
		}
	})

	t.Run("resources and prompts on both replicas", func(t *testing.T) {
		var lists []string
		for range 2 {
			rl, err := cs.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			pl, err := cs.ListPrompts(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rl.Resources) == 0 || len(pl.Prompts) == 0 {
				t.Fatalf("%d resources, %d prompts; want the upstream's", len(rl.Resources), len(pl.Prompts))
			}
			rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: rl.Resources[0].URI})
			if err != nil || len(rr.Contents) == 0 {
				t.Fatalf("reading %s: %v", rl.Resources[0].URI, err)
			}
			lists = append(lists, mustJSON(t, rl)+mustJSON(t, pl))
		}
		if lists[0] != lists[1] {
			t.Fatalf("the replicas list differently:\n%s\n%s", lists[0], lists[1])
		}
		for _, method := range []string{"resources/list", "prompts/list", "resources/read"} {
			if by := r.proxy.servedBy(method, sid); len(by) != 2 {
				t.Errorf("%s served by replicas %v; want both", method, by)
			}
		}
	})

	t.Run("approval pending on one replica, awaited on the other", func(t *testing.T) {
		r.proxy.route(0)
		res := call(t, cs, "counter__append", map[string]any{"key": "await"}, "append-await")
		sc, _ := res.StructuredContent.(map[string]any)
		if res.IsError || sc["status"] != "pending" || sc["approval_request"] == nil {
			t.Fatalf("pending result: isError=%v %q %v", res.IsError, text(res), res.StructuredContent)
		}
		callID, _ := res.Meta[gateway.MetaCall].(string)
		approve(t, s, sc["approval_request"].(string))

		r.proxy.route(1)
		out := call(t, cs, gateway.ToolAwait, map[string]any{"call": callID}, "")
		if out.IsError || !strings.Contains(mustJSON(t, out.StructuredContent), `"count":1`) {
			t.Fatalf("airlock_await on replica 1: isError=%v %q %v", out.IsError, text(out), out.StructuredContent)
		}
		if n := sideEffects(t, effects, "append", "await"); n != 1 {
			t.Fatalf("append ran %d times, want 1", n)
		}
		if by := r.proxy.servedBy("tools/call", sid); by[1] == 0 {
			t.Fatalf("nothing of the session served by replica 1: %v", by)
		}
	})

	t.Run("a retry through the other replica gets the first result", func(t *testing.T) {
		r.proxy.route(0)
		first := call(t, cs, "counter__put", map[string]any{"key": "retried"}, "put-retried")
		r.proxy.route(1)
		again := call(t, cs, "counter__put", map[string]any{"key": "retried"}, "put-retried")
		r.proxy.route(-1)
		if first.IsError || mustJSON(t, first) != mustJSON(t, again) {
			t.Fatalf("first %s\nretry %s; want the same result", mustJSON(t, first), mustJSON(t, again))
		}
		if n := sideEffects(t, effects, "put", "retried"); n != 1 {
			t.Fatalf("put ran %d times for one key on two replicas, want 1", n)
		}
	})

	t.Run("another principal gets 403 on either replica", func(t *testing.T) {
		for i, srv := range r.srvs {
			req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer bob-key")
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "another principal") {
				t.Errorf("replica %d: bob with alice's session: %d %s; want 403", i, resp.StatusCode, b)
			}
		}
		// A forged session ID (alice's, its task changed) is not served.
		forged := strings.Split(sid, ".")
		forged[1] = "dC1mb3JnZWQ" // base64url "t-forged"
		req, _ := http.NewRequest("POST", r.srvs[1].URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer alice-key")
		req.Header.Set("Mcp-Session-Id", strings.Join(forged, "."))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("forged session ID: %d, want 404", resp.StatusCode)
		}
	})

	t.Run("a replica killed mid-call loses only its stream", func(t *testing.T) {
		r.proxy.route(0)
		done := make(chan error, 1)
		go func() {
			p := &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": "killed"},
				Meta: mcp.Meta{gateway.MetaIdempotencyKey: "append-killed"}}
			_, err := cs.CallTool(ctx, p)
			done <- err
		}()
		var reqID string
		waitFor(t, "the call's approval request", 30*time.Second, func() bool {
			reqID = pendingFor(t, s, task, "append-killed")
			return reqID != ""
		})
		r.kill(0)
		r.proxy.route(-1)
		if err := <-done; err == nil {
			t.Fatal("the call whose stream was on the killed replica returned without an error")
		}
		approve(t, s, reqID)

		// The session goes on on replica 1, where the agent retries the call
		// with its key.

		if ar, err := approver.Lookup(ctx, s.client, reqID); err != nil || ar.State != api.ApprovalApproved {
			t.Fatalf("request %s after approval: %s %v", reqID, ar.State, err)
		}
		again := call(t, cs, "counter__append", map[string]any{"key": "killed"}, "append-killed")
		if again.IsError || !strings.Contains(mustJSON(t, again.StructuredContent), `"count":1`) || again.Meta[gateway.MetaTask] != task {
			t.Fatalf("retry on replica 1: isError=%v %q %v", again.IsError, text(again), again.StructuredContent)
		}
		if n := sideEffects(t, effects, "append", "killed"); n != 1 {
			t.Fatalf("append ran %d times across the kill, want 1", n)
		}
	})
}

// echoTool declares testupstream's echo, auto-allowed.
const echoTool = "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n"

// putTool declares testupstream's put: a write, auto-allowed.
const putTool = "  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, timeout: 60s}\n"

// approve decides an approval request as bob, through the Update the
// approvers use.
func approve(t *testing.T, s *stack, reqID string) {
	t.Helper()
	ctx := context.Background()
	ar, err := approver.Lookup(ctx, s.client, reqID)
	if err != nil {
		t.Fatal(err)
	}
	dres, err := approver.Deliver(ctx, s.client, "test:bob:"+reqID, api.DecideRequest{RequestID: reqID, Digest: ar.Digest, Approver: "bob", Approve: true, Via: "cli"})
	if err != nil || dres.State != api.ApprovalApproved {
		t.Fatalf("approve %s: %+v %v", reqID, dres, err)
	}
}

// pendingFor returns the ID of the pending approval request of task's
// call with idempotency key key ("" if there is none yet).
func pendingFor(t *testing.T, s *stack, task, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := s.client.QueryWorkflow(ctx, task, "", api.QueryApprovals)
	if err != nil {
		return ""
	}
	var reqs []api.ApprovalRequest
	if err := v.Get(&reqs); err != nil {
		t.Fatal(err)
	}
	for _, a := range reqs {
		if a.CallID == api.CallIDForKey(key) && a.State == api.ApprovalPending {
			return a.ID
		}
	}
	return ""
}
