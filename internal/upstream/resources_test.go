package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// resourceEvents collects what a pool reports about resources.
type resourceEvents struct {
	updated chan string // "server uri"
	changed atomic.Int32
}

func withResourceEvents(opts Options) (Options, *resourceEvents) {
	ev := &resourceEvents{updated: make(chan string, 64)}
	opts.OnResourceUpdated = func(server, uri string) { ev.updated <- server + " " + uri }
	opts.OnResourcesChanged = func(string) { ev.changed.Add(1) }
	return opts, ev
}

// waitUpdate waits for the update of uri on server, skipping others.
func (ev *resourceEvents) waitUpdate(t *testing.T, server, uri string) {
	t.Helper()
	deadline := time.After(hang)
	for {
		select {
		case got := <-ev.updated:
			if got == server+" "+uri {
				return
			}
		case <-deadline:
			t.Fatalf("no notifications/resources/updated for %s from %s", uri, server)
		}
	}
}

// noUpdate fails if an update for uri arrives within a short while.
func (ev *resourceEvents) noUpdate(t *testing.T, server, uri string) {
	t.Helper()
	deadline := time.After(300 * time.Millisecond)
	for {
		select {
		case got := <-ev.updated:
			if got == server+" "+uri {
				t.Fatalf("update for %s after unsubscribing", uri)
			}
		case <-deadline:
			return
		}
	}
}

func resourceURIs(rs []*mcp.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.URI)
	}
	return out
}

func promptNames(ps []*mcp.Prompt) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// touch makes the test server send resources/updated for uri and returns
// how many subscriptions to it the server holds.
func touch(t *testing.T, p *Pool, server, uri string) string {
	t.Helper()
	res, err := p.CallTool(context.Background(), server, "touch", json.RawMessage(fmt.Sprintf(`{"uri":%q}`, uri)))
	if err != nil {
		t.Fatalf("touch: %v", err)
	}
	return resultText(res)
}

