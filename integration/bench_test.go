package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/loadgen"
	"github.com/airlock-run/airlock/manifests"
)

// BenchmarkCallOverhead puts the same load on testupstream's echo (served
// over streamable HTTP) directly and through airlock (gateway → Update on
// the task workflow → activity → upstream pool → the same testupstream),
// with internal/loadgen, the package behind `airlock bench`: 1 session
// calling back to back, then 8 and 32 sessions, each session its own task.
// The two targets are measured in alternating rounds over sessions held
// open, b.N calls each. It reports each side's p50/p99 and calls/s, their
// ratios, each side's process CPU per call (robust where latency is not:
// another engineer's compile slows a call but does not add to its CPU;
// compare airlock's with BenchmarkUpdateFloor's cpu-ms/call), and the
// workflow history events one call costs.
//
//	go test -run '^$' -bench CallOverhead -benchtime 300x ./integration/
//
// Under -benchtime 1x (CI) it checks only that every call was answered.
func BenchmarkCallOverhead(b *testing.B) {
	up := startHTTPUpstream(b, filepath.Join(b.TempDir(), "effects.log"))
	m := httpUpstreamManifest(b, up)
	s := newStack(b, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1 << 30})
	waitTools(b, s.connect(b, nil), "counter__echo")
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) { benchOverhead(b, s, up, n) })
	}
}

