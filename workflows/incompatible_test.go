package workflows_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/worker"
	"github.com/airlock-run/airlock/workflows"
)

// quiet drops the replayer's logs of the failures these tests expect.
var quiet = sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// nondeterminismCode starts every error the SDK reports when the code
// replayed does not match the history (TMPRL1100, "nondeterminism", in
// Temporal's list of error codes); no other replay failure carries it.
const nondeterminismCode = "[TMPRL1100]"

// namesEvent matches the part of a nondeterminism error that says where
// the replay parted from the history.
var namesEvent = regexp.MustCompile(`history event is \w+|history event position \d+|replay command for \w+|scheduleEventID: \d+`)

// mustNotReplay replays the history in file with r and returns nil only
// when the replay fails with the SDK's nondeterminism error and that error
// names every fragment of want (the event and the command that differ). A
// file that cannot be read or parsed, that replays, or that fails for any
// other reason (a workflow type not registered, say) is an error: it must
// not pass for an incompatible history.
func mustNotReplay(r sdkworker.WorkflowReplayer, file string, want ...string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("%s cannot be read: %w", file, err)
	}
	defer f.Close()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		return fmt.Errorf("%s cannot be parsed as a workflow history: %w", file, err)
	}
	if len(hist.GetEvents()) == 0 {
		return fmt.Errorf("%s holds no events", file)
	}
	err = r.ReplayWorkflowHistory(quiet, hist)
	switch {
	case err == nil:
		return fmt.Errorf("%s replayed against the current code; it must not", file)
	case !strings.Contains(err.Error(), nondeterminismCode):
		return fmt.Errorf("%s failed to replay, but not for nondeterminism: %w", file, err)
	case !namesEvent.MatchString(err.Error()):
		return fmt.Errorf("%s failed for nondeterminism without naming the event: %w", file, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			return fmt.Errorf("%s failed for nondeterminism, but the error does not name %q: %w", file, w, err)
		}
	}
	return nil
}

// incompatible says, for each history under testdata/incompatible, where
// its replay must part from it.
var incompatible = map[string][]string{
	// The call's activity was CallToolV0 when the history was recorded; the
	// current code schedules another activity type at that event.
	"agent_task_renamed_activity.json": {
		"nondeterministic workflow: history event is ActivityTaskScheduled:",
		"ActivityId:16, ActivityType:(Name:CallToolV0)",
		"replay command is ScheduleActivityTask:",
	},
}

// TestReplayCatchesIncompatibleHistories keeps the replay test honest: the
// histories under testdata/incompatible were made by code that differs from
// the current workflows without workflow.GetVersion (here: an activity that
// was renamed), and each must fail to replay with the nondeterminism error
// at the event that differs.
func TestReplayCatchesIncompatibleHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "incompatible", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no incompatible histories (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want, ok := incompatible[filepath.Base(f)]
			if !ok {
				t.Fatalf("%s: add to incompatible the event and command its replay must name", f)
			}
			r := sdkworker.NewWorkflowReplayer()
			worker.RegisterWorkflows(r)
			if err := mustNotReplay(r, f, want...); err != nil {
				t.Fatal(err)
			}
		})
	}
	for name := range incompatible {
		if _, err := os.Stat(filepath.Join("testdata", "incompatible", name)); err != nil {
			t.Errorf("incompatible names %s, which is not in testdata/incompatible: %v", name, err)
		}
	}
}

// TestMustNotReplayRefusesBrokenFiles checks the check: a file that is
// not a history, a history that replays, and a failure that is not
// nondeterminism must not count as an incompatible history.
func TestMustNotReplayRefusesBrokenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := filepath.Join("testdata", "agent_task_v3_run1.json")
	renamed := filepath.Join("testdata", "incompatible", "agent_task_renamed_activity.json")
	registered := func() sdkworker.WorkflowReplayer {
		r := sdkworker.NewWorkflowReplayer()
		worker.RegisterWorkflows(r)
		return r
	}
	tests := []struct {
		name    string
		r       sdkworker.WorkflowReplayer
		file    string
		want    []string
		wantErr string
	}{
		{name: "truncated JSON", r: registered(), file: write("truncated.json", `{"events": [{"eventId": "1", `),
			wantErr: "cannot be parsed"},
		{name: "not JSON", r: registered(), file: write("text.json", "this is not a history\n"),
			wantErr: "cannot be parsed"},
		{name: "no events", r: registered(), file: write("empty.json", `{"events": []}`),
			wantErr: "holds no events"},
		{name: "missing file", r: registered(), file: filepath.Join(dir, "absent.json"),
			wantErr: "cannot be read"},
		{name: "a history that replays", r: registered(), file: good,
			wantErr: "replayed against the current code"},
		{name: "workflow not registered", r: sdkworker.NewWorkflowReplayer(), file: renamed,
			wantErr: "not for nondeterminism"},
		{name: "another event than the one named", r: registered(), file: renamed,
			want: []string{"ActivityType:(Name:SomethingElse)"}, wantErr: "does not name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := mustNotReplay(tc.r, tc.file, tc.want...)
			if err == nil {
				t.Fatalf("%s counted as an incompatible history", tc.file)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q, want it to say %q", err, tc.wantErr)
			}
		})
	}
	var pathErr *os.PathError
	if err := mustNotReplay(registered(), filepath.Join(dir, "absent.json")); !errors.As(err, &pathErr) {
		t.Errorf("missing file: %v, want the *os.PathError wrapped", err)
	}
}

// TestReplayCatchesUnversionedChange changes the workflow the way a
// careless edit would (a timer added before anything else, without
// GetVersion) and checks that the recorded histories then fail to replay
// with the nondeterminism error: the replay test guards every recorded
// path.
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
	heartbeat, _ := filepath.Glob(filepath.Join("testdata", "heartbeat_*.json"))
	files = append(append(append(files, saga...), approvals...), heartbeat...)
	if len(files) == 0 {
		t.Fatal("no recorded agent task histories")
	}
	for _, f := range files {
		r := sdkworker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: api.AgentTaskName})
		if err := mustNotReplay(r, f); err != nil {
			t.Errorf("an unversioned change: %v", err)
		}
	}
}
