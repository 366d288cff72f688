package devserver

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
)

// BenchmarkUpdateFloor measures the floor (floor.go: the embedded server
// and the SDK alone, one Update running one local activity per call, no
// airlock code on the path) at 1 and 32 sessions. airlock's own cost per
// call is the difference between `airlock bench` and this floor, measured
// on the same machine in the same minutes; `airlock bench --floor` measures
// the two in alternating rounds.
//
// Reported per call: the process's CPU (user + system, all goroutines: the
// server's services, the worker and the callers), p50 latency, calls per
// second. Run it with a fixed count, e.g.
//
//	go test -run '^$' -bench UpdateFloor -benchtime 2000x ./internal/devserver/
//
// It is a benchmark, not a test: nothing here asserts a time.
func BenchmarkUpdateFloor(b *testing.B) {
	for _, sessions := range []int{1, 32} {
		b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) { benchUpdateFloor(b, sessions) })
	}
}

func benchUpdateFloor(b *testing.B, sessions int) {
	ctx := context.Background()
	f, err := StartFloor(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ss, err := f.Open(ctx, sessions)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, s := range ss {
			_ = s.Close()
		}
	}()

	per := (b.N + sessions - 1) / sessions
	lat := make([][]time.Duration, sessions)
	errs := make(chan error, sessions)
	var wg sync.WaitGroup
	cpu0, cpuOK := testenv.ProcessCPU()
	b.ResetTimer()
	start := time.Now()
	for i, s := range ss {
		wg.Go(func() {
			for range per {
				t0 := time.Now()
				if err := s.Call(ctx); err != nil {
					errs <- err
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu1, cpuOK1 := testenv.ProcessCPU()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	calls := float64(len(all))
	if cpuOK && cpuOK1 {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/1000/calls, "cpu-ms/call")
	}
	b.ReportMetric(calls/elapsed.Seconds(), "calls/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
}
