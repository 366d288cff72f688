package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// hang bounds every wait in these tests: long enough never to flake, short
// enough to prove that nothing hangs.
const hang = 10 * time.Second

// testOptions makes reconnects quick.
func testOptions() Options {
	return Options{MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
}

// stdioFiles are the files a stdio test server reports through.
type stdioFiles struct{ pid, counter, slow string }

func newStdioFiles(t *testing.T) stdioFiles {
	dir := t.TempDir()
	return stdioFiles{
		pid:     filepath.Join(dir, "pid"),
		counter: filepath.Join(dir, "counter"),
		slow:    filepath.Join(dir, "slow"),
	}
}

func stdioServer(t *testing.T, name string, f stdioFiles, extraEnv map[string]string) manifests.Server {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		envServer:      "1",
		envPIDFile:     f.pid,
		envCounterFile: f.counter,
		envSlowFile:    f.slow,
	}
	for k, v := range extraEnv {
		env[k] = v
	}
	return manifests.Server{Name: name, Stdio: &manifests.StdioServer{Command: exe, Env: env, Dir: t.TempDir()}}
}

func startPool(t *testing.T, servers []manifests.Server, opts Options) *Pool {
	t.Helper()
	p := New(servers, opts)
	p.Start(context.Background())
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func waitState(t *testing.T, p *Pool, server, state string) Status {
	t.Helper()
	var st Status
	testenv.WaitFor(t, server+" to be "+state, hang, func() bool {
		st = p.Status(server)
		return st.State == state
	})
	return st
}

func toolNames(tools []*mcp.Tool) []string {
	var names []string
	for _, t := range tools {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// errKind names the sentinel err wraps, so tests can compare classes.
func errKind(err error) string {
	var kinds []string
	for _, k := range []struct {
		name string
		err  error
	}{{"not-sent", ErrNotSent}, {"rejected", ErrRejected}, {"unknown", ErrOutcomeUnknown}} {
		if errors.Is(err, k.err) {
			kinds = append(kinds, k.name)
		}
	}
	if err != nil && len(kinds) == 0 {
		return "unclassified"
	}
	return strings.Join(kinds, "+")
}

// processGone reports whether pid no longer exists (a zombie still does).
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func lastPID(t *testing.T, file string) int {
	t.Helper()
	lines := readLines(file)
	if len(lines) == 0 {
		t.Fatalf("no PID in %s", file)
	}
	pid, err := strconv.Atoi(lines[len(lines)-1])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// checkCalls runs the call cases every transport must pass.
func checkCalls(t *testing.T, p *Pool, server string) {
	t.Helper()
	tests := []struct {
		name     string
		tool     string
		args     string
		timeout  time.Duration
		wantText string
		wantTool bool // IsError result
		wantErr  string
		errHas   string
	}{
		{name: "echo", tool: "echo", args: `{"text":"hi"}`, wantText: "hi"},
		{name: "no arguments", tool: "echo", wantText: ""},
		{name: "tool error is a result", tool: "fail", args: `{}`, wantText: "boom", wantTool: true},
		{name: "protocol error", tool: "reject", args: `{}`, wantErr: "rejected", errHas: "bad input"},
		{name: "unknown tool", tool: "nope", args: `{}`, wantErr: "not-sent", errHas: `has no tool "nope"`},
		{name: "arguments not an object", tool: "echo", args: `[1]`, wantErr: "not-sent", errHas: "JSON object"},
		{name: "deadline while waiting for the reply", tool: "slow", args: `{"ms":2000}`, timeout: 300 * time.Millisecond,
			wantErr: "unknown", errHas: "no reply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			res, err := p.CallTool(ctx, server, tt.tool, json.RawMessage(tt.args))
			if got := errKind(err); got != tt.wantErr {
				t.Fatalf("CallTool error = %v (%s), want %q", err, got, tt.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.errHas) || !strings.Contains(err.Error(), server) {
					t.Errorf("error %q should name %q and contain %q", err, server, tt.errHas)
				}
				return
			}
			if got := resultText(res); got != tt.wantText || res.IsError != tt.wantTool {
				t.Errorf("result = %q (IsError %v), want %q (IsError %v)", got, res.IsError, tt.wantText, tt.wantTool)
			}
		})
	}
}

func TestStdio(t *testing.T) {
	f := newStdioFiles(t)
	var changes atomic.Int32
	opts := testOptions()
	opts.OnToolsChanged = func(server string) {
		if server == "fs" {
			changes.Add(1)
		}
	}
	p := startPool(t, []manifests.Server{stdioServer(t, "fs", f, nil)}, opts)

	st := waitState(t, p, "fs", StateConnected)
	if diff := cmp.Diff(testToolNames, toolNames(st.Tools)); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if st.Reason != "" || st.Attempts != 0 || st.Since.IsZero() {
		t.Errorf("connected status = %+v", st)
	}
	if got := changes.Load(); got != 1 {
		t.Errorf("OnToolsChanged called %d times after connecting, want 1", got)
	}
	checkCalls(t, p, "fs")
	if n := len(readLines(f.pid)); n != 1 {
		t.Errorf("%d server processes started, want 1", n)
	}
}

// newHTTPUpstream serves the test server over streamable HTTP and requires
// the X-Api-Key header on every request.
func newHTTPUpstream(count *atomic.Int32, missingKey *atomic.Int32) http.Handler {
	s := newTestServer(testHooks{
		count:       func() int { return int(count.Add(1)) },
		slowStarted: func() {},
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "secret" {
			missingKey.Add(1)
			http.Error(w, "missing api key", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func httpServer(name, url string) manifests.Server {
	return manifests.Server{Name: name, HTTP: &manifests.HTTPServer{URL: url, Headers: map[string]string{"X-Api-Key": "secret"}}}
}

func TestHTTP(t *testing.T) {
	t.Parallel() // its own pool and servers; waits on processes
	var count, missingKey atomic.Int32
	srv := httptest.NewServer(newHTTPUpstream(&count, &missingKey))
	t.Cleanup(srv.Close) // after the pool's Close: it waits for the pool's open streams
	p := startPool(t, []manifests.Server{httpServer("web", srv.URL)}, testOptions())

	st := waitState(t, p, "web", StateConnected)
	if diff := cmp.Diff(testToolNames, toolNames(st.Tools)); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	checkCalls(t, p, "web")
	if n := missingKey.Load(); n != 0 {
		t.Errorf("%d requests arrived without the manifest header", n)
	}
}

func TestConcurrentCallsShareOneProcess(t *testing.T) {
	f := newStdioFiles(t)
	p := startPool(t, []manifests.Server{stdioServer(t, "fs", f, nil)}, testOptions())

	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			// Calls made before the server is connected wait for it.
			_, err := p.CallTool(context.Background(), "fs", "counter", nil)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("CallTool: %v", err)
		}
	}
	if got := len(readLines(f.pid)); got != 1 {
		t.Errorf("%d server processes started, want 1", got)
	}
	if got := len(readLines(f.counter)); got != n {
		t.Errorf("counter ran %d times, want %d", got, n)
	}
}

func TestBrokenServersDoNotBlockOthers(t *testing.T) {
	t.Parallel() // its own pool and servers; waits on processes
	f := newStdioFiles(t)
	servers := []manifests.Server{
		{Name: "missing", Stdio: &manifests.StdioServer{Command: "airlock-test-no-such-command"}},
		stdioServer(t, "crashing", newStdioFiles(t), map[string]string{envCrash: "fatal: cannot open database /nope"}),
		// Never speaks MCP: its handshake can only time out.
		{Name: "mute", Stdio: &manifests.StdioServer{Command: "sleep", Args: []string{"300"}},
			ConnectTimeout: manifests.Duration(time.Hour)},
		stdioServer(t, "good", f, nil),
	}
	p := New(servers, testOptions())
	t.Cleanup(func() { _ = p.Close() })

	started := make(chan struct{})
	go func() {
		p.Start(context.Background())
		close(started)
	}()
	select {
	case <-started:
	case <-time.After(hang):
		t.Fatal("Start blocked")
	}

	waitState(t, p, "good", StateConnected)
	if st := p.Status("mute"); st.State != StateConnecting {
		t.Errorf("mute: state %q while good is connected, want %q", st.State, StateConnecting)
	}
	if res, err := p.CallTool(context.Background(), "good", "echo", json.RawMessage(`{"text":"ok"}`)); err != nil || resultText(res) != "ok" {
		t.Fatalf("good: CallTool = %v, %v", res, err)
	}

	st := waitState(t, p, "missing", StateUnavailable)
	if !strings.Contains(st.Reason, "executable file not found") || st.Attempts < 1 || st.NextRetry.IsZero() {
		t.Errorf("missing: status = %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := p.CallTool(ctx, "missing", "echo", nil)
	if !errors.Is(err, ErrNotSent) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("missing: CallTool error = %v, want ErrNotSent", err)
	}
	for _, want := range []string{"upstream missing unavailable", "executable file not found"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing: error %q does not contain %q", err, want)
		}
	}
	if !strings.Contains(err.Error(), "next retry in") && !strings.Contains(err.Error(), "retrying now") && !strings.Contains(err.Error(), "still connecting") {
		t.Errorf("missing: error %q does not say when it retries", err)
	}

	var crash Status
	testenv.WaitFor(t, "crashing to report its stderr", hang, func() bool {
		crash = p.Status("crashing")
		return crash.State == StateUnavailable && crash.Reason != ""
	})
	if want := "exited: fatal: cannot open database /nope"; crash.Reason != want {
		t.Errorf("crashing: reason %q, want %q", crash.Reason, want)
	}

	if _, err := p.CallTool(context.Background(), "nosuch", "echo", nil); !errors.Is(err, ErrNotSent) {
		t.Errorf("unknown server: error %v, want ErrNotSent", err)
	}
	if diff := cmp.Diff([]string{"missing", "crashing", "mute", "good"}, statusNames(p.Statuses())); diff != "" {
		t.Errorf("Statuses order (-want +got):\n%s", diff)
	}
}

func statusNames(sts []Status) []string {
	var names []string
	for _, st := range sts {
		names = append(names, st.Server)
	}
	return names
}

func TestChildKilledMidCall(t *testing.T) {
	f := newStdioFiles(t)
	p := startPool(t, []manifests.Server{stdioServer(t, "fs", f, nil)}, testOptions())
	waitState(t, p, "fs", StateConnected)
	pid := lastPID(t, f.pid)

	errc := make(chan error, 1)
	go func() {
		_, err := p.CallTool(context.Background(), "fs", "slow", json.RawMessage(`{"ms":60000}`))
		errc <- err
	}()
	testenv.WaitFor(t, "the slow call to start", hang, func() bool { return len(readLines(f.slow)) > 0 })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	select {
	case err := <-errc:
		if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNotSent) {
			t.Fatalf("in-flight call error = %v (%s), want ErrOutcomeUnknown", err, errKind(err))
		}
	case <-time.After(hang):
		t.Fatal("in-flight call did not return after the child died")
	}

	// The next call waits for the reconnect and succeeds.
	res, err := p.CallTool(context.Background(), "fs", "echo", json.RawMessage(`{"text":"again"}`))
	if err != nil || resultText(res) != "again" {
		t.Fatalf("CallTool after reconnect = %v, %v", res, err)
	}
	if newPID := lastPID(t, f.pid); newPID == pid {
		t.Errorf("still talking to killed PID %d", pid)
	}
	testenv.WaitFor(t, "the killed child to be reaped", hang, func() bool { return processGone(pid) })
}

func TestDisconnectReason(t *testing.T) {
	f := newStdioFiles(t)
	opts := testOptions()
	opts.MinBackoff, opts.MaxBackoff = time.Hour, time.Hour // stay unavailable
	p := startPool(t, []manifests.Server{stdioServer(t, "fs", f, nil)}, opts)
	st := waitState(t, p, "fs", StateConnected)
	if err := syscall.Kill(lastPID(t, f.pid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, p, "fs", StateUnavailable)
	if want := "exited (signal: killed): test server ready"; st.Reason != want {
		t.Errorf("reason %q, want %q", st.Reason, want)
	}
	if diff := cmp.Diff(testToolNames, toolNames(st.Tools)); diff != "" {
		t.Errorf("tools kept while disconnected (-want +got):\n%s", diff)
	}
	if time.Until(st.NextRetry) < 10*time.Minute {
		t.Errorf("NextRetry = %v, want about an hour away", st.NextRetry)
	}
}

func TestHTTPServerRestart(t *testing.T) {
	var count, missingKey atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) *http.Server {
		srv := &http.Server{Handler: newHTTPUpstream(&count, &missingKey)}
		// Without keep-alive every POST dials: once the server is gone the
		// dial is refused, which proves the call was not sent. (A POST
		// written to a kept-alive connection the dying server just closed
		// is honestly ErrOutcomeUnknown.)
		srv.SetKeepAlivesEnabled(false)
		go func() { _ = srv.Serve(ln) }()
		return srv
	}
	srv := serve(ln)
	p := startPool(t, []manifests.Server{httpServer("web", "http://"+addr)}, testOptions())
	if _, err := p.CallTool(context.Background(), "web", "counter", nil); err != nil {
		t.Fatal(err)
	}

	_ = srv.Close() // the upstream dies: listener and connections closed
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err = p.CallTool(ctx, "web", "counter", nil)
	if !errors.Is(err, ErrNotSent) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("CallTool with the server down: error = %v (%s), want ErrNotSent", err, errKind(err))
	}
	t.Logf("with the server down: %v", err)
	if !strings.Contains(err.Error(), "upstream web") {
		t.Errorf("error %q does not name the upstream", err)
	}
	if elapsed := time.Since(start); elapsed > hang {
		t.Errorf("CallTool took %v with the server down", elapsed)
	}
	if got := count.Load(); got != 1 {
		t.Errorf("counter ran %d times, want 1", got)
	}
	testenv.WaitFor(t, "web to be marked down", hang, func() bool { return p.Status("web").State != StateConnected })

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv = serve(ln)
	defer srv.Close()
	res, err := p.CallTool(context.Background(), "web", "counter", nil)
	if err != nil || resultText(res) != "2" {
		t.Fatalf("CallTool after restart = %v, %v", res, err)
	}
}

func TestToolListChanged(t *testing.T) {
	f := newStdioFiles(t)
	changed := make(chan string, 10)
	opts := testOptions()
	opts.OnToolsChanged = func(server string) { changed <- server }
	p := startPool(t, []manifests.Server{stdioServer(t, "fs", f, nil)}, opts)
	waitState(t, p, "fs", StateConnected)
	<-changed // first listing

	if _, err := p.CallTool(context.Background(), "fs", "add_tool", json.RawMessage(`{"name":"late"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-changed:
		if got != "fs" {
			t.Errorf("OnToolsChanged(%q), want fs", got)
		}
	case <-time.After(hang):
		t.Fatal("OnToolsChanged not called after the upstream added a tool")
	}
	if !slices.Contains(toolNames(p.Status("fs").Tools), "late") {
		t.Fatalf("tools = %v, want late among them", toolNames(p.Status("fs").Tools))
	}
	res, err := p.CallTool(context.Background(), "fs", "late", nil)
	if err != nil || resultText(res) != "I am late" {
		t.Fatalf("CallTool(late) = %v, %v", res, err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	f := newStdioFiles(t)
	grandchildFile := filepath.Join(t.TempDir(), "grandchild")
	p := New([]manifests.Server{stdioServer(t, "fs", f, map[string]string{envGrandchild: grandchildFile})}, testOptions())
	p.Start(context.Background())
	waitState(t, p, "fs", StateConnected)
	pid := lastPID(t, f.pid)
	grandchild := lastPID(t, grandchildFile)

	errc := make(chan error, 1)
	go func() {
		_, err := p.CallTool(context.Background(), "fs", "slow", json.RawMessage(`{"ms":60000}`))
		errc <- err
	}()
	testenv.WaitFor(t, "the slow call to start", hang, func() bool { return len(readLines(f.slow)) > 0 })

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(hang):
		t.Fatal("Close hung")
	}
	if err := <-errc; !errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("call in flight during Close: error = %v (%s), want ErrOutcomeUnknown", err, errKind(err))
	}
	if !processGone(pid) {
		t.Errorf("child %d still exists after Close", pid)
	}
	testenv.WaitFor(t, "the grandchild to be killed", hang, func() bool { return processGone(grandchild) })
	if st := p.Status("fs"); st.State != StateStopped {
		t.Errorf("state after Close = %q, want %q", st.State, StateStopped)
	}
	if _, err := p.CallTool(context.Background(), "fs", "echo", nil); !errors.Is(err, ErrNotSent) {
		t.Errorf("CallTool after Close: error = %v, want ErrNotSent", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	checkNoLeaks(t)
}

func TestCloseHTTPNoLeaks(t *testing.T) {
	var count, missingKey atomic.Int32
	srv := httptest.NewServer(newHTTPUpstream(&count, &missingKey))
	defer srv.Close()
	p := New([]manifests.Server{httpServer("web", srv.URL)}, testOptions())
	p.Start(context.Background())
	waitState(t, p, "web", StateConnected)
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	checkNoLeaks(t)
}

func TestStartContextCancelStops(t *testing.T) {
	f := newStdioFiles(t)
	p := New([]manifests.Server{stdioServer(t, "fs", f, nil)}, testOptions())
	ctx, cancel := context.WithCancel(context.Background())
	p.Start(ctx)
	waitState(t, p, "fs", StateConnected)
	pid := lastPID(t, f.pid)
	cancel()
	testenv.WaitFor(t, "the child to exit after the Start context ended", hang, func() bool { return processGone(pid) })
	if st := waitState(t, p, "fs", StateStopped); st.Reason == "" {
		t.Errorf("stopped without a reason: %+v", st)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// checkNoLeaks fails if goroutines of the pool, the MCP client or a child
// process outlive Close. Server-side goroutines of in-process test servers
// are not matched.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	markers := []string{
		"airlock/internal/upstream.(*",
		"mcp.newIOConnLimited",
		"mcp.(*streamableClientConn)",
		"mcp.(*pipeRWC)",
		"mcp.(*ClientSession)",
		"os/exec.(*Cmd)",
	}
	var leaked []string
	defer func() {
		if len(leaked) > 0 { // WaitFor gave up: name the goroutines
			t.Logf("%d goroutines leaked after Close:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
	}()
	testenv.WaitFor(t, "no goroutine of the pool, the client or a child after Close", hang, func() bool {
		leaked = leaked[:0]
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "checkNoLeaks") {
				continue
			}
			for _, m := range markers {
				if strings.Contains(g, m) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		return len(leaked) == 0
	})
}
