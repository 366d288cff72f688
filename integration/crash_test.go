package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
)

// devProcess is `airlock dev` running as a subprocess.
type devProcess struct {
	cmd    *exec.Cmd
	out    *lockedWriter
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, valid after exited
}

func freePort(t testing.TB) int {
	t.Helper()
	// A port the kernel handed out (listening on :0) is free only until
	// the kernel hands it out again, as the source port of any of the many
	// connections tests open while airlock dev starts: with tests in
	// parallel, airlock dev then fails with "address already in use".
	// Ports below the kernel's ephemeral range (32768-60999 on Linux) are
	// never handed out that way, so a port found free there stays free
	// unless a test takes it, and tests take them in turn (nextPort).
	for range 2 * fixedPorts {
		p := fixedPortBase + int(nextPort.Add(1)%fixedPorts)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			l.Close()
			return p
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The ports freePort picks from, below the ephemeral range, starting at an
// offset of this process's so that two test processes rarely meet.
const (
	fixedPortBase = 20000
	fixedPorts    = 12000
)

var nextPort atomic.Int64

func init() { nextPort.Store(int64(os.Getpid()*389) % fixedPorts) }

func startDev(t *testing.T, bin string, args ...string) *devProcess {
	t.Helper()
	return startDevEnv(t, nil, bin, args...)
}

// startDevEnv is startDev with env (KEY=value) added to the environment
// airlock dev inherits: a parallel test cannot t.Setenv.
func startDevEnv(t *testing.T, env []string, bin string, args ...string) *devProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dev"}, args...)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out := &lockedWriter{w: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = out, out
	// A killed airlock's upstream may outlive it, holding the output pipe:
	// don't wait for it.
	cmd.WaitDelay = time.Second
	return startProc(t, cmd, out)
}

// slowCall is a tool call kept in flight on the upstream (testupstream's
// sleep_ms) while a test kills the process that runs it.
type slowCall struct{ tool, effect, key string }

// killDuringSlowCalls sends calls through cs with the upstream sleeping
// sleepMs in each, waits until every one has reached the upstream (its
// side effect is logged), kills p with SIGKILL and waits for it and for the
// abandoned calls to return. It returns when the kill happened.
func killDuringSlowCalls(t *testing.T, p *devProcess, cs *mcp.ClientSession, effects string, calls []slowCall, sleepMs int) time.Time {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: map[string]any{"key": c.key, "sleep_ms": sleepMs},
				Meta: mcp.Meta{gateway.MetaIdempotencyKey: "key-" + c.key}})
		}()
	}
	waitFor(t, "the slow calls to reach the upstream", 30*time.Second, func() bool {
		for _, c := range calls {
			if sideEffects(t, effects, c.effect, c.key) != 1 {
				return false
			}
		}
		return true
	})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	wg.Wait()
	return time.Now()
}

// startProc starts cmd, whose output goes to out, and kills it at cleanup
// (printing its output if the test failed).
func startProc(t *testing.T, cmd *exec.Cmd, out *lockedWriter) *devProcess {
	t.Helper()
	p := &devProcess{cmd: cmd, out: out, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s output:\n%s", strings.Join(cmd.Args[:2], " "), p.output())
		}
	})
	return p
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *devProcess) output() string { return p.out.String() }

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func (p *devProcess) waitHealthy(t *testing.T, base string) {
	t.Helper()
	waitUntil(t, "airlock dev to be healthy", 90*time.Second, func() error {
		select {
		case <-p.exited:
			t.Fatalf("airlock dev exited early: %v\n%s", p.err, p.output())
		default:
		}
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return fmt.Errorf("%w; output:\n%s", err, p.output())
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("/healthz: HTTP %d; output:\n%s", resp.StatusCode, p.output())
		}
		return nil
	})
}

// sideEffects counts lines "tool key" in the upstream's side-effect log.
func sideEffects(t *testing.T, path, tool, key string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if line == tool+" "+key {
			n++
		}
	}
	return n
}