// checkResources runs the cases every transport must pass. listen says
// the session speaks 2026-07-28, where subscriptions are listen streams.
func checkResources(t *testing.T, p *Pool, server string, ev *resourceEvents, listen bool) {
	ctx := context.Background()
	testenv.WaitFor(t, "the catalog of "+server, hang, func() bool { return len(p.Catalog(server).Prompts) == len(testPromptNames) })
	cat := p.Catalog(server)
	if diff := cmp.Diff(testResourceURIs, resourceURIs(cat.Resources)); diff != "" {
		t.Errorf("catalog resources (-want +got):\n%s", diff)
	}
	if len(cat.Templates) != 1 || cat.Templates[0].URITemplate != testTemplate || !cat.Subscribe {
		t.Errorf("catalog templates %s, subscribe %v; want %s, true", mustJSON(t, cat.Templates), cat.Subscribe, testTemplate)
	}
	if n := ev.changed.Load(); n != 1 {
		t.Errorf("OnResourcesChanged called %d times after connecting, want 1", n)
	}

	t.Run("list", func(t *testing.T) {
		rs, err := p.ListResources(ctx, server)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(testResourceURIs, resourceURIs(rs)); diff != "" {
			t.Errorf("resources over two pages (-want +got):\n%s", diff)
		}
		ts, err := p.ListResourceTemplates(ctx, server)
		if err != nil || len(ts) != 1 || ts[0].URITemplate != testTemplate {
			t.Errorf("templates = %s, %v", mustJSON(t, ts), err)
		}
		ps, err := p.ListPrompts(ctx, server)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(testPromptNames, promptNames(ps)); diff != "" {
			t.Errorf("prompts over two pages (-want +got):\n%s", diff)
		}
	})

	t.Run("read", func(t *testing.T) {
		for uri, want := range map[string]string{"test://b": "content of test://b", "test://items/42": "item 42"} {
			res, err := p.ReadResource(ctx, server, uri)
			if err != nil {
				t.Fatalf("ReadResource(%s): %v", uri, err)
			}
			if len(res.Contents) != 1 || res.Contents[0].Text != want || res.Contents[0].URI != uri {
				t.Errorf("ReadResource(%s) = %s, want text %q", uri, mustJSON(t, res.Contents), want)
			}
		}
		_, err := p.ReadResource(ctx, server, "test://items/missing")
		var wire *jsonrpc.Error
		if errKind(err) != "rejected" || !errors.As(err, &wire) || wire.Code != mcp.CodeResourceNotFound {
			t.Fatalf("reading a missing resource: %v (%s); want rejected with the upstream's code %d", err, errKind(err), mcp.CodeResourceNotFound)
		}
		if !strings.Contains(err.Error(), "upstream "+server+" rejected resources/read test://items/missing") {
			t.Errorf("error %q should name the upstream and the request", err)
		}
		if _, err := p.ReadResource(ctx, server, ""); errKind(err) != "not-sent" {
			t.Errorf("empty URI: %v, want not-sent", err)
		}
	})

	t.Run("get prompt", func(t *testing.T) {
		res, err := p.GetPrompt(ctx, server, "greet", map[string]string{"name": "Ada"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) != 1 || res.Description != "a greeting" {
			t.Fatalf("GetPrompt = %s", mustJSON(t, res))
		}
		if tc, ok := res.Messages[0].Content.(*mcp.TextContent); !ok || tc.Text != "Hello, Ada!" {
			t.Errorf("message = %s, want Hello, Ada!", mustJSON(t, res.Messages[0]))
		}
		if _, err := p.GetPrompt(ctx, server, "nope", nil); errKind(err) != "rejected" || !strings.Contains(err.Error(), "prompts/get nope") {
			t.Errorf("unknown prompt: %v (%s), want rejected naming it", err, errKind(err))
		}
	})

	t.Run("subscribe", func(t *testing.T) {
		const uri = "test://a"
		// Two subscribers, one upstream subscription.
		for range 2 {
			if err := p.Subscribe(ctx, server, uri); err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
		}
		if got := touch(t, p, server, uri); got != "subscribers 1" {
			t.Errorf("after two Subscribes the upstream holds %q, want subscribers 1", got)
		}
		ev.waitUpdate(t, server, uri)

		if err := p.Unsubscribe(ctx, server, uri); err != nil {
			t.Fatalf("Unsubscribe: %v", err)
		}
		if got := touch(t, p, server, uri); got != "subscribers 1" {
			t.Errorf("after one of two Unsubscribes the upstream holds %q, want subscribers 1", got)
		}
		ev.waitUpdate(t, server, uri)

		if err := p.Unsubscribe(ctx, server, uri); err != nil {
			t.Fatalf("second Unsubscribe: %v", err)
		}
		// No more updates. A legacy upstream drops the subscription; on
		// 2026-07-28 the pool keeps the listen stream (ending it would end
		// the session's list_changed notifications too).
		want := "subscribers 0"
		if listen {
			want = "subscribers 1"
		}
		if got := touch(t, p, server, uri); got != want {
			t.Errorf("after the last Unsubscribe the upstream holds %q, want %q", got, want)
		}
		ev.noUpdate(t, server, uri)
		if err := p.Unsubscribe(ctx, server, uri); err != nil {
			t.Errorf("Unsubscribe of a URI not subscribed: %v, want nil", err)
		}

		// Subscribing again delivers updates again, with one upstream
		// subscription.
		if err := p.Subscribe(ctx, server, uri); err != nil {
			t.Fatalf("Subscribe again: %v", err)
		}
		if got := touch(t, p, server, uri); got != "subscribers 1" {
			t.Errorf("after subscribing again the upstream holds %q, want subscribers 1", got)
		}
		ev.waitUpdate(t, server, uri)
	})

	t.Run("list_changed", func(t *testing.T) {
		before := ev.changed.Load()
		if _, err := p.CallTool(ctx, server, "add_resource", json.RawMessage(`{"uri":"test://new"}`)); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "the new resource in the catalog", hang, func() bool {
			return len(p.Catalog(server).Resources) == len(testResourceURIs)+1
		})
		// The pool publishes the catalog before it calls OnResourcesChanged
		// (from its own goroutine), so the callback is awaited, not read at
		// once.
		testenv.WaitFor(t, "OnResourcesChanged after resources/list_changed", hang, func() bool {
			return ev.changed.Load() > before
		})
	})

	t.Run("subscription refused", func(t *testing.T) {
		err := p.Subscribe(ctx, server, "test://refused")
		if errKind(err) != "rejected" || !strings.Contains(err.Error(), "test://refused") || !strings.Contains(err.Error(), "upstream "+server) {
			t.Fatalf("Subscribe refused by the upstream: %v (%s), want rejected naming the upstream and URI", err, errKind(err))
		}
		// Not counted: a later attempt goes to the upstream again.
		if err := p.Subscribe(ctx, server, "test://refused"); errKind(err) != "rejected" {
			t.Fatalf("second attempt: %v, want rejected again", err)
		}
	})

	// A refused subscription ends its listen stream, and a go-sdk upstream
	// then forgets the session's list_changed subscriptions: the pool
	// re-lists by itself.
	t.Run("lists stay current after a refusal", func(t *testing.T) {
		if _, err := p.CallTool(ctx, server, "add_resource", json.RawMessage(`{"uri":"test://newer"}`)); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "the newer resource in the catalog", hang, func() bool {
			return len(p.Catalog(server).Resources) == len(testResourceURIs)+2
		})
		if _, err := p.CallTool(ctx, server, "add_tool", json.RawMessage(`{"name":"later"}`)); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "the new tool in the status", hang, func() bool {
			return slices.Contains(toolNames(p.Status(server).Tools), "later")
		})
	})
}

