package workflows_test

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/worker"
	"github.com/airlock-run/airlock/workflows"
)

// quiet drops the replayer's logs of the failures these tests expect.
var quiet = sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// TestReplayCatchesIncompatibleHistories keeps the replay test honest: the
// histories under testdata/incompatible were made by code that differs from
// the current workflows without workflow.GetVersion (here: an activity that
// was renamed), and each must fail to replay.
func TestReplayCatchesIncompatibleHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "incompatible", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no incompatible histories (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := sdkworker.NewWorkflowReplayer()
			worker.RegisterWorkflows(r)
			err := r.ReplayWorkflowHistoryFromJSONFile(quiet, f)
			if err == nil {
				t.Fatalf("%s replayed against the current code; it must not", f)
			}
			t.Logf("replay failed as it must: %v", err)
		})
	}
}

// TestReplayCatchesUnversionedChange changes the workflow the way a
// careless edit would (a timer added before anything else, without
// GetVersion) and checks that the recorded histories then fail to replay:
// the replay test guards every recorded path.
func TestReplayCatchesUnversionedChange(t *testing.T) {
	changed := func(ctx workflow.Context, in api.TaskInput) (api.TaskResult, error) {
		if err := workflow.Sleep(ctx, time.Second); err != nil {
			return api.TaskResult{}, err
		}
		return workflows.AgentTask(ctx, in)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "agent_task_*.json"))
	saga, _ := filepath.Glob(filepath.Join("testdata", "saga_*.json"))
	approvals, _ := filepath.Glob(filepath.Join("testdata", "approvals_*.json"))
	files = append(append(files, saga...), approvals...)
	if len(files) == 0 {
		t.Fatal("no recorded agent task histories")
	}
	for _, f := range files {
		r := sdkworker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: api.AgentTaskName})
		err := r.ReplayWorkflowHistoryFromJSONFile(quiet, f)
		if err == nil {
			t.Errorf("%s replayed against an unversioned change", f)
		} else if !strings.Contains(err.Error(), "nondetermin") && !strings.Contains(err.Error(), "TMPRL1100") {
			t.Logf("%s: %v", f, err)
		}
	}
}
