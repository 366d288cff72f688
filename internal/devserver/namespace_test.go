package devserver

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TestCreateNamespace creates namespaces on a running server: each is
// usable at once (a workflow started with a search attribute runs), has
// Start's retention, and sees only its own workflows.
func TestCreateNamespace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := testOptions(t.TempDir())
	opts.Retention = 72 * time.Hour
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })

	const wfID = "devserver-namespace-test"
	for _, ns := range []string{"first", "second"} {
		began := time.Now()
		if err := s.CreateNamespace(ctx, ns); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
		t.Logf("create namespace %s: %s", ns, time.Since(began))

		c, err := client.Dial(client.Options{HostPort: s.HostPort(), Namespace: ns,
			Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
		if err != nil {
			t.Fatalf("dial namespace %s: %v", ns, err)
		}
		if ret := retention(ctx, t, c, ns); ret != 72*time.Hour {
			t.Errorf("retention of namespace %s = %s, want Start's 72h", ns, ret)
		}
		w := worker.New(c, testTaskQueue, worker.Options{})
		w.RegisterWorkflowWithOptions(testWorkflow, workflow.RegisterOptions{Name: testWorkflowName})
		w.RegisterActivityWithOptions(testActivity, activity.RegisterOptions{Name: testActivityName})
		if err := w.Start(); err != nil {
			t.Fatalf("start worker in %s: %v", ns, err)
		}
		// The same workflow ID in each: namespaces do not share IDs.
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wfID, TaskQueue: testTaskQueue,
			TypedSearchAttributes: temporal.NewSearchAttributes(testToolKey.ValueSet(ns))}, testWorkflowName, ns)
		if err != nil {
			t.Fatalf("execute workflow in %s: %v", ns, err)
		}
		var got string
		if err := run.Get(ctx, &got); err != nil || got != "hello "+ns {
			t.Fatalf("workflow in %s = %q, %v; want %q", ns, got, err, "hello "+ns)
		}
		w.Stop()

		query := fmt.Sprintf("%s = %q", testToolKey.GetName(), ns)
		var n int64
		for n == 0 && ctx.Err() == nil {
			resp, err := c.WorkflowService().CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: ns, Query: query})
			if err != nil {
				t.Fatalf("count %q in %s: %v", query, ns, err)
			}
			n = resp.GetCount()
			if n == 0 {
				time.Sleep(50 * time.Millisecond) // visibility is written in the background
			}
		}
		if n != 1 {
			t.Errorf("count %q in %s = %d, want 1", query, ns, n)
		}
		resp, err := c.WorkflowService().CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: ns})
		if err != nil || resp.GetCount() != 1 {
			t.Errorf("namespace %s holds %d workflows (%v), want only its own", ns, resp.GetCount(), err)
		}
		c.Close()
	}
	if err := s.CreateNamespace(ctx, "first"); err == nil {
		t.Error("creating an existing namespace succeeded")
	}
}
