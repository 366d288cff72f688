package program

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/wasm"
	"github.com/airlock-run/airlock/wasm/program/wire"
)

// benchHost answers each call at once with {}, in start order; unlike
// fakeHost it checks nothing, so the benchmarks time the runner.
type benchHost struct {
	queue []int
	n     int
}

func (h *benchHost) Start(m wire.GuestMessage) { h.queue = append(h.queue, m.ID); h.n++ }

func (h *benchHost) Wait() wire.Reply {
	id := h.queue[0]
	h.queue = h.queue[1:]
	return wire.Reply{ID: id, Outcome: "ok", Result: []byte("{}")}
}

// BenchmarkCompile is New to Ready for wasm.Program: without a cache (what
// a worker's first start pays) and from a warm on-disk cache.
func BenchmarkCompile(b *testing.B) {
	ctx := context.Background()
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprintf("cached=%v", cached), func(b *testing.B) {
			dir := ""
			if cached {
				dir = cacheDir
			}
			for b.Loop() {
				r, err := New(ctx, Options{CacheDir: dir, Module: wasm.Program, Warm: 1})
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Ready(ctx); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_ = r.Close(ctx)
				b.StartTimer()
			}
			b.ReportMetric(float64(len(wasm.Program))/(1<<20), "module-MiB")
		})
	}
}

// BenchmarkInstantiate is a cold instance's start: instantiating
// wasm.Program and running the Go runtime's start until the guest waits
// in its first recv (what the pool saves a program).
func BenchmarkInstantiate(b *testing.B) {
	r := newRuntime(b, wasm.Program)
	for b.Loop() {
		inst, err := r.startInstance(DefaultMemoryBytes / pageSize)
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-inst.parked:
		case <-inst.exited:
			b.Fatal("the guest exited before its first recv")
		}
		b.StopTimer()
		inst.stop()
		<-inst.exited
		b.StartTimer()
	}
}

// BenchmarkStart is the Run of a program that makes no call, on a warm
// instance (the pool refilled between runs, untimed); p50-ms is the
// median. "guest" is the test guest's, which has no interpreter: the
// host's and the protocol's share.
func BenchmarkStart(b *testing.B) {
	for _, tc := range []struct {
		name   string
		module []byte
		req    wire.Request
	}{
		{"program", wasm.Program, moduleRequest("def main():\n    return {\"ok\": True}\n")},
		{"guest", testGuest(b), wire.Request{Source: "calls 0"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := newRuntime(b, tc.module)
			r.mu.Lock()
			p := r.pools[DefaultMemoryBytes/pageSize]
			r.mu.Unlock()
			full := func() bool { return len(p.ready) == cap(p.ready) }
			var times []time.Duration
			for b.Loop() {
				b.StopTimer()
				testenv.WaitFor(b, "the pool to refill", time.Minute, full)
				h := &benchHost{}
				b.StartTimer()
				start := time.Now()
				d, err := r.Run(context.Background(), tc.req, DefaultMemoryBytes, h)
				times = append(times, time.Since(start))
				if err != nil || d.Outcome != wire.OutcomeOK {
					b.Fatalf("Run: %+v, %v", d, err)
				}
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
		})
	}
}

// BenchmarkCall is the cost of one tool call inside a program, over the
// host protocol (the fake host answers at once): a program of 1000 calls,
// its start subtracted.
func BenchmarkCall(b *testing.B) {
	const calls = 1000
	for _, tc := range []struct {
		name string
		r    runner
	}{{"wasm", newRuntime(b, wasm.Program)}, {"native", Native{}}} {
		b.Run(tc.name, func(b *testing.B) {
			req := moduleRequest(fmt.Sprintf("def main():\n    for i in range(%d):\n        fs.stat(path = \"x\")\n", calls))
			req.Limits.MaxSteps = 1 << 40
			empty := moduleRequest("def main():\n    pass\n")
			var per time.Duration
			for b.Loop() {
				h := &benchHost{}
				t0 := time.Now()
				d, err := tc.r.Run(context.Background(), empty, DefaultMemoryBytes, h)
				t1 := time.Now()
				if err != nil || d.Outcome != wire.OutcomeOK {
					b.Fatalf("Run: %+v, %v", d, err)
				}
				d, err = tc.r.Run(context.Background(), req, DefaultMemoryBytes, h)
				if err != nil || d.Outcome != wire.OutcomeOK || h.n != calls {
					b.Fatalf("Run: %+v, %v, %d calls", d, err, h.n)
				}
				per += (time.Since(t1) - t1.Sub(t0)) / calls
			}
			b.ReportMetric(float64(per.Nanoseconds())/float64(b.N)/1000, "µs/call")
		})
	}
}

// BenchmarkSteps is the interpreter's speed in the guest: a loop of a
// million steps with no call.
func BenchmarkSteps(b *testing.B) {
	for _, tc := range []struct {
		name string
		r    runner
	}{{"wasm", newRuntime(b, wasm.Program)}, {"native", Native{}}} {
		b.Run(tc.name, func(b *testing.B) {
			req := moduleRequest("def main():\n    x = 0\n    for i in range(100000):\n        x += i\n    return x\n")
			req.Limits.MaxSteps, req.Limits.MaxStepsBetweenCalls = 1<<40, 1<<40
			var steps int64
			for b.Loop() {
				d, err := tc.r.Run(context.Background(), req, DefaultMemoryBytes, &benchHost{})
				if err != nil || d.Outcome != wire.OutcomeOK {
					b.Fatalf("Run: %+v, %v", d, err)
				}
				steps += d.Steps
			}
			b.ReportMetric(float64(steps)/b.Elapsed().Seconds()/1e6, "Msteps/s")
		})
	}
}

// BenchmarkProtocol is the host protocol's own cost per call: the test
// guest's 1000 calls (no interpreter), its start subtracted.
func BenchmarkProtocol(b *testing.B) {
	const calls = 1000
	r := newRuntime(b, testGuest(b))
	var per time.Duration
	for b.Loop() {
		t0 := time.Now()
		if d, err := r.Run(context.Background(), wire.Request{Source: "calls 0"}, 0, &benchHost{}); err != nil || d.Outcome != wire.OutcomeOK {
			b.Fatalf("Run: %+v, %v", d, err)
		}
		t1 := time.Now()
		h := &benchHost{}
		if d, err := r.Run(context.Background(), wire.Request{Source: fmt.Sprintf("calls %d", calls)}, 0, h); err != nil || d.Outcome != wire.OutcomeOK || h.n != calls {
			b.Fatalf("Run: %+v, %v", d, err)
		}
		per += (time.Since(t1) - t1.Sub(t0)) / calls
	}
	b.ReportMetric(float64(per.Nanoseconds())/float64(b.N)/1000, "µs/call")
}
