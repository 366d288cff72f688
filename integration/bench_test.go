package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// BenchmarkCallOverhead calls the same cheap tool (testupstream's echo over
// stdio) directly with the go-sdk client and through airlock (gateway over
// streamable HTTP → Update on the task workflow → activity → upstream pool),
// alternating the two in one process, and reports p50/p99 of each, their
// ratio, and the workflow history events one call costs. pool-p50 is the
// upstream pool alone (what the activity does), to show where time goes.
//
//	go test -run '^$' -bench CallOverhead -benchtime 300x ./integration/
func BenchmarkCallOverhead(b *testing.B) {
	m := testupstreamManifest(b, filepath.Join(b.TempDir(), "effects.log"))
	s := newStack(b, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1 << 30})
	cs := s.connect(b, nil)
	waitTools(b, cs, "counter__echo")

	direct := mcp.NewClient(&mcp.Implementation{Name: "bench-direct", Version: "1"}, nil)
	ctx := context.Background()
	ds, err := direct.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(m.Server.Stdio.Command)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ds.Close()

	args := map[string]any{"text": "ping"}
	// Warm up both paths (first task start, connection setup).
	var taskID string
	for range 10 {
		if _, err := ds.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args}); err != nil {
			b.Fatal(err)
		}
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__echo", Arguments: args})
		if err != nil || r.IsError {
			b.Fatalf("warm-up through airlock: %v %v", err, r)
		}
		taskID, _ = r.Meta[gateway.MetaTask].(string)
	}
	before := len(fetchHistory(b, s.client, taskID, "").Events)

	dd := make([]time.Duration, 0, b.N)
	ad := make([]time.Duration, 0, b.N)
	pd := make([]time.Duration, 0, b.N)
	raw := []byte(`{"text":"ping"}`)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := ds.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__echo", Arguments: args})
		if err != nil || r.IsError {
			b.Fatalf("through airlock: %v %v", err, r)
		}
		t2 := time.Now()
		if _, err := s.pool.CallTool(ctx, "counter", "echo", raw); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		dd = append(dd, t1.Sub(t0))
		ad = append(ad, t2.Sub(t1))
		pd = append(pd, t3.Sub(t2))
	}
	b.StopTimer()
	after := len(fetchHistory(b, s.client, taskID, "").Events)

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	dp50, dp99 := pct(dd, 50), pct(dd, 99)
	ap50, ap99 := pct(ad, 50), pct(ad, 99)
	b.ReportMetric(ms(dp50), "direct-p50-ms")
	b.ReportMetric(ms(dp99), "direct-p99-ms")
	b.ReportMetric(ms(ap50), "airlock-p50-ms")
	b.ReportMetric(ms(ap99), "airlock-p99-ms")
	b.ReportMetric(ms(pct(pd, 50)), "pool-p50-ms")
	b.ReportMetric(float64(ap50)/float64(dp50), "ratio-p50")
	b.ReportMetric(float64(ap99)/float64(dp99), "ratio-p99")
	b.ReportMetric(float64(after-before)/float64(b.N), "history-events/call")
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

// BenchmarkSagaOverhead measures what undo costs, all through airlock in one
// task: a plain call (echo), a call whose compensation the worker computes
// afterwards (put), and one that also captures a pre-image first (append:
// capture, call, compensation), alternating; then one rollback of every
// compensable call made, reported per compensation.
//
//	go test -run '^$' -bench SagaOverhead -benchtime 100x ./integration/
func BenchmarkSagaOverhead(b *testing.B) {
	s := newStack(b, stackOptions{manifests: []*manifests.Manifest{sagaCounter(b)}, maxCalls: 1 << 30})
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
