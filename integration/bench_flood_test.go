package integration

// BenchmarkPrincipalFlood (issue 28 §2): how much one principal's flood of
// stateless agents slows another principal's calls. bob makes calls one
// at a time, alone and while 32 stateless agents of alice, naming no
// task, call as fast as they can, in alternating rounds (so a change in
// the machine's load falls on both); the figure is the ratio of bob's
// p50s (goal ≤ 2). Run for both answers to "what task does a request
// naming none join": a task of its own (new_task, the default) and
// alice's one default task (principal_task, the earlier behaviour); and
// with gateway.principal_share off (as before fairness.go) and on.
//
//	go test -run '^$' -bench BenchmarkPrincipalFlood -benchtime 1x ./integration/

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// floodAgents: alice's agents; floodRounds × floodCalls: bob's calls
// alone and as many flooded. Under CI=true (every benchmark once, for its
// assertions) one short round per mode.
const floodAgents = 32

var floodRounds, floodCalls = 5, 20

func init() {
	if os.Getenv("CI") == "true" {
		floodRounds, floodCalls = 1, 10
	}
}

func BenchmarkPrincipalFlood(b *testing.B) {
	for _, mode := range []struct {
		name   string
		shared bool
		share  int // gateway.principal_share (-1: off, as before fairness.go)
	}{
		{"new_task/share_off", false, -1}, {"new_task/share_1", false, 1}, {"new_task/share_2", false, 2},
		{"principal_task/share_off", true, -1}, {"principal_task/share_1", true, 1},
	} {
		b.Run(mode.name, func(b *testing.B) { benchFlood(b, mode.shared, mode.share) })
	}
}

func benchFlood(b *testing.B, shared bool, share int) {
	m := testupstreamManifest(b, filepath.Join(b.TempDir(), "effects.log"))
	s := newStack(b, stackOptions{manifests: []*manifests.Manifest{m}, directory: twoPrincipals(), sharedUnnamed: shared, maxCalls: 1 << 30, principalShare: share})
	bob := connectStateless(b, s.url, bearer("bob-key"))
	waitTools(b, bob, "counter__echo")
	bobTask := resultTask(b, call(b, bob, "counter__echo", map[string]any{"text": "warm"}, ""))
	n := 0
	bobCalls := func(ds []time.Duration) []time.Duration {
		for range floodCalls {
			n++
			t0 := time.Now()
			res := callMeta(b, bob, "counter__echo", map[string]any{"text": fmt.Sprintf("bob-%d", n)}, mcp.Meta{gateway.MetaTask: bobTask})
			if res.IsError {
				b.Fatalf("bob's call: %s", text(res))
			}
			ds = append(ds, time.Since(t0))
		}
		return ds
	}
	agents := make([]*mcp.ClientSession, floodAgents)
	for i := range agents {
		agents[i] = connectStateless(b, s.url, bearer("alice-key"))
	}
	var ratios []float64
	for range b.N {
		var alone, flooded []time.Duration
		var done, failed atomic.Int64
		var floodTime, floodCPU time.Duration
		var floodDone int64
		for range floodRounds {
			alone = bobCalls(alone)
			// The flood, for this round: every agent calls back to back
			// until bob's calls are done, and its last call is answered.
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i, cs := range agents {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := 0; ctx.Err() == nil; k++ {
						cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						res, err := cs.CallTool(cctx, callParams("counter__echo", map[string]any{"text": fmt.Sprintf("flood-%d-%d-%d", n, i, k)}))
						cancel()
						if err != nil || res.IsError {
							failed.Add(1)
						} else {
							done.Add(1)
						}
					}
				}()
			}
			time.Sleep(500 * time.Millisecond) // the flood under way
			t0, cpu0, before := time.Now(), processCPU(b), done.Load()
			flooded = bobCalls(flooded)
			floodTime += time.Since(t0)
			floodCPU += processCPU(b) - cpu0
			floodDone += done.Load() - before
			stop()
			wg.Wait()
		}
		r := float64(pct(flooded, 50)) / float64(pct(alone, 50))
		ratios = append(ratios, r)
		b.Logf("bob's p50 alone %.2f ms, during alice's flood of %d stateless agents %.2f ms (ratio %.2f; goal ≤ 2); alice's calls answered %d (%.0f/s while bob called), failed %d; process CPU %.2f ms per call while bob called",
			msOf(pct(alone, 50)), floodAgents, msOf(pct(flooded, 50)), r, done.Load(), float64(floodDone)/floodTime.Seconds(), failed.Load(), msOf(floodCPU)/float64(floodDone+int64(len(flooded))))
		if failed.Load() > 0 {
			b.Errorf("%d of alice's calls failed", failed.Load())
		}
	}
	var sum float64
	for _, r := range ratios {
		sum += r
	}
	b.ReportMetric(sum/float64(len(ratios)), "flooded/alone-p50")
}

// callParams are a tools/call's parameters.
func callParams(name string, args any) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: name, Arguments: args}
}