func benchOverhead(b *testing.B, s *stack, up string, sessions int) {
	ctx := context.Background()
	var mu sync.Mutex
	tasks := map[string]bool{}
	targets := []loadgen.Target{
		{Name: "direct", URL: up, Tool: "echo"},
		{Name: "airlock", URL: s.url, Tool: "counter__echo", Header: http.Header{"Authorization": {"Bearer " + testKey}}},
	}
	lb, err := loadgen.Open(ctx, targets, loadgen.Options{
		Args: json.RawMessage(`{"text":"ping"}`), Sessions: sessions, Calls: b.N, Warmup: 2, Rounds: 5,
		ProcessCPU: func() time.Duration { return processCPU(b) },
		OnResult: func(target, _ int, res *mcp.CallToolResult) {
			if id, ok := res.Meta[gateway.MetaTask].(string); ok && target == 1 {
				mu.Lock()
				tasks[id] = true
				mu.Unlock()
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer lb.Close()
	if len(tasks) != sessions {
		b.Fatalf("%d sessions warmed up %d tasks, want one each", sessions, len(tasks))
	}
	before := historyLengths(b, s.client, tasks)
	b.ResetTimer()
	rs := lb.Run(ctx)
	b.StopTimer()
	after := historyLengths(b, s.client, tasks)

	direct, through := rs[0], rs[1]
	for _, r := range rs {
		if r.Calls != b.N || r.OK != b.N || r.Errs() != 0 || r.Cancelled != 0 {
			b.Fatalf("%s: %d calls (%d ok, %d transport errors, %d isError, %d cancelled), want %d answered: %+v",
				r.Target, r.Calls, r.OK, r.TransportErrors, r.ToolErrors, r.Cancelled, b.N, r.Errors)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	q := loadgen.Compare(direct, through)
	b.ReportMetric(ms(direct.Latency.P50), "direct-p50-ms")
	b.ReportMetric(ms(direct.Latency.P99), "direct-p99-ms")
	b.ReportMetric(ms(through.Latency.P50), "airlock-p50-ms")
	b.ReportMetric(ms(through.Latency.P99), "airlock-p99-ms")
	b.ReportMetric(q.P50, "p50-ratio")
	b.ReportMetric(q.P99, "p99-ratio")
	b.ReportMetric(direct.CallsPerSecond, "direct-calls/s")
	b.ReportMetric(through.CallsPerSecond, "calls/s")
	// The whole process's CPU (load client, gateway, worker, Temporal
	// server; the upstream is another process) in each side's rounds.
	b.ReportMetric(ms(direct.CPUPerCall), "direct-cpu-ms/call")
	b.ReportMetric(ms(through.CPUPerCall), "airlock-cpu-ms/call")
	if events, ok := eventsAdded(before, after); ok {
		b.ReportMetric(float64(events)/float64(b.N), "history-events/call")
	} else {
		b.Logf("a task continued as new during the run: no history-events/call")
	}
	if sessions == 1 {
		// The upstream pool alone (what the activity does), to show where
		// the time goes; after the measured run, so it does not compete.
		pd := make([]time.Duration, 0, min(b.N, 200))
		for range cap(pd) {
			t0 := time.Now()
			if _, err := s.pool.CallTool(ctx, "counter", "echo", []byte(`{"text":"ping"}`)); err != nil {
				b.Fatal(err)
			}
			pd = append(pd, time.Since(t0))
		}
		b.ReportMetric(ms(pct(pd, 50)), "pool-p50-ms")
	}
}

// historyLen is a task's current run and the length of its history.
type historyLen struct {
	run    string
	events int64
}

func historyLengths(t testing.TB, c client.Client, tasks map[string]bool) map[string]historyLen {
	t.Helper()
	out := map[string]historyLen{}
	for id := range tasks {
		d, err := c.DescribeWorkflowExecution(context.Background(), id, "")
		if err != nil {
			t.Fatalf("describing task %s: %v", id, err)
		}
		info := d.GetWorkflowExecutionInfo()
		out[id] = historyLen{run: info.GetExecution().GetRunId(), events: info.GetHistoryLength()}
	}
	return out
}

// eventsAdded is how many history events the tasks gained; false when one
// continued as new (its history restarted, so the count would lie).
func eventsAdded(before, after map[string]historyLen) (int64, bool) {
	var n int64
	for id, a := range after {
		if before[id].run != a.run {
			return 0, false
		}
		n += a.events - before[id].events
	}
	return n, true
}

// startHTTPUpstream runs testupstream serving streamable HTTP, writing its
// side effects to sideEffectLog, and returns its MCP URL once it answers.
func startHTTPUpstream(t testing.TB, sideEffectLog string) string {
	t.Helper()
	bin := buildBinary(t, "./integration/testupstream")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "-http", addr)
	cmd.Env = append(os.Environ(), "SIDE_EFFECT_LOG="+sideEffectLog)
	out := &lockedWriter{w: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	waitFor(t, "testupstream -http to listen", 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("testupstream -http exited: %s", out.String())
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return "http://" + addr + "/mcp"
}

// httpUpstreamManifest declares testupstream's echo served at url.
func httpUpstreamManifest(t testing.TB, url string) *manifests.Manifest {
	t.Helper()
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "counter.yaml"), []byte(`server:
  name: counter
  http: {url: "`+url+`"}
tools:
  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}

// BenchmarkCompensationOverhead measures what undo costs, all through airlock in one
// task: a plain call (echo), a call whose compensation the worker computes
// afterwards (put), and one that also captures a pre-image first (append:
// capture, call, compensation), alternating; then one rollback of every
// compensable call made, reported per compensation.
//
//	go test -run '^$' -bench CompensationOverhead -benchtime 100x ./integration/
func BenchmarkCompensationOverhead(b *testing.B) {
	s := newStack(b, stackOptions{manifests: []*manifests.Manifest{compensationCounter(b)}, maxCalls: 1 << 30})
	cs := s.connect(b, map[string]string{gateway.HeaderTask: "bench-saga"})
	waitTools(b, cs, "counter__echo", "counter__put", "counter__append")
	ctx := context.Background()
	callOK := func(name string, args map[string]any) time.Duration {
		t0 := time.Now()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || r.IsError {
			b.Fatalf("%s: %v %v", name, err, r)
		}
		return time.Since(t0)
	}
	for i := range 5 { // warm up
		callOK("counter__echo", map[string]any{"text": "x"})
		callOK("counter__put", map[string]any{"key": "warm-put-" + string(rune('a'+i))})
	}
	var plain, comp, capt []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := time.Now().Format("150405.000000000")
		plain = append(plain, callOK("counter__echo", map[string]any{"text": key}))
		comp = append(comp, callOK("counter__put", map[string]any{"key": "p" + key}))
		capt = append(capt, callOK("counter__append", map[string]any{"key": "a" + key}))
	}
	t0 := time.Now()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: gateway.ToolRollback, Arguments: map[string]any{}})
	rb := time.Since(t0)
	if err != nil || r.IsError {
		b.Fatalf("rollback: %v %v", err, r)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(pct(plain, 50)), "plain-p50-ms")
	b.ReportMetric(ms(pct(comp, 50)), "compensable-p50-ms")
	b.ReportMetric(ms(pct(capt, 50)), "captured-p50-ms")
	b.ReportMetric(float64(pct(capt, 50))/float64(pct(plain, 50)), "captured/plain-p50")
	b.ReportMetric(ms(rb)/float64(2*b.N+5), "rollback-ms/compensation")
}

// BenchmarkCountedCallOverhead is BenchmarkCallOverhead with every task
// under a budget (issue 25): each echo is a counted call, which takes the
// regular pipeline (Decide, then the CallTool activity) rather than the
// fast path. Compare it with BenchmarkCallOverhead in the same minutes.
//
//	go test -run '^$' -bench 'CallOverhead' -benchtime 300x ./integration/
func BenchmarkCountedCallOverhead(b *testing.B) {
	up := startHTTPUpstream(b, filepath.Join(b.TempDir(), "effects.log"))
	m := httpUpstreamManifest(b, up)
	s := newStack(b, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1 << 30, budget: 1 << 30})
	waitTools(b, s.connect(b, nil), "counter__echo")
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) { benchOverhead(b, s, up, n) })
	}
}
