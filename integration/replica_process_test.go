package integration

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/gateway"
)

// TestReplicaProcesses: issue 15 item 1 with the real binary. `airlock
// dev` and an `airlock gateway` against dev's Temporal, given the same
// AIRLOCK_SESSION_KEY (and different data directories), behind a
// round-robin proxy: one MCP session's calls are served by both processes
// in one task, both log the same key fingerprint, an idempotent retry
// through the other process gets the first result, and after the gateway
// process is killed with SIGKILL the session goes on through dev.
func TestReplicaProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	upstreamBin := buildBinary(t, "./integration/testupstream")
	dir := t.TempDir()
	effects := newEffectsLog(t)
	writeFile(t, filepath.Join(dir, "counter.yaml"), fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env:
      SIDE_EFFECT_LOG: %s
%stools:
  put:  {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, timeout: 60s}
  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
`, upstreamBin, effects, effectsSandbox(effects)))
	cfg := filepath.Join(dir, "airlock.yaml")
	writeFile(t, cfg, "manifests: [counter.yaml]\n"+identityYAML)
	env := append(os.Environ(), "AIRLOCK_SESSION_KEY="+gateway.NewSessionKey())
	tport := freePort(t)
	start := func(args ...string) (*devProcess, string) {
		listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		cmd := exec.Command(bin, append(args, "--config", cfg, "--listen", listen, "--log-format", "json")...)
		cmd.Env = env
		out := &lockedWriter{w: &bytes.Buffer{}}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.WaitDelay = time.Second
		p := startProc(t, cmd, out)
		p.waitHealthy(t, "http://"+listen)
		return p, "http://" + listen
	}
	dev, devURL := start("dev", "--data-dir", filepath.Join(dir, "dev"), "--temporal-port", fmt.Sprint(tport))
	gw, gwURL := start("gateway", "--data-dir", filepath.Join(dir, "gw"), "--temporal-address", fmt.Sprintf("127.0.0.1:%d", tport))

	fp := regexp.MustCompile(`"source":"\$AIRLOCK_SESSION_KEY","fingerprint":"([0-9a-f]+)"`)
	a, b := fp.FindStringSubmatch(dev.output()), fp.FindStringSubmatch(gw.output())
	if a == nil || b == nil || a[1] != b[1] {
		t.Fatalf("session key fingerprints: dev %v, gateway %v; want the same, from $AIRLOCK_SESSION_KEY", a, b)
	}

	proxy := &rrProxy{force: -1, backends: []*backend{{url: devURL}, {url: gwURL}}}
	ps := httptest.NewServer(proxy)
	t.Cleanup(ps.Close)
	cs := connectURL(t, ps.URL+"/mcp", nil)
	sid := cs.ID()
	task, _ := cs.InitializeResult().Meta[gateway.MetaTask].(string)
	waitTools(t, cs, "counter__put", "counter__echo")

	for i := range 4 {
		if res := call(t, cs, "counter__echo", map[string]any{"text": "x"}, ""); res.IsError || res.Meta[gateway.MetaTask] != task {
			t.Fatalf("call %d: isError=%v in %v %q; want it in %s", i, res.IsError, res.Meta[gateway.MetaTask], text(res), task)
		}
	}
	if by := proxy.servedBy("tools/call", sid); len(by) != 2 {
		t.Fatalf("tools/call served by processes %v; want both", by)
	}

	proxy.route(1)
	first := call(t, cs, "counter__put", map[string]any{"key": "p"}, "put-p")
	proxy.route(0)
	again := call(t, cs, "counter__put", map[string]any{"key": "p"}, "put-p")
	if first.IsError || mustJSON(t, first) != mustJSON(t, again) {
		t.Fatalf("first %s\nretry through the other process %s; want the same", mustJSON(t, first), mustJSON(t, again))
	}
	if n := sideEffects(t, effects, "put", "p"); n != 1 {
		t.Fatalf("put ran %d times, want 1", n)
	}

	// kill -9 the gateway process: the session goes on through dev.
	proxy.route(-1)
	proxy.mu.Lock()
	proxy.backends[1].dead = true
	proxy.mu.Unlock()
	if err := gw.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-gw.exited
	for i := range 2 {
		if res := call(t, cs, "counter__echo", map[string]any{"text": "after"}, ""); res.IsError || res.Meta[gateway.MetaTask] != task {
			t.Fatalf("call %d after the kill: isError=%v in %v %q", i, res.IsError, res.Meta[gateway.MetaTask], text(res))
		}
	}
}
