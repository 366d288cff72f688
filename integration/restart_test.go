package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
)

// restartManifest serves testupstream as "counter" with a heartbeat
// timeout far longer than the bound the test asserts, so that only the
// start-up sweep can answer the calls in time. put honours idempotency
// keys: its re-run, under the same key, is recognised and not applied
// again.
const restartManifest = `server:
  name: counter
  stdio:
    command: %s
    env:
      SIDE_EFFECT_LOG: %s
      IDEMPOTENCY_KEYS: put
%stools:
  append: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false, timeout: 5m, heartbeat_timeout: %s}
  put:    {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true,  timeout: 5m, heartbeat_timeout: %s}
`

// restartHeartbeat is the tools' heartbeat timeout: what a call in flight
// during a crash would wait without the start-up sweep.
const restartHeartbeat = 30 * time.Second

// restartBound is how soon after the restarted process is healthy the
// calls must be answered (the "within 2 s of the restart").
const restartBound = 2 * time.Second

// TestRestartAnswersCallsInFlight kills `airlock dev` with SIGKILL while a
// slow non-idempotent call and a slow idempotent call run on the upstream,
// restarts it on the same data dir, and re-sends both calls (as an agent
// that lost its connection does). Both must be answered within
// restartBound of the restart being healthy, far sooner than their 30 s
// heartbeat timeout: the non-idempotent one as unknown (it ran once on the
// upstream, and is not re-run), the idempotent one by its re-run (which
// the upstream recognises by its idempotency key).
func TestRestartAnswersCallsInFlight(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess crash test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	upstreamBin := buildBinary(t, "./integration/testupstream")
	dir := t.TempDir()
	effects := newEffectsLog(t)
	writeFile(t, filepath.Join(dir, "counter.yaml"), fmt.Sprintf(restartManifest, upstreamBin, effects, effectsSandbox(effects), restartHeartbeat, restartHeartbeat))
	writeFile(t, filepath.Join(dir, "airlock.yaml"), "manifests: [counter.yaml]\n"+identityYAML)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := []string{"--config", filepath.Join(dir, "airlock.yaml"), "--data-dir", filepath.Join(dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(freePort(t)), "--no-ui", "--log-format", "json"}
	base := "http://" + listen
	p1 := startDev(t, bin, args...)
	p1.waitHealthy(t, base)
	cs := connectURL(t, base+"/mcp", nil)
	waitTools(t, cs, "counter__append", "counter__put")
	first := call(t, cs, "counter__put", map[string]any{"key": "p0"}, "key-p0")
	if first.IsError {
		t.Fatalf("first call: %s", text(first))
	}
	taskID, _ := first.Meta[gateway.MetaTask].(string)

	slow := []slowCall{{"counter__append", "append", "a1"}, {"counter__put", "put", "p1"}}
	killedAt := killDuringSlowCalls(t, p1, cs, effects, slow, 120000)

	p2 := startDev(t, bin, args...)
	p2.waitHealthy(t, base)
	healthyAt := time.Now()
	t.Logf("kill to healthy: %s", healthyAt.Sub(killedAt).Round(time.Millisecond))

	cs2 := connectURL(t, base+"/mcp", map[string]string{gateway.HeaderTask: taskID})
	var wg sync.WaitGroup
	results := make([]*mcp.CallToolResult, len(slow))
	took := make([]time.Duration, len(slow))
	for i, c := range slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = call(t, cs2, c.tool, map[string]any{"key": c.key, "sleep_ms": 120000}, "key-"+c.key)
			took[i] = time.Since(healthyAt)
		}()
	}
	wg.Wait()
	for i, c := range slow {
		t.Logf("%s %s answered %s after the restart was healthy (%s after the kill): isError=%v %s",
			c.tool, c.key, took[i].Round(time.Millisecond), (took[i] + healthyAt.Sub(killedAt)).Round(time.Millisecond), results[i].IsError, text(results[i]))
		if took[i] > restartBound {
			t.Errorf("%s was answered %s after the restart was healthy; want within %s (its heartbeat timeout is %s)",
				c.tool, took[i].Round(time.Millisecond), restartBound, restartHeartbeat)
		}
		if got := results[i].Meta[gateway.MetaTask]; got != taskID {
			t.Errorf("%s answered from task %v, want %s", c.tool, got, taskID)
		}
	}
	if unk := results[0]; !unk.IsError || !strings.Contains(text(unk), "not idempotent") || !strings.Contains(text(unk), "stopped mid-call") {
		t.Errorf("in-flight non-idempotent call: isError=%v %q; want unknown, not re-run, because its process stopped", unk.IsError, text(unk))
	}
	if rerun := results[1]; rerun.IsError || !strings.Contains(text(rerun), `"count":-1`) {
		t.Errorf("in-flight idempotent call: isError=%v %q; want its re-run's result (the upstream recognised the key: count -1)", rerun.IsError, text(rerun))
	}
	for _, c := range []struct{ tool, key string }{{"append", "a1"}, {"put", "p1"}} {
		if got := sideEffects(t, effects, c.tool, c.key); got != 1 {
			t.Errorf("%s %s took effect %d times on the upstream, want 1", c.tool, c.key, got)
		}
	}
	if out := p2.output(); strings.Count(out, "ended an activity the previous airlock process was running") != 2 {
		t.Errorf("the restarted process did not log the two activities it ended:\n%s", out)
	}
}
