package integration

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestPrincipalFloodLeavesRoom (issue 28 §2): while bob calls one at a
// time, a burst of alice's stateless agents (each call its own task) runs
// at most gateway.principal_share (1) at once at the gateway; bob's calls
// are never queued behind hers; every one of alice's calls is answered
// and reaches the upstream once; and once bob is done the gate holds
// nothing.
func TestPrincipalFloodLeavesRoom(t *testing.T) {
	t.Parallel()
	const agents, perAgent, bobCalls = 8, 4, 12
	m, effects := counterManifest(t, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n"+
		"  put: {side_effects: [write], data_access_level: internal, risk: low, idempotent: true, timeout: 30s}\n")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: twoPrincipals(), maxCalls: 1 << 20})
	bob := connectStateless(t, s.url, bearer("bob-key"))
	waitTools(t, bob, "counter__echo")
	bobTask := resultTask(t, call(t, bob, "counter__echo", map[string]any{"text": "first"}, ""))

	// Watch alice's calls in flight at the gateway while bob calls.
	var bobActive atomic.Bool
	var maxAlice, samples atomic.Int64
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			if bobActive.Load() {
				in, _ := s.gw.PrincipalLoad("alice")
				if int64(in) > maxAlice.Load() {
					maxAlice.Store(int64(in))
				}
				samples.Add(1)
			}
			runtime.Gosched()
		}
	}()

	bobActive.Store(true)
	keys := burstKeys("fair", agents*perAgent)
	results := make([]*mcp.CallToolResult, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for a := range agents {
		cs := connectStateless(t, s.url, bearer("alice-key"))
		wg.Go(func() {
			for j := range perAgent {
				i := a*perAgent + j
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				results[i], errs[i] = cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__put",
					Arguments: map[string]any{"key": keys[i]}, Meta: mcp.Meta{gateway.MetaIdempotencyKey: keys[i]}})
				cancel()
			}
		})
	}
	for i := range bobCalls {
		res := callMeta(t, bob, "counter__echo", map[string]any{"text": fmt.Sprintf("bob-%d", i)}, mcp.Meta{gateway.MetaTask: bobTask})
		if res.IsError || pending(res) {
			t.Fatalf("bob's call %d: %s", i, text(res))
		}
		if _, waiting := s.gw.PrincipalLoad("bob"); waiting != 0 {
			t.Errorf("bob has %d calls waiting for his share; he calls one at a time", waiting)
		}
	}
	bobActive.Store(false)
	wg.Wait()
	stopWatch()
	<-watched

	if samples.Load() == 0 {
		t.Fatal("alice's load was never sampled while bob called")
	}
	if n := maxAlice.Load(); n > gateway.DefaultPrincipalShare {
		t.Errorf("alice had %d calls in flight at once while bob called one at a time, want at most %d (gateway.principal_share)", n, gateway.DefaultPrincipalShare)
	}
	for i, k := range keys {
		switch res := results[i]; {
		case errs[i] != nil:
			t.Errorf("alice's call %s: %v", k, errs[i])
		case res.IsError || pending(res):
			t.Errorf("alice's call %s answered %q, want its result", k, text(res))
		}
	}
	ran := effectsByKey(t, effects, "put")
	for _, k := range keys {
		if ran[k] != 1 {
			t.Errorf("put %s reached the upstream %d times, want once", k, ran[k])
		}
	}
	for _, p := range []string{"alice", "bob"} {
		if in, waiting := s.gw.PrincipalLoad(p); in != 0 || waiting != 0 {
			t.Errorf("after every answer the gateway holds %d in flight and %d waiting for %s", in, waiting, p)
		}
	}
}
