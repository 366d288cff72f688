package devserver

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// BenchmarkUpdateFloor measures what the embedded server and the SDK alone
// cost per durable call, with no airlock code on the path: one workflow per
// session, each call an Update (naming the run, waiting for completion) whose
// handler runs one local activity that returns its input. That is the shape
// of airlock's fast path (a task's auto-allowed call: one Update, one
// speculative workflow task, one local activity, six history events), so
// airlock's own cost per call is the difference between `airlock bench`
// and this floor, measured on the same machine in the same hour.
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

const (
	floorWorkflowName = "UpdateFloorWorkflow"
	floorActivityName = "UpdateFloorEcho"
	floorUpdateName   = "call"
	floorTaskQueue    = "update-floor"
	floorCallsPerRun  = 1000
)

func floorWorkflow(ctx workflow.Context) error {
	err := workflow.SetUpdateHandler(ctx, floorUpdateName, func(ctx workflow.Context, in string) (string, error) {
		ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
		var out string
		err := workflow.ExecuteLocalActivity(ctx, floorActivityName, in).Get(ctx, &out)
		return out, err
	})
	if err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

func floorEcho(_ context.Context, in string) (string, error) { return in, nil }

func benchUpdateFloor(b *testing.B, sessions int) {
	ctx := context.Background()
	s, err := Start(ctx, Options{DataDir: b.TempDir(), Port: 0})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	c, err := client.Dial(client.Options{HostPort: s.HostPort(), Namespace: s.Namespace(), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	w := worker.New(c, floorTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(floorWorkflow, workflow.RegisterOptions{Name: floorWorkflowName})
	w.RegisterActivityWithOptions(floorEcho, activity.RegisterOptions{Name: floorActivityName})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	// The server takes at most 2,000 distinct Updates per workflow run, so a
	// session moves to a fresh workflow every floorCallsPerRun calls; all are
	// started and warmed (first workflow task, sticky queue) before timing.
	per := (b.N + sessions - 1) / sessions
	runs := make([][]client.WorkflowRun, sessions)
	for i := range runs {
		for k := range (per + floorCallsPerRun - 1) / floorCallsPerRun {
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: fmt.Sprintf("floor-%d-%d-%d", sessions, i, k), TaskQueue: floorTaskQueue,
			}, floorWorkflowName)
			if err != nil {
				b.Fatal(err)
			}
			runs[i] = append(runs[i], run)
		}
	}
	call := func(run client.WorkflowRun, n int) error {
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: run.GetID(), RunID: run.GetRunID(), UpdateName: floorUpdateName,
			UpdateID: fmt.Sprintf("%s-%d", run.GetID(), n), Args: []any{"hi"},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err != nil {
			return err
		}
		var out string
		if err := h.Get(ctx, &out); err != nil {
			return err
		}
		if out != "hi" {
			return fmt.Errorf("update %s answered %q, want the echo of %q", h.UpdateID(), out, "hi")
		}
		return nil
	}
	for _, rs := range runs {
		for _, r := range rs {
			if err := call(r, -1); err != nil {
				b.Fatal(err)
			}
		}
	}

	lat := make([][]time.Duration, sessions)
	errs := make(chan error, sessions)
	var wg sync.WaitGroup
	cpu0, cpuOK := testenv.ProcessCPU()
	b.ResetTimer()
	start := time.Now()
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range per {
				t0 := time.Now()
				if err := call(runs[i][n/floorCallsPerRun], n); err != nil {
					errs <- err
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}()
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