// TestCrashAndResume kills `airlock dev` with SIGKILL while two slow calls
// are in flight, restarts it on the same data dir and checks: the task
// resumes and the agent reattaches; a call that had completed is answered
// from history, not executed again; the in-flight non-idempotent call is
// reported as unknown and not re-run; the in-flight idempotent call is re-run
// and completes. Side effects are counted on the upstream.
func TestCrashAndResume(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess crash test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	upstreamBin := buildBinary(t, "./integration/testupstream")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	effects := newEffectsLog(t)
	writeFile(t, filepath.Join(dir, "counter.yaml"), fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env:
      SIDE_EFFECT_LOG: %s
%stools:
  append: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false, timeout: 60s}
  put:    {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true,  timeout: 60s}
`, upstreamBin, effects, effectsSandbox(effects)))
	writeFile(t, filepath.Join(dir, "airlock.yaml"), "manifests: [counter.yaml]\n"+identityYAML)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tport := freePort(t)
	args := []string{"--config", filepath.Join(dir, "airlock.yaml"), "--data-dir", data,
		"--listen", listen, "--temporal-port", fmt.Sprint(tport), "--log-format", "json"}
	base := "http://" + listen

	p1 := startDev(t, bin, args...)
	p1.waitHealthy(t, base)
	cs := connectURL(t, base+"/mcp", nil)
	waitTools(t, cs, "counter__append", "counter__put")

	done := call(t, cs, "counter__put", map[string]any{"key": "k1"}, "key-1")
	if done.IsError {
		t.Fatalf("first call: %s", text(done))
	}
	taskID, _ := done.Meta[gateway.MetaTask].(string)

	// Two slow calls in flight; the process dies under them.
	killedAt := killDuringSlowCalls(t, p1, cs, effects,
		[]slowCall{{"counter__append", "append", "k2"}, {"counter__put", "put", "k3"}}, 8000)

	// Restart on the same data dir; the agent reattaches to its task.
	p2 := startDev(t, bin, args...)
	p2.waitHealthy(t, base)
	t.Logf("restart to healthy: %s", time.Since(killedAt).Round(time.Millisecond))
	cs2 := connectURL(t, base+"/mcp", map[string]string{gateway.HeaderTask: taskID})
	waitTools(t, cs2, "counter__append", "counter__put")

	// The completed call is answered from history.
	again := call(t, cs2, "counter__put", map[string]any{"key": "k1"}, "key-1")
	if again.IsError || text(again) != text(done) {
		t.Fatalf("completed call after restart: isError=%v %q, want %q", again.IsError, text(again), text(done))
	}
	if got := again.Meta[gateway.MetaTask]; got != taskID {
		t.Fatalf("reattached call ran in task %v, want %s", got, taskID)
	}
	// The in-flight non-idempotent call: unknown, not re-run.
	unk := call(t, cs2, "counter__append", map[string]any{"key": "k2", "sleep_ms": 8000}, "key-k2")
	if !unk.IsError || !strings.Contains(text(unk), "not idempotent") {
		t.Fatalf("in-flight non-idempotent call after restart: isError=%v %q", unk.IsError, text(unk))
	}
	// The in-flight idempotent call: re-run, completes.
	rerun := call(t, cs2, "counter__put", map[string]any{"key": "k3", "sleep_ms": 8000}, "key-k3")
	if rerun.IsError {
		t.Fatalf("in-flight idempotent call after restart: %s", text(rerun))
	}
	t.Logf("crash to all calls resolved: %s", time.Since(killedAt).Round(time.Millisecond))

	for _, c := range []struct {
		tool, key string
		want      int
	}{{"put", "k1", 1}, {"append", "k2", 1}, {"put", "k3", 2}} {
		if got := sideEffects(t, effects, c.tool, c.key); got != c.want {
			t.Errorf("%s %s ran %d times on the upstream, want %d", c.tool, c.key, got, c.want)
		}
	}

	// Operators see the task and its calls.
	out, err := exec.Command(bin, "tasks", "show", "--temporal-address", fmt.Sprintf("127.0.0.1:%d", tport), taskID).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "calls:     3") || !strings.Contains(string(out), "unknown") {
		t.Errorf("airlock tasks show: %v\n%s", err, out)
	}

	// Ctrl-C shuts down cleanly.
	if err := p2.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p2.exited:
		if p2.err != nil {
			t.Fatalf("airlock dev exited with %v after SIGINT", p2.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("airlock dev did not exit within 30s of SIGINT")
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