func TestResourcesStdio(t *testing.T) {
	defer func(a, l time.Duration) { ackTimeout, listPollInterval = a, l }(ackTimeout, listPollInterval)
	ackTimeout, listPollInterval = 500*time.Millisecond, 100*time.Millisecond
	f := newStdioFiles(t)
	opts, ev := withResourceEvents(testOptions())
	p := startPool(t, []manifests.Server{stdioServer(t, "fs", f, nil)}, opts)
	waitState(t, p, "fs", StateConnected)
	u := p.get("fs")
	u.mu.Lock()
	v := protocolVersion(u.sess.cs)
	u.mu.Unlock()
	if v < protocolListen {
		t.Fatalf("stdio negotiated %s; this test is about %s", v, protocolListen)
	}
	checkResources(t, p, "fs", ev, true)
}

func TestResourcesHTTP(t *testing.T) {
	var count, missingKey atomic.Int32
	srv := httptest.NewServer(newHTTPUpstream(&count, &missingKey))
	t.Cleanup(srv.Close)
	opts, ev := withResourceEvents(testOptions())
	p := startPool(t, []manifests.Server{httpServer("web", srv.URL)}, opts)
	waitState(t, p, "web", StateConnected)
	checkResources(t, p, "web", ev, false)
}

// A subscription survives the upstream restarting: the pool subscribes the
// new session by itself.
func TestResourceSubscriptionSurvivesReconnect(t *testing.T) {
	f := newStdioFiles(t)
	opts, ev := withResourceEvents(testOptions())
	p := startPool(t, []manifests.Server{stdioServer(t, "fs", f, nil)}, opts)
	waitState(t, p, "fs", StateConnected)
	ctx := context.Background()
	if err := p.Subscribe(ctx, "fs", "test://c"); err != nil {
		t.Fatal(err)
	}
	pid := lastPID(t, f.pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "a new server process", hang, func() bool { return lastPID(t, f.pid) != pid && p.Status("fs").State == StateConnected })
	testenv.WaitFor(t, "the new server to hold the subscription", hang, func() bool { return touch(t, p, "fs", "test://c") == "subscribers 1" })
	ev.waitUpdate(t, "fs", "test://c")
	if n := len(p.Catalog("fs").Resources); n != len(testResourceURIs) {
		t.Errorf("catalog after reconnect has %d resources, want %d", n, len(testResourceURIs))
	}
}

// Watchers registered after the pool was built see the same events as the
// Options callbacks, until stopped.
func TestWatchResources(t *testing.T) {
	f := newStdioFiles(t)
	p := New([]manifests.Server{stdioServer(t, "fs", f, nil)}, testOptions())
	updated := make(chan string, 16)
	var changed atomic.Int32
	stop := p.WatchResources(ResourceWatcher{
		Updated: func(server, uri string) { updated <- server + " " + uri },
		Changed: func(string) { changed.Add(1) },
	})
	p.Start(context.Background())
	t.Cleanup(func() { _ = p.Close() })
	testenv.WaitFor(t, "the watcher to see the catalog", hang, func() bool { return changed.Load() == 1 })
	if err := p.Subscribe(context.Background(), "fs", "test://a"); err != nil {
		t.Fatal(err)
	}
	touch(t, p, "fs", "test://a")
	select {
	case got := <-updated:
		if got != "fs test://a" {
			t.Errorf("watcher got %q", got)
		}
	case <-time.After(hang):
		t.Fatal("watcher got no update")
	}
	stop()
	touch(t, p, "fs", "test://a")
	select {
	case got := <-updated:
		t.Errorf("stopped watcher got %q", got)
	case <-time.After(300 * time.Millisecond):
	}
}

