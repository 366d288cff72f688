package integration

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestRollbackEndedPlan: a plan that completed can still be undone by an
// operator, once: `airlock tasks rollback` starts rollback-<task>, which
// runs the compensations the plan left, and a second request is refused.
func TestRollbackEndedPlan(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, `  append:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: false
    compensation: {tool: put, args: {key: '"undo-" + args.key'}}
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true}
  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__append")
	run := s.startPlan(t, `name: done
steps:
  - {id: one, tool: counter__append, args: {key: e1}}
  - {id: two, tool: counter__append, args: {key: e2}}
  - {id: look, tool: counter__echo, args: {text: done}}
`, "plan-ended")
	if res := planResult(t, run); res.State != api.StateCompleted {
		t.Fatalf("plan ended %+v", res)
	}
	bin := buildBinary(t, "./cmd/airlock")
	airlock := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(args, "--temporal-address", s.srv.HostPort(), "--namespace", s.srv.Namespace())...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := airlock("tasks", "rollback", "plan-ended")
	if code != 0 || !strings.Contains(out, "rolled back: 2 change(s) undone") {
		t.Fatalf("tasks rollback (exit %d):\n%s", code, out)
	}
	for _, k := range []string{"undo-e1", "undo-e2"} {
		if n := countEffects(t, effects, "put", k); n != 1 {
			t.Errorf("put %s ran %d times, want 1", k, n)
		}
	}
	out, code = airlock("tasks", "rollback", "plan-ended")
	if code != 1 || !strings.Contains(out, "already rolled back by rollback-plan-ended") {
		t.Fatalf("second rollback (exit %d):\n%s", code, out)
	}
	for _, k := range []string{"undo-e1", "undo-e2"} {
		if n := countEffects(t, effects, "put", k); n != 1 {
			t.Errorf("after a second request, put %s ran %d times, want 1", k, n)
		}
	}
	out, _ = airlock("tasks", "list")
	if !strings.Contains(out, "rollback-plan-ended") || !strings.Contains(out, "rollback") {
		t.Errorf("tasks list does not show the rollback:\n%s", out)
	}
	// A task that ended with nothing to undo says so.
	out, code = airlock("tasks", "rollback", api.RollbackTaskID("plan-ended"))
	if code != 0 || !strings.Contains(out, "no pending compensation") {
		t.Errorf("rolling back the rollback (exit %d):\n%q", code, out)
	}
	// tasks cancel rolls a live task back and ends it; tasks finish ends one
	// as it is.
	for _, tc := range []struct{ task, cmd, state string }{
		{"to-cancel", "cancel", api.StateCanceled},
		{"to-finish", "finish", api.StateFinished},
	} {
		cs := s.connect(t, map[string]string{gateway.HeaderTask: tc.task})
		if res := call(t, cs, "counter__append", map[string]any{"key": tc.task}, ""); res.IsError {
			t.Fatalf("%s: %s", tc.task, text(res))
		}
		if out, code := airlock("tasks", tc.cmd, tc.task); code != 0 {
			t.Fatalf("tasks %s (exit %d):\n%s", tc.cmd, code, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var res api.TaskResult
		err := s.client.GetWorkflow(ctx, tc.task, "").Get(ctx, &res)
		cancel()
		if err != nil || res.State != tc.state {
			t.Fatalf("after tasks %s: %+v, %v; want %s", tc.cmd, res, err, tc.state)
		}
	}
	if n := countEffects(t, effects, "put", "undo-to-cancel"); n != 1 {
		t.Errorf("cancel ran the compensation %d times, want 1", n)
	}
	if n := countEffects(t, effects, "put", "undo-to-finish"); n != 0 {
		t.Errorf("finish ran a compensation %d times, want none", n)
	}

	desc, err := s.client.DescribeWorkflowExecution(context.Background(), api.RollbackTaskID("plan-ended"), "")
	if err != nil {
		t.Fatal(err)
	}
	replayRuns(t, s, api.RollbackTaskID("plan-ended"), desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "rollback_task_v1")
}
