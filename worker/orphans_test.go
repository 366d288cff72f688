package worker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/devserver"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/worker"
)

// probeInput says where a probe workflow's one activity runs, and whether
// the workflow cancels it when signalled.
type probeInput struct {
	TaskQueue      string
	CancelOnSignal bool
}

// probe runs one activity and returns how it ended: the application
// error's type, "canceled", or "ok".
func probe(ctx workflow.Context, in probeInput) (string, error) {
	actx, cancel := workflow.WithCancel(ctx)
	actx = workflow.WithActivityOptions(actx, workflow.ActivityOptions{TaskQueue: in.TaskQueue,
		StartToCloseTimeout: time.Hour, WaitForCancellation: true, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	if in.CancelOnSignal {
		workflow.Go(ctx, func(ctx workflow.Context) {
			workflow.GetSignalChannel(ctx, "cancel").Receive(ctx, nil)
			cancel()
		})
	}
	err := workflow.ExecuteActivity(actx, "Hang").Get(ctx, nil)
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return "ok", nil
	case errors.As(err, &appErr):
		return appErr.Type(), nil
	case temporal.IsCanceledError(err):
		return "canceled", nil
	}
	return "", err
}

// TestResolveOrphans runs activities on workers that stand for: a sole
// worker of an earlier process (its activity hangs, as a dead process's
// would), the current process, and a worker that is not sole; and one
// activity no worker picks up. ResolveOrphans must end only the earlier
// process's attempts: failed as OutcomeUnknown, or cancelled when the
// workflow had asked for that.
func TestResolveOrphans(t *testing.T) {
	if testing.Short() {
		t.Skip("embedded Temporal; skipped with -short")
	}
	ctx := context.Background()
	srv, err := devserver.Start(ctx, devserver.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	quiet := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	c, err := client.Dial(client.Options{HostPort: srv.HostPort(), Namespace: srv.Namespace(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	started := make(chan string, 8)
	release := make(chan struct{})
	hang := func(ctx context.Context) error {
		started <- activity.GetInfo(ctx).TaskQueue
		<-release // deaf to cancellation: it stands for a process that is gone
		return nil
	}
	startWorker := func(tq, identity string, withWorkflow bool) {
		w := sdkworker.New(c, tq, sdkworker.Options{Identity: identity})
		if withWorkflow {
			w.RegisterWorkflowWithOptions(probe, workflow.RegisterOptions{Name: "Probe"})
		} else {
			w.RegisterActivityWithOptions(hang, activity.RegisterOptions{Name: "Hang"})
		}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	dead, self := worker.SoleIdentity(), worker.SoleIdentity()
	if dead == self {
		t.Fatalf("two sole identities are equal: %s", dead)
	}
	startWorker("wf", "workflows", true)
	startWorker("tq-dead", dead, false)
	startWorker("tq-self", self, false)
	startWorker("tq-other", "4242@elsewhere@", false)
	t.Cleanup(func() { close(release) }) // before the workers stop

	runs := map[string]client.WorkflowRun{}
	for _, p := range []struct {
		id string
		in probeInput
	}{
		{"dead", probeInput{TaskQueue: "tq-dead"}},
		{"dead-cancelling", probeInput{TaskQueue: "tq-dead", CancelOnSignal: true}},
		{"self", probeInput{TaskQueue: "tq-self"}},
		{"other", probeInput{TaskQueue: "tq-other"}},
		{"unstarted", probeInput{TaskQueue: "tq-nobody"}},
	} {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: p.id, TaskQueue: "wf"}, "Probe", p.in)
		if err != nil {
			t.Fatal(err)
		}
		runs[p.id] = run
	}
	for range 4 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the activities did not start")
		}
	}
	if err := c.SignalWorkflow(ctx, "dead-cancelling", "", "cancel", nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "every probe visible, the cancellation requested and the unstarted activity scheduled", 30*time.Second, func() bool {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: srv.Namespace(),
			Query: "ExecutionStatus = 'Running' AND TaskQueue = 'wf'"})
		return err == nil && len(resp.GetExecutions()) == len(runs) &&
			pendingState(t, c, "dead-cancelling") == enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED &&
			pendingState(t, c, "unstarted") == enumspb.PENDING_ACTIVITY_STATE_SCHEDULED
	})

	opts := worker.OrphanOptions{Namespace: srv.Namespace(), TaskQueue: "wf", Identity: self, Logger: zerolog.New(zerolog.NewTestWriter(t))}
	orphans, err := worker.ResolveOrphans(ctx, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, o := range orphans {
		if o.Worker != dead || o.ActivityType != "Hang" || o.Attempt != 1 || o.Started.IsZero() {
			t.Errorf("orphan %+v", o)
		}
		got[o.WorkflowID] = o.Canceled
	}
	if len(orphans) != 2 || got["dead"] || !got["dead-cancelling"] {
		t.Fatalf("ended %+v; want the activities of dead and dead-cancelling (cancelled)", orphans)
	}
	for id, want := range map[string]string{"dead": api.ErrTypeOutcomeUnknown, "dead-cancelling": "canceled"} {
		var how string
		if err := runs[id].Get(ctx, &how); err != nil || how != want {
			t.Errorf("%s ended with %q (%v), want %q", id, how, err, want)
		}
	}
	for id, want := range map[string]enumspb.PendingActivityState{
		"self": enumspb.PENDING_ACTIVITY_STATE_STARTED, "other": enumspb.PENDING_ACTIVITY_STATE_STARTED,
		"unstarted": enumspb.PENDING_ACTIVITY_STATE_SCHEDULED,
	} {
		if got := pendingState(t, c, id); got != want {
			t.Errorf("%s's activity is %s after ResolveOrphans, want %s (left alone)", id, got, want)
		}
	}

	// Nothing is left to end.
	if again, err := worker.ResolveOrphans(ctx, c, opts); err != nil || len(again) != 0 {
		t.Errorf("second ResolveOrphans ended %+v (%v), want none", again, err)
	}
}

// pendingState is the state of a workflow's one pending activity
// (unspecified when it has none).
func pendingState(t *testing.T, c client.Client, id string) enumspb.PendingActivityState {
	t.Helper()
	d, err := c.DescribeWorkflowExecution(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	if pa := d.GetPendingActivities(); len(pa) == 1 {
		return pa[0].GetState()
	}
	return enumspb.PENDING_ACTIVITY_STATE_UNSPECIFIED
}

func TestSoleIdentityIsUniqueAndReadable(t *testing.T) {
	a, b := worker.SoleIdentity(), worker.SoleIdentity()
	if a == b || !strings.Contains(a, "@") {
		t.Fatalf("sole identities %q and %q", a, b)
	}
}