// Requests to a server that is not connected fail as not sent after the
// bounded wait, like tool calls.
func TestResourcesUnavailable(t *testing.T) {
	t.Parallel() // its own pool and servers; waits on processes
	p := startPool(t, []manifests.Server{{Name: "missing", Stdio: &manifests.StdioServer{Command: "airlock-test-no-such-command"}}}, testOptions())
	waitState(t, p, "missing", StateUnavailable)
	var ctx context.Context
	checks := map[string]func() error{
		"read":        func() error { _, err := p.ReadResource(ctx, "missing", "test://a"); return err },
		"list":        func() error { _, err := p.ListResources(ctx, "missing"); return err },
		"templates":   func() error { _, err := p.ListResourceTemplates(ctx, "missing"); return err },
		"prompts":     func() error { _, err := p.ListPrompts(ctx, "missing"); return err },
		"get prompt":  func() error { _, err := p.GetPrompt(ctx, "missing", "greet", nil); return err },
		"subscribe":   func() error { return p.Subscribe(ctx, "missing", "test://a") },
		"unknown one": func() error { _, err := p.ReadResource(context.Background(), "nosuch", "test://a"); return err },
	}
	for name, f := range checks {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := f()
		cancel()
		if errKind(err) != "not-sent" {
			t.Errorf("%s: %v (%s), want not-sent", name, err, errKind(err))
			continue
		}
		if name != "unknown one" && !strings.Contains(err.Error(), "upstream missing unavailable") {
			t.Errorf("%s: error %q should say the upstream is unavailable", name, err)
		}
	}
	if c := p.Catalog("missing"); len(c.Resources)+len(c.Templates)+len(c.Prompts) != 0 {
		t.Errorf("catalog of a server never connected = %+v, want empty", c)
	}
}

func TestResourcesPoolClosed(t *testing.T) {
	p := New([]manifests.Server{{Name: "x", Stdio: &manifests.StdioServer{Command: "true"}}}, testOptions())
	if _, err := p.ReadResource(context.Background(), "x", "test://a"); errKind(err) != "not-sent" || !strings.Contains(err.Error(), "not started") {
		t.Errorf("before Start: %v, want not-sent naming it", err)
	}
	_ = p.Close()
	if err := p.Subscribe(context.Background(), "x", "test://a"); errKind(err) != "not-sent" || !strings.Contains(err.Error(), "closed") {
		t.Errorf("after Close: %v, want not-sent naming it", err)
	}
}

// TestMemoryServerResource talks to the real server-memory (JavaScript
// SDK): it offers one resource, memory://knowledge-graph, no prompts, and
// sends resources/updated to subscribers when the graph changes.
func TestMemoryServerResource(t *testing.T) {
	t.Parallel() // its own pool and servers; waits on processes
	if testing.Short() {
		t.Skip("starts node; skipped with -short")
	}
	node := testenv.RequireNode(t)
	script := testenv.NPMServer(t, "server-memory")
	opts, ev := withResourceEvents(testOptions())
	p := startPool(t, []manifests.Server{{Name: "memory", Stdio: &manifests.StdioServer{
		Command: node, Args: []string{script},
		Env: map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "memory.jsonl")},
	}}}, opts)
	const uri = "memory://knowledge-graph"
	testenv.WaitFor(t, "the memory catalog", hang, func() bool { return len(p.Catalog("memory").Resources) == 1 })
	if cat := p.Catalog("memory"); cat.Resources[0].URI != uri || !cat.Subscribe || len(cat.Prompts) != 0 {
		t.Fatalf("catalog = %s", mustJSON(t, cat))
	}
	ctx := context.Background()
	if err := p.Subscribe(ctx, "memory", uri); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	create := `{"entities":[{"name":"airlock","entityType":"project","observations":["guards MCP"]}]}`
	if res, err := p.CallTool(ctx, "memory", "create_entities", json.RawMessage(create)); err != nil || res.IsError {
		t.Fatalf("create_entities = %+v, %v", res, err)
	}
	ev.waitUpdate(t, "memory", uri)
	res, err := p.ReadResource(ctx, "memory", uri)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Contents) != 1 || !strings.Contains(res.Contents[0].Text, `"airlock"`) || res.Contents[0].MIMEType != "application/json" {
		t.Errorf("graph resource = %s", mustJSON(t, res.Contents))
	}
	if _, err := p.GetPrompt(ctx, "memory", "x", nil); errKind(err) != "not-sent" || !strings.Contains(err.Error(), "offers no prompts") {
		t.Errorf("GetPrompt on a server without prompts: %v, want not-sent saying so", err)
	}
	if err := p.Unsubscribe(ctx, "memory", uri); err != nil {
		t.Errorf("Unsubscribe: %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
