package devserver

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// The floor: what the embedded server and the SDK alone cost per durable
// call, with no airlock code on the path. One workflow per session; each
// call is an Update (naming the run, waiting for completion) whose handler
// runs one local activity that returns its input. That is the shape of
// airlock's fast path (a task's auto-allowed call: one Update, one
// speculative workflow task, one local activity, six history events), so
// airlock's own cost per call is the difference between a call through
// airlock and a floor call, measured on the same machine in the same
// minutes. BenchmarkUpdateFloor and `airlock bench --floor` measure it.
const (
	floorWorkflowName = "UpdateFloorWorkflow"
	floorActivityName = "UpdateFloorEcho"
	floorUpdateName   = "call"
	floorTaskQueue    = "update-floor"
	floorPayload      = "hi"
	// FloorCallsPerRun is how many calls a floor session makes in one
	// workflow run before it moves to a fresh one: the server takes at
	// most 2,000 distinct Updates per run.
	FloorCallsPerRun = 1000
)

// Floor is an embedded Temporal server of its own, on a fresh SQLite file
// in a temporary directory, with an SDK worker serving the floor workflow
// in the same process. Close it to stop both and remove the directory.
type Floor struct {
	srv *Server
	c   client.Client
	w   worker.Worker
	dir string
	seq atomic.Int64 // numbers the workflows
}

// StartFloor starts the floor's server (in a new temporary directory) and
// worker. It takes a few seconds: the schema is created and the four
// services started, as for a first `airlock dev`.
func StartFloor(ctx context.Context) (_ *Floor, err error) {
	dir, err := os.MkdirTemp("", "airlock-floor-")
	if err != nil {
		return nil, fmt.Errorf("floor: a temporary directory for its server: %w", err)
	}
	f := &Floor{dir: dir}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if f.srv, err = Start(ctx, Options{DataDir: dir}); err != nil {
		return nil, fmt.Errorf("floor: starting its embedded Temporal: %w", err)
	}
	// Without gzip, as `airlock dev` dials its own embedded server
	// (cmd/airlock/wiring.go, dialEmbedded): the floor is what airlock
	// dev's calls are compared with, so it pays for the same transport.
	f.c, err = client.Dial(client.Options{HostPort: f.srv.HostPort(), Namespace: f.srv.Namespace(),
		Logger:            sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}}})
	if err != nil {
		return nil, fmt.Errorf("floor: connecting to its embedded Temporal: %w", err)
	}
	f.w = worker.New(f.c, floorTaskQueue, worker.Options{})
	f.w.RegisterWorkflowWithOptions(floorWorkflow, workflow.RegisterOptions{Name: floorWorkflowName})
	f.w.RegisterActivityWithOptions(floorEcho, activity.RegisterOptions{Name: floorActivityName})
	if err := f.w.Start(); err != nil {
		f.w = nil
		return nil, fmt.Errorf("floor: starting its worker: %w", err)
	}
	return f, nil
}

// Close stops the worker and the server and removes their directory.
func (f *Floor) Close() {
	if f.w != nil {
		f.w.Stop()
	}
	if f.c != nil {
		f.c.Close()
	}
	if f.srv != nil {
		_ = f.srv.Stop()
	}
	_ = os.RemoveAll(f.dir)
}

// Open opens n floor sessions, a workflow each, warmed: the first Update
// of each (its first workflow task, the sticky queue) is made before it is
// returned. It has the shape of loadgen.Target's Open.
func (f *Floor) Open(ctx context.Context, n int) ([]*FloorSession, error) {
	out := make([]*FloorSession, 0, n)
	for range n {
		s, err := f.Session(ctx)
		if err != nil {
			for _, s := range out {
				_ = s.Close()
			}
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Session opens one floor session: a workflow of its own, warmed.
func (f *Floor) Session(ctx context.Context) (*FloorSession, error) {
	run, err := f.startRun(ctx)
	if err != nil {
		return nil, err
	}
	return &FloorSession{f: f, run: run}, nil
}

// startRun starts a floor workflow and makes its warm-up Update.
func (f *Floor) startRun(ctx context.Context) (client.WorkflowRun, error) {
	id := fmt.Sprintf("floor-%d", f.seq.Add(1))
	run, err := f.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: floorTaskQueue}, floorWorkflowName)
	if err != nil {
		return nil, fmt.Errorf("floor: starting workflow %s: %w", id, err)
	}
	if err := f.update(ctx, run, "warm-up"); err != nil {
		return nil, err
	}
	return run, nil
}

// update makes one floor call on run and checks its answer.
func (f *Floor) update(ctx context.Context, run client.WorkflowRun, updateID string) error {
	h, err := f.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: run.GetID(), RunID: run.GetRunID(), UpdateName: floorUpdateName,
		UpdateID: updateID, Args: []any{floorPayload}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return fmt.Errorf("floor: update on %s: %w", run.GetID(), err)
	}
	var out string
	if err := h.Get(ctx, &out); err != nil {
		return fmt.Errorf("floor: update on %s: %w", run.GetID(), err)
	}
	if out != floorPayload {
		return fmt.Errorf("floor: update %s on %s answered %q, want the echo of %q", updateID, run.GetID(), out, floorPayload)
	}
	return nil
}

// FloorSession is one session of floor calls: Updates on its workflow, one
// at a time (it is not safe for concurrent use, as an MCP session making
// calls back to back). Every FloorCallsPerRun calls it moves to a fresh
// workflow, started and warmed in the background halfway through the
// current one, so no measured call waits for a workflow to start.
type FloorSession struct {
	f    *Floor
	run  client.WorkflowRun
	n    int
	next chan nextRun   // the run being prepared; nil when none
	bg   sync.WaitGroup // terminations of runs done with, waited for by Close
}

type nextRun struct {
	run client.WorkflowRun
	err error
}

// Call makes one floor call: an Update whose handler runs one local
// activity, waited for until completed.
func (s *FloorSession) Call(ctx context.Context) error {
	switch s.n {
	case FloorCallsPerRun / 2:
		s.next = make(chan nextRun, 1)
		go func() {
			// Not ctx: the call that starts it returns at once.
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run, err := s.f.startRun(sctx)
			s.next <- nextRun{run, err}
		}()
	case FloorCallsPerRun:
		var nr nextRun
		select {
		case nr = <-s.next:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.next = nil
		if nr.err != nil {
			return nr.err
		}
		old := s.run
		s.bg.Go(func() { s.terminate(old) }) // not on the measured call's time
		s.run, s.n = nr.run, 0
	}
	s.n++
	return s.f.update(ctx, s.run, fmt.Sprintf("call-%d", s.n))
}

// Close ends the session's workflow (and one being prepared), and waits
// for the ends of those it moved on from.
func (s *FloorSession) Close() error {
	defer s.bg.Wait()
	if s.next != nil {
		if nr := <-s.next; nr.err == nil {
			s.terminate(nr.run)
		}
		s.next = nil
	}
	s.terminate(s.run)
	return nil
}

// terminate ends a run that will get no more calls, so the server does not
// keep it in its caches.
func (s *FloorSession) terminate(run client.WorkflowRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Best effort: the server and its directory go at Close anyway.
	_ = s.f.c.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "floor session done")
}

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
