package devserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.temporal.io/server/common/log/tag"

	"github.com/airlock-run/airlock/internal/testenv"
)

const (
	testWorkflowName = "DevserverTestWorkflow"
	testActivityName = "DevserverTestActivity"
	testTaskQueue    = "devserver-test"
)

var testToolKey = temporal.NewSearchAttributeKeyKeyword("AirlockTestTool")

func testOptions(dir string) Options {
	return Options{
		DataDir: dir,
		SearchAttributes: map[string]enumspb.IndexedValueType{
			testToolKey.GetName(): enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		},
		// Server warnings go to stderr so a failing run shows them; t.Log
		// would panic on the server's late shutdown logs.
		Logger: zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Timestamp().Str("component", "temporal").Logger(),
	}
}

func dial(t *testing.T, s *Server) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:  s.HostPort(),
		Namespace: s.Namespace(),
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		t.Fatalf("dial %s: %v", s.HostPort(), err)
	}
	return c
}

func testWorkflow(ctx workflow.Context, name string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out string
	err := workflow.ExecuteActivity(ctx, testActivityName, name).Get(ctx, &out)
	return out, err
}

func testActivity(_ context.Context, name string) (string, error) {
	return "hello " + name, nil
}

func retention(ctx context.Context, t *testing.T, c client.Client, namespace string) time.Duration {
	t.Helper()
	ns, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		t.Fatalf("describe namespace %s: %v", namespace, err)
	}
	return ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration()
}

// TestRestartKeepsState runs a workflow, stops the server and starts a new
// one on the same data dir: everything the first one wrote must be there.
func TestRestartKeepsState(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server twice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	const wfID = "devserver-restart-test"

	// A shorter retention first, so the second start has to raise it.
	first := testOptions(dir)
	first.Retention = 48 * time.Hour
	began := time.Now()
	s, err := Start(ctx, first)
	if err != nil {
		t.Fatalf("first start: %v", err)
	}
	t.Logf("start on a fresh database: %s", time.Since(began))
	t.Cleanup(func() { _ = s.Stop() })

	if _, err := os.Stat(filepath.Join(dir, dbFileName+"-wal")); err != nil {
		t.Errorf("database not in WAL mode: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, dbFileName+".new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("scratch database left behind: %v", err)
	}
	c := dial(t, s)
	if ret := retention(ctx, t, c, s.Namespace()); ret != 48*time.Hour {
		t.Errorf("retention of a new namespace = %s, want 48h", ret)
	}
	w := worker.New(c, testTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(testWorkflow, workflow.RegisterOptions{Name: testWorkflowName})
	w.RegisterActivityWithOptions(testActivity, activity.RegisterOptions{Name: testActivityName})
	if err := w.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    wfID,
		TaskQueue:             testTaskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(testToolKey.ValueSet("fs.delete")),
	}, testWorkflowName, "airlock")
	if err != nil {
		t.Fatalf("execute workflow: %v", err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil {
		t.Fatalf("workflow result: %v", err)
	}
	if got != "hello airlock" {
		t.Fatalf("workflow result = %q, want %q", got, "hello airlock")
	}
	w.Stop()
	c.Close()

	began = time.Now()
	if err := s.Stop(); err != nil {
		t.Fatalf("first stop: %v", err)
	}
	t.Logf("stop: %s", time.Since(began))

	began = time.Now()
	s2, err := Start(ctx, testOptions(dir))
	if err != nil {
		t.Fatalf("second start on the same data dir: %v", err)
	}
	t.Logf("start on an existing database: %s", time.Since(began))
	t.Cleanup(func() { _ = s2.Stop() })
	c2 := dial(t, s2)
	defer c2.Close()

	desc, err := c2.DescribeWorkflowExecution(ctx, wfID, "")
	if err != nil {
		t.Fatalf("describe workflow after restart: %v", err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Errorf("status after restart = %s, want Completed", st)
	}

	var types []enumspb.EventType
	it := c2.GetWorkflowHistory(ctx, wfID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("read history after restart: %v", err)
		}
		types = append(types, ev.GetEventType())
	}
	if len(types) == 0 || types[0] != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED ||
		types[len(types)-1] != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED {
		t.Errorf("history after restart = %v, want Started ... Completed", types)
	}

	if ret := retention(ctx, t, c2, s2.Namespace()); ret != 720*time.Hour {
		t.Errorf("retention after restart with the default = %s, want 720h", ret)
	}

	// Visibility is written by a queue the first server may not have
	// drained before Stop; the second one finishes it.
	query := fmt.Sprintf("%s = %q AND ExecutionStatus = 'Completed'", testToolKey.GetName(), "fs.delete")
	var ids []string
	testenv.WaitFor(t, "the workflow in visibility after the restart", 10*time.Second, func() bool {
		resp, err := c2.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: s2.Namespace(), Query: query})
		if err != nil {
			t.Fatalf("list workflows %q: %v", query, err)
		}
		ids = ids[:0]
		for _, e := range resp.GetExecutions() {
			ids = append(ids, e.GetExecution().GetWorkflowId())
		}
		return len(ids) > 0
	})
	if len(ids) != 1 || ids[0] != wfID {
		t.Errorf("list %q = %v, want [%s]", query, ids, wfID)
	}

	began = time.Now()
	if err := s2.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	t.Logf("stop: %s", time.Since(began))
	if err := s2.Stop(); err != nil {
		t.Errorf("second Stop call: %v", err)
	}
}

func TestSecondStartOnSameDirFails(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	s, err := Start(ctx, testOptions(dir))
	if err != nil {
		t.Fatalf("first start: %v", err)
	}
	defer func() { _ = s.Stop() }()

	s2, err := Start(ctx, testOptions(dir))
	if err == nil {
		_ = s2.Stop()
		t.Fatal("second start on a locked data dir succeeded")
	}
	if !errors.Is(err, ErrLocked) {
		t.Errorf("error %q does not wrap ErrLocked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, "another airlock") {
		t.Errorf("error %q should name %s and say another airlock uses it", msg, dir)
	}

	// The failed attempt must not have disturbed the running server.
	c := dial(t, s)
	defer c.Close()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		t.Errorf("first server after the failed second start: %v", err)
	}
}

func TestOptionsRejected(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no data dir", Options{}, "data dir is required"},
		{"ui", Options{DataDir: dir, UIPort: 8233}, "web ui"},
		{"bad ip", Options{DataDir: dir, IP: "localhost"}, "not an IP address"},
		{"short retention", Options{DataDir: dir, Retention: time.Hour}, "minimum of 24h"},
		{"bad log level", Options{DataDir: dir, LogLevel: "loud"}, "log level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Start(context.Background(), tt.opts)
			if err == nil {
				_ = s.Stop()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestServerLogger(t *testing.T) {
	var buf bytes.Buffer
	l := newServerLogger(zerolog.New(&buf), zerolog.WarnLevel)
	l.Info("dropped", tag.String("k", "v"))
	l.With(tag.String("service", "history")).Warn("kept",
		tag.Error(errors.New("boom")),
		tag.NewDurationTag("wait", 1500*time.Millisecond),
		tag.NewInt64("shard", 1),
	)
	l.DPanic("not a panic")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (info filtered out):\n%s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("decode %s: %v", lines[0], err)
	}
	want := map[string]any{
		"level": "warn", "message": "kept", "service": "history",
		"error": "boom", "wait": 1500.0, "shard": 1.0,
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("field %s = %v, want %v (record %s)", k, rec[k], v, lines[0])
		}
	}
	if !strings.Contains(lines[1], `"level":"error"`) {
		t.Errorf("DPanic record %s, want level error", lines[1])
	}
}
