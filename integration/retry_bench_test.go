package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// BenchmarkRetryFirstResult measures what a retry costs when its result
// is read from the history of an earlier run (issue 28 item 6) against a
// retry the current run answers itself. One task makes append calls
// until it is 10 calls into run 2 (run 1 ends after perRun calls, or
// earlier when Temporal suggests continue-as-new), so run 1 is closed and
// only its last 22 calls are among the 32 results carried; then, in
// alternating rounds, it retries: the last call (same-run: Temporal
// answers from the run's own Update), run 1's last call (carried: the
// workflow answers from its memory, which is what every retry of an old
// call cost before this change, when it answered with a pointer), run
// 1's first call (the gateway reads run 1's history up to its first
// Update) and run 1's 30th call from the end (not carried: it reads
// nearly all of it). It reports each one's p50, the ratios to carried,
// run 1's size, and a bare client read of run 1's whole history.
//
//	go test -run '^$' -bench RetryFirstResult -benchtime 100x ./integration/
func BenchmarkRetryFirstResult(b *testing.B) {
	for _, perRun := range []int{100, 500} {
		b.Run(fmt.Sprintf("calls-per-run=%d", perRun), func(b *testing.B) { benchRetry(b, perRun) })
	}
}

func benchRetry(b *testing.B, perRun int) {
	m, _ := counterManifest(b, appendOnly)
	s := newStack(b, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1 << 20, continueAsNewAfter: perRun})
	cs := s.connect(b, nil)
	waitTools(b, cs, "counter__append")
	ctx := context.Background()
	firsts := map[string]string{}
	key := func(i int) string { return fmt.Sprintf("key-%d", i) }
	taskID, run1 := "", ""
	run1Calls, run2, lastKey := 0, 0, ""
	for i := 0; run2 < 10; i++ {
		res := call(b, cs, "counter__append", map[string]any{"key": key(i)}, key(i))
		if appendCount(res) != 1 {
			b.Fatalf("call %d: %s", i, text(res))
		}
		firsts[key(i)], lastKey = resultJSON(b, res), key(i)
		if i == 0 {
			taskID, _ = res.Meta[gateway.MetaTask].(string)
			d, err := s.client.DescribeWorkflowExecution(ctx, taskID, "")
			if err != nil {
				b.Fatal(err)
			}
			run1 = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		}
		if i > 0 {
			d, err := s.client.DescribeWorkflowExecution(ctx, taskID, "")
			if err != nil {
				b.Fatal(err)
			}
			if run2 > 0 || d.GetWorkflowExecutionInfo().GetExecution().GetRunId() != run1 {
				run2++
			}
		}
	}
	// Run 1 as the gateway reads it: its events and bytes, and a bare
	// read of all of it.
	var run1Keys []string
	read := func() (events, size int) {
		run1Keys = run1Keys[:0]
		it := s.client.GetWorkflowHistory(ctx, taskID, run1, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			events, size = events+1, size+proto.Size(ev)
			if a := ev.GetWorkflowExecutionUpdateCompletedEventAttributes(); a != nil {
				if k, ok := api.KeyOfCallID(a.GetMeta().GetUpdateId()); ok {
					run1Keys = append(run1Keys, k)
				}
			}
		}
		return events, size
	}
	events, size := read()
	run1Calls = len(run1Keys)
	if run1Calls < 40 {
		b.Fatalf("run 1 made %d calls; want at least 40", run1Calls)
	}

	targets := []struct{ name, key string }{
		{"carried", run1Keys[run1Calls-1]},
		{"same-run", ""},
		{"run1-first", run1Keys[0]},
		{"run1-late", run1Keys[run1Calls-30]},
	}
	targets[1].key = lastKey
	lat := make([][]time.Duration, len(targets)+1)
	b.ResetTimer()
	for range b.N {
		for i, tg := range targets {
			t0 := time.Now()
			res := call(b, cs, "counter__append", map[string]any{"key": tg.key}, tg.key)
			lat[i] = append(lat[i], time.Since(t0))
			if got := resultJSON(b, res); got != firsts[tg.key] {
				b.Fatalf("%s: retry answered %s; want its first result %s", tg.name, got, firsts[tg.key])
			}
		}
		t0 := time.Now()
		read()
		lat[len(targets)] = append(lat[len(targets)], time.Since(t0))
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	carried := pct(lat[0], 50)
	for i, tg := range targets {
		b.ReportMetric(ms(pct(lat[i], 50)), tg.name+"-p50-ms")
		if i > 0 {
			b.ReportMetric(float64(pct(lat[i], 50))/float64(carried), tg.name+"/carried")
		}
	}
	b.ReportMetric(ms(pct(lat[len(targets)], 50)), "read-run1-p50-ms")
	b.ReportMetric(float64(events), "run1-events")
	b.ReportMetric(float64(run1Calls), "run1-calls")
	b.ReportMetric(float64(size)/1024, "run1-KiB")
	var st api.Status
	if v, err := s.client.QueryWorkflow(ctx, taskID, "", api.QueryStatus); err != nil || v.Get(&st) != nil || st.Runs < 2 {
		b.Fatalf("the task is in run %d (%v); want at least 2", st.Runs, err)
	}
}
