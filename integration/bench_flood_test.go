package integration

// BenchmarkPrincipalFlood (issue 28 §2): how much one principal's flood of
// stateless agents slows another principal's calls. bob makes calls one
// at a time, alone and then while 32 stateless agents of alice, naming no
// task, call as fast as they can; the figure is the ratio of bob's p50s
// (goal ≤ 2). Run for both answers to "what task does a request naming
// none join": a task of its own (new_task, the default) and alice's one
// default task (principal_task, the earlier behaviour).
//
//	go test -run '^$' -bench BenchmarkPrincipalFlood -benchtime 1x ./integration/

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// floodAgents and floodCalls: alice's agents, and bob's calls per phase.
const (
	floodAgents = 32
	floodCalls  = 60
)

func BenchmarkPrincipalFlood(b *testing.B) {
	for _, mode := range []struct {
		name   string
		shared bool
	}{{"new_task", false}, {"principal_task", true}} {
		b.Run(mode.name, func(b *testing.B) { benchFlood(b, mode.shared) })
	}
}

func benchFlood(b *testing.B, shared bool) {
	m := testupstreamManifest(b, filepath.Join(b.TempDir(), "effects.log"))
	s := newStack(b, stackOptions{manifests: []*manifests.Manifest{m}, directory: twoPrincipals(), sharedUnnamed: shared, maxCalls: 1 << 30})
	bob := connectStateless(b, s.url, bearer("bob-key"))
	waitTools(b, bob, "counter__echo")
	bobTask := resultTask(b, call(b, bob, "counter__echo", map[string]any{"text": "warm"}, ""))
	bobCalls := func(phase string) time.Duration {
		ds := make([]time.Duration, 0, floodCalls)
		for i := range floodCalls {
			t0 := time.Now()
			res := callMeta(b, bob, "counter__echo", map[string]any{"text": fmt.Sprintf("%s-%d", phase, i)}, mcp.Meta{gateway.MetaTask: bobTask})
			if res.IsError {
				b.Fatalf("bob's call: %s", text(res))
			}
			ds = append(ds, time.Since(t0))
		}
		return pct(ds, 50)
	}
	var ratios []float64
	for range b.N {
		alone := bobCalls("alone")
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var done, failed atomic.Int64
		agents := make([]any, floodAgents)
		for i := range agents {
			cs := connectStateless(b, s.url, bearer("alice-key"))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ctx.Err() == nil; n++ {
					cctx, cancel := context.WithTimeout(ctx, time.Minute)
					res, err := cs.CallTool(cctx, callParams("counter__echo", map[string]any{"text": fmt.Sprintf("flood-%d-%d", i, n)}))
					cancel()
					switch {
					case ctx.Err() != nil:
					case err != nil || res.IsError:
						failed.Add(1)
					default:
						done.Add(1)
					}
				}
			}()
		}
		time.Sleep(2 * time.Second) // the flood under way
		t0 := time.Now()
		flooded := bobCalls("flooded")
		took := time.Since(t0)
		stop()
		wg.Wait()
		r := float64(flooded) / float64(alone)
		ratios = append(ratios, r)
		b.Logf("bob's p50 alone %.2f ms, during alice's flood of %d stateless agents %.2f ms (ratio %.2f; goal ≤ 2); alice's calls answered %d (%.0f/s), failed %d",
			msOf(alone), floodAgents, msOf(flooded), r, done.Load(), float64(done.Load())/(took.Seconds()+2), failed.Load())
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
