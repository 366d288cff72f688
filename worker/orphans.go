package worker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
)

// soleMark is in the identity of every worker that is the only worker of
// its Temporal server (see SoleIdentity).
const soleMark = "@airlock-sole-worker/"

// SoleIdentity returns a new worker identity for a process that is the
// only worker of its Temporal server: airlock dev with its embedded server,
// which no other process can reach while this one owns it. The identity
// says so, which is what lets the next process that owns the server end
// the activities this one started (ResolveOrphans); and it is unique to
// the process, because pid and host name repeat across restarts in a
// container.
func SoleIdentity() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return fmt.Sprintf("%d@%s%s%x", os.Getpid(), host, soleMark, b)
}

// OrphanOptions configure ResolveOrphans.
type OrphanOptions struct {
	Namespace string
	// TaskQueue is the task queue whose running workflows are looked at
	// (default api.DefaultTaskQueue).
	TaskQueue string
	// Identity is this process's worker identity (SoleIdentity): activities
	// it started are its own, alive, and left alone.
	Identity string
	Logger   zerolog.Logger
}

// Orphan is an activity attempt that ResolveOrphans ended.
type Orphan struct {
	WorkflowID, RunID, ActivityID, ActivityType string
	Attempt                                     int32
	// Worker is the identity of the worker that started it and is gone.
	Worker  string
	Started time.Time
	// Canceled: its cancellation had been requested, and it was answered
	// as cancelled rather than failed.
	Canceled bool
}

// ResolveOrphans ends the activity attempts that an earlier process owning
// this Temporal server started and that died with it, so that the calls
// waiting on them are answered now rather than when their heartbeat
// timeout fires. It is for a process that is the only worker of its
// Temporal (airlock dev with its embedded server), called before its
// worker starts polling: then every attempt a sole worker other than
// Identity started is dead.
//
// It looks at the running workflows of the task queue (visibility) and at
// their pending activities. An attempt in state STARTED, by a sole worker
// other than Identity, is failed by ID with an OutcomeUnknown application
// error: the workflow treats it exactly as a heartbeat timeout (an unknown
// outcome, re-run only for an idempotent tool). One whose cancellation was
// requested is answered as cancelled. Activities scheduled but not started
// are left to be started; attempts of workers that are not sole (another
// `airlock worker` attached to this server) are left to their timeouts.
// Local activities are not pending activities: they run again on replay.
//
// It logs each activity it ends and returns them, with the problems it
// met (each, a call left to its heartbeat timeout).
func ResolveOrphans(ctx context.Context, c client.Client, o OrphanOptions) ([]Orphan, error) {
	tq := o.TaskQueue
	if tq == "" {
		tq = api.DefaultTaskQueue
	}
	begun := time.Now()
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	runs, err := runningWorkflows(ctx, c, o.Namespace, tq)
	if err != nil {
		return nil, fmt.Errorf("listing the running workflows of task queue %s: %w", tq, err)
	}

	var (
		mu      sync.Mutex
		orphans []Orphan
		errs    []error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, resolveParallelism)
	)
	for _, run := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			got, err := resolveRun(ctx, c, o, run)
			mu.Lock()
			defer mu.Unlock()
			orphans = append(orphans, got...)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	for _, or := range orphans {
		o.Logger.Info().Str("workflow", or.WorkflowID).Str("run", or.RunID).Str("activity", or.ActivityID).
			Str("type", or.ActivityType).Int32("attempt", or.Attempt).Str("worker", or.Worker).
			Time("started", or.Started).Bool("canceled", or.Canceled).
			Msg("ended an activity the previous airlock process was running when it stopped")
	}
	if len(orphans) > 0 || len(errs) > 0 {
		o.Logger.Info().Int("running_workflows", len(runs)).Int("ended", len(orphans)).Int("problems", len(errs)).
			Dur("took", time.Since(begun)).Msg("answered the calls in flight when airlock last stopped")
	}
	return orphans, errors.Join(errs...)
}

// resolveTimeout bounds the whole sweep: what it has not ended by then
// waits for its heartbeat timeout, as without it.
const resolveTimeout = 30 * time.Second

// resolveParallelism bounds the DescribeWorkflowExecution calls in flight
// at start-up.
const resolveParallelism = 8

func runningWorkflows(ctx context.Context, c client.Client, ns, tq string) ([]*execution, error) {
	var out []*execution
	req := &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns,
		Query: fmt.Sprintf("ExecutionStatus = 'Running' AND TaskQueue = '%s'", strings.ReplaceAll(tq, "'", `\'`))}
	for {
		resp, err := c.ListWorkflow(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetExecutions() {
			out = append(out, &execution{id: e.GetExecution().GetWorkflowId(), run: e.GetExecution().GetRunId()})
		}
		if len(resp.GetNextPageToken()) == 0 {
			return out, nil
		}
		req.NextPageToken = resp.GetNextPageToken()
	}
}

type execution struct{ id, run string }

// resolveRun ends the orphaned activities of one workflow run.
func resolveRun(ctx context.Context, c client.Client, o OrphanOptions, e *execution) ([]Orphan, error) {
	d, err := c.DescribeWorkflowExecution(ctx, e.id, e.run)
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return nil, nil // ended meanwhile
	case err != nil:
		return nil, fmt.Errorf("describing workflow %s: %w", e.id, err)
	}
	var out []Orphan
	var errs []error
	for _, pa := range d.GetPendingActivities() {
		if !orphaned(pa, o.Identity) {
			continue
		}
		or := Orphan{WorkflowID: e.id, RunID: e.run, ActivityID: pa.GetActivityId(), ActivityType: pa.GetActivityType().GetName(),
			Attempt: pa.GetAttempt(), Worker: pa.GetLastWorkerIdentity(), Started: pa.GetLastStartedTime().AsTime(),
			Canceled: pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED}
		var answer error = temporal.NewApplicationError(
			"the airlock process running it stopped mid-call (found when airlock restarted)", api.ErrTypeOutcomeUnknown)
		if or.Canceled {
			answer = temporal.NewCanceledError()
		}
		err := c.CompleteActivityByID(ctx, o.Namespace, e.id, e.run, or.ActivityID, nil, answer)
		switch {
		case errors.As(err, &nf):
			continue // timed out or ended meanwhile
		case err != nil:
			errs = append(errs, fmt.Errorf("ending activity %s (%s) of workflow %s: %w", or.ActivityID, or.ActivityType, e.id, err))
			continue
		}
		out = append(out, or)
	}
	return out, errors.Join(errs...)
}

// orphaned reports whether a pending activity is an attempt that a sole
// worker other than self started: one that died with its process.
func orphaned(pa *workflowpb.PendingActivityInfo, self string) bool {
	switch pa.GetState() {
	case enumspb.PENDING_ACTIVITY_STATE_STARTED, enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED:
	default:
		return false // scheduled (a worker will start it), or paused by an operator
	}
	id := pa.GetLastWorkerIdentity()
	return strings.Contains(id, soleMark) && id != self
}
