package main

// Health endpoints, graceful drain and the worker's build identity, tested
// on real processes: the test binary runs as airlock (TestMain) so each
// role can be sent SIGTERM while a slow tool call is in flight.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// asMain makes the test binary run as airlock (for the process tests).
const asMain = "AIRLOCK_TEST_RUN_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	// Every airlock the tests start shares one compilation cache: the
	// program interpreter and the wasm tools compile once, not per test.
	if os.Getenv(envWASMCache) == "" {
		if dir, err := testenv.WazeroCache(); err == nil {
			_ = os.Setenv(envWASMCache, dir)
		}
	}
	os.Exit(m.Run())
}

// airlockProcess is airlock running as a child process.
type airlockProcess struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startAirlock(t *testing.T, args ...string) *airlockProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1", "TEMPORAL_ADDRESS=", "TEMPORAL_NAMESPACE=")
	p := &airlockProcess{cmd: cmd, out: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("airlock %s output:\n%s", args[0], p.out)
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *airlockProcess) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(within):
		t.Fatalf("airlock did not exit within %s", within)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// get fetches url on a new connection.
func get(url string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// waitReady polls url (a /readyz) until it answers 200.
func waitReady(t *testing.T, p *airlockProcess, url string) {
	t.Helper()
	last := ""
	defer func() {
		if last != "" { // WaitFor gave up: the last answer
			t.Logf("%s answered %s", url, last)
		}
	}()
	testenv.WaitFor(t, url+" to answer 200 ready", 90*time.Second, func() bool {
		code, body, err := get(url)
		if code == 200 && strings.HasPrefix(body, "ready") {
			last = ""
			return true
		}
		last = fmt.Sprintf("%d %q %v", code, body, err)
		select {
		case <-p.exited:
			t.Fatalf("airlock exited before %s was ready", url)
		default:
		}
		return false
	})
}

// drainConfig writes a configuration with one slow, non-idempotent,
// medium-risk tool (allowed without approval, run as a regular activity):
// counter__append, which records each run in effects.
func drainConfig(t *testing.T, upstreamBin string, readPaths ...string) (cfg, effects string) {
	t.Helper()
	dir := t.TempDir()
	// The upstream runs sandboxed: its side-effect log is in a directory
	// of its own, granted in sandbox.write_paths.
	effectsDir := t.TempDir()
	effects = filepath.Join(effectsDir, "effects.log")
	mustWrite(t, filepath.Join(dir, "counter.yaml"), []byte(`server:
  name: counter
  stdio:
    command: `+upstreamBin+`
    env: {SIDE_EFFECT_LOG: `+effects+`}
  sandbox: {write_paths: [`+effectsDir+`], read_paths: [`+strings.Join(readPaths, ", ")+`]}
tools:
  append:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: false
`))
	cfg = filepath.Join(dir, "airlock.yaml")
	mustWrite(t, cfg, []byte(`manifests: [counter.yaml]
principals:
  - {name: alice, roles: [all], api_key_sha256: [`+identity.HashKey("alice-key")+`]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
`))
	return cfg, effects
}

// mcpClient connects to a gateway as alice and waits for counter__append.
func mcpClient(t *testing.T, ctx context.Context, addr string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "drain-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: bearerRT("alice-key")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	waitAvailable(t, ctx, cs, "counter__append")
	return cs
}

type callResult struct {
	res *mcp.CallToolResult
	err error
}

// slowCall starts counter__append(key) taking sleep, and waits until the
// upstream has recorded it (the call is in flight).
func slowCall(t *testing.T, ctx context.Context, cs *mcp.ClientSession, effects, key string, sleep time.Duration) <-chan callResult {
	t.Helper()
	done := make(chan callResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": key, "sleep_ms": sleep.Milliseconds()}})
		done <- callResult{res, err}
	}()
	testenv.WaitFor(t, "the call to reach the upstream", 60*time.Second, func() bool {
		b, _ := os.ReadFile(effects)
		if strings.Contains(string(b), "append "+key+"\n") {
			return true
		}
		select {
		case r := <-done:
			t.Fatalf("the call ended before it reached the upstream: %v %+v", r.err, r.res)
		default:
		}
		return false
	})
	select {
	case r := <-done:
		t.Fatalf("the call ended before the signal: %v %+v", r.err, r.res)
	default:
	}
	return done
}

func checkAnswered(t *testing.T, done <-chan callResult, effects, key string) {
	t.Helper()
	select {
	case r := <-done:
		if r.err != nil || r.res == nil || r.res.IsError {
			t.Fatalf("the call in flight at SIGTERM: %v %+v", r.err, r.res)
		}
		text := fmt.Sprint(r.res.StructuredContent)
		if !strings.Contains(text, "count:1") {
			t.Fatalf("the call's result %s, want its own count 1", text)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the call in flight at SIGTERM never answered")
	}
	b, _ := os.ReadFile(effects)
	if n := strings.Count(string(b), "append "+key+"\n"); n != 1 {
		t.Fatalf("the call ran %d times, want 1:\n%s", n, b)
	}
}

// inProcess starts the roles r on an embedded Temporal in this process.
// Its data directory's wasm-cache is testenv.WazeroCache, so that wasm
// tools are compiled once, not once per test and run.
func inProcess(t *testing.T, cfg string, r roles) *stack {
	t.Helper()
	t.Setenv("TEMPORAL_ADDRESS", "")
	t.Setenv("TEMPORAL_NAMESPACE", "")
	dataDir := filepath.Join(t.TempDir(), "data")
	cache, err := testenv.WazeroCache()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(cache, filepath.Join(dataDir, "wasm-cache")); err != nil {
		t.Fatal(err)
	}
	e, err := load(commonFlags{config: cfg, dataDir: dataDir, listen: "127.0.0.1:0", logLevel: "error", logFormat: "json", auditLog: "off"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := start(ctx, e, r, 0)
	t.Cleanup(func() {
		cancel()
		if s != nil {
			s.stop()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestGatewayDrain: on SIGTERM a gateway process fails /readyz, refuses
// new connections, answers the call it has in flight, and exits 0.
func TestGatewayDrain(t *testing.T) {
	cfg, effects := drainConfig(t, buildTestupstream(t))
	s := inProcess(t, cfg, roles{embedded: true, worker: true})
	addr := freeAddr(t)
	gw := startAirlock(t, "gateway", "--config", cfg, "--temporal-address", s.srv.HostPort(), "--data-dir", filepath.Join(t.TempDir(), "gw"),
		"--listen", addr, "--drain-timeout", "2m", "--log-format", "json", "--audit-log", "off")
	if code, body, err := get("http://" + addr + "/healthz"); err == nil && code != 200 {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	waitReady(t, gw, "http://"+addr+"/readyz")
	if code, body, err := get("http://" + addr + "/healthz"); err != nil || code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q %v", code, body, err)
	}

	ctx := context.Background()
	cs := mcpClient(t, ctx, addr)
	done := slowCall(t, ctx, cs, effects, "drain-gw", 4*time.Second)
	if err := gw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused while the call is still in flight.
	testenv.WaitFor(t, "the draining gateway to refuse connections", 30*time.Second, func() bool {
		_, _, err := get("http://" + addr + "/readyz")
		return err != nil
	})
	select {
	case r := <-done:
		t.Fatalf("the call ended before the listener closed: %v %+v", r.err, r.res)
	default:
	}
	checkAnswered(t, done, effects, "drain-gw")
	if code := gw.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("gateway exit status %d after SIGTERM, want 0", code)
	}
	if out := gw.out.String(); !strings.Contains(out, "drained; every request in flight finished") {
		t.Fatalf("the gateway did not report a complete drain:\n%s", out)
	}
}

// TestWorkerDrainAndBuildID: a worker process reports its build ID to
// Temporal (its pollers' deployment version), serves /healthz and /readyz
// on its metrics listener, and on SIGTERM stops polling but finishes the
// tool call it is running, which is answered once.
func TestWorkerDrainAndBuildID(t *testing.T) {
	cfg, effects := drainConfig(t, buildTestupstream(t))
	s := inProcess(t, cfg, roles{embedded: true, gateway: true})
	metricsAddr := freeAddr(t)
	w := startAirlock(t, "worker", "--config", cfg, "--temporal-address", s.srv.HostPort(), "--data-dir", filepath.Join(t.TempDir(), "w"),
		"--metrics-listen", metricsAddr, "--drain-timeout", "2m", "--build-id", "airlock-test-build-7", "--log-format", "json", "--audit-log", "off")
	waitReady(t, w, "http://"+metricsAddr+"/readyz")
	if code, body, err := get("http://" + metricsAddr + "/healthz"); err != nil || code != 200 || body != "ok\n" {
		t.Fatalf("worker /healthz: %d %q %v", code, body, err)
	}

	// The build identity, as Temporal sees the worker's pollers.
	ctx := context.Background()
	var found []string
	defer func() {
		if found != nil { // WaitFor gave up: say what the pollers reported
			t.Logf("the worker's pollers report deployment versions %q", found)
		}
	}()
	testenv.WaitFor(t, "the worker's pollers to report airlock/airlock-test-build-7 on both task queue types", 30*time.Second, func() bool {
		found = []string{}
		for _, typ := range []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY} {
			resp, err := s.client.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
				Namespace: s.env.ns, TaskQueue: &taskqueuepb.TaskQueue{Name: s.env.tq}, TaskQueueType: typ})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range resp.GetPollers() {
				if d := p.GetDeploymentOptions(); d != nil {
					found = append(found, d.GetDeploymentName()+"/"+d.GetBuildId())
				}
			}
		}
		if len(found) == 2 && found[0] == "airlock/airlock-test-build-7" && found[1] == found[0] {
			found = nil
			return true
		}
		return false
	})

	cs := mcpClient(t, ctx, s.addr)
	done := slowCall(t, ctx, cs, effects, "drain-worker", 3*time.Second)
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Its replacement (a rolling upgrade) takes the task's next step: the
	// draining worker runs no more workflow tasks, only its tool call.
	w2Addr := freeAddr(t)
	w2 := startAirlock(t, "worker", "--config", cfg, "--temporal-address", s.srv.HostPort(), "--data-dir", filepath.Join(t.TempDir(), "w2"),
		"--metrics-listen", w2Addr, "--build-id", "airlock-test-build-8", "--log-format", "json", "--audit-log", "off")
	waitReady(t, w2, "http://"+w2Addr+"/readyz")
	checkAnswered(t, done, effects, "drain-worker")
	if code := w.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("worker exit status %d after SIGTERM, want 0", code)
	}
}

// TestReadyz: /readyz says why a role is not ready.
func TestReadyz(t *testing.T) {
	cfg, _ := drainConfig(t, buildTestupstream(t))
	s := inProcess(t, cfg, roles{embedded: true, worker: true, gateway: true})
	url := "http://" + s.addr + "/readyz"
	last := ""
	defer func() {
		if last != "" { // WaitFor gave up: the last answer
			t.Logf("%s answered %s", url, last)
		}
	}()
	testenv.WaitFor(t, url+" to answer 200 ready", 60*time.Second, func() bool {
		code, body, err := get(url)
		if code == 200 && body == "ready\n" {
			last = ""
			return true
		}
		last = fmt.Sprintf("%d %q %v", code, body, err)
		return false
	})
	check := func(h *health, want string) {
		t.Helper()
		mux := http.NewServeMux()
		h.mount(mux)
		srv := &http.Server{Handler: mux}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		code, body, err := get("http://" + ln.Addr().String() + "/readyz")
		if err != nil || code != 503 || !strings.Contains(body, want) {
			t.Errorf("/readyz = %d %q %v; want 503 saying %q", code, body, err, want)
		}
		if code, _, _ := get("http://" + ln.Addr().String() + "/healthz"); code != 200 {
			t.Errorf("/healthz = %d while not ready; want 200 (alive)", code)
		}
	}
	check(&health{}, "not connected to Temporal yet")
	lazy, err := client.NewLazyClient(client.Options{HostPort: freeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	h := &health{}
	h.setTemporal(lazy)
	check(h, "Temporal does not answer")
	// An upstream on its first connection attempt (one that never
	// answers initialize) keeps a replica out of rotation.
	slow := upstream.New([]manifests.Server{{Name: "silent", Stdio: &manifests.StdioServer{Command: "sleep", Args: []string{"3600"}}}}, upstream.Options{})
	slow.Start(context.Background())
	defer slow.Close()
	h = &health{}
	h.setTemporal(s.client)
	h.setPool(slow)
	check(h, "upstreams still connecting for the first time: silent")

	s.env.health.draining.Store(true)
	code, body, _ := get(url)
	if code != 503 || !strings.Contains(body, "draining") {
		t.Errorf("/readyz while draining = %d %q", code, body)
	}
}

// TestVersioningFlags: --versioning is refused before anything is dialed
// when it could not route (an unknown mode, or a build ID that does not
// tell builds apart).
func TestVersioningFlags(t *testing.T) {
	cfg, _ := drainConfig(t, "testupstream-not-started")
	t.Setenv("TEMPORAL_ADDRESS", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--versioning", "sometimes"}, `--versioning "sometimes": use off, auto-upgrade or pinned`},
		{[]string{"--versioning", "pinned"}, `--versioning pinned needs a build ID that differs between builds, not "dev"`},
		{[]string{"--versioning", "auto-upgrade", "--build-id", "v1.2.3", "--deployment", ""}, "--deployment is empty"},
		{[]string{"--drain-timeout", "0s"}, "--drain-timeout 0s: want a positive duration"},
	} {
		args := append([]string{"worker", "--config", cfg, "--temporal-address", "127.0.0.1:1"}, tc.args...)
		code, _, stderr := runCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("airlock %s = %d %q; want 2 and %q", strings.Join(args, " "), code, stderr, tc.want)
		}
	}
}
