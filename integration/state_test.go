package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestTaskState drives task-scoped state over MCP on the real embedded
// Temporal: alice sets, reads and deletes keys of her task's state; a
// value that breaks the configured schema or the size limit is an isError
// result that changes nothing; her task continues as new (every 3 calls)
// and keeps its state; bob cannot read it; a rollback restores the
// previous values. Its histories are replayed (and with -record written
// to workflows/testdata as state_v1).
func TestTaskState(t *testing.T) {
	t.Parallel()
	m := testupstreamManifest(t, t.TempDir()+"/effects.log")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: twoPrincipals(), continueAsNewAfter: 3,
		state: &api.StateConfig{MaxBytes: 120, Schema: json.RawMessage(`{"type":"object","properties":{"step":{"type":"integer"}}}`)}})
	alice := connectURL(t, s.url, bearer("alice-key"))
	waitTools(t, alice, api.ToolStateGet, api.ToolStateSet, api.ToolStateDelete, "counter__echo")

	ok := func(res *mcp.CallToolResult, what string) map[string]any {
		t.Helper()
		if res.IsError {
			t.Fatalf("%s: isError: %s", what, text(res))
		}
		sc, _ := res.StructuredContent.(map[string]any)
		return sc
	}
	res := call(t, alice, api.ToolStateSet, map[string]any{"key": "checklist", "value": []string{"plan", "write"}}, "")
	ok(res, "set checklist")
	task, _ := res.Meta[gateway.MetaTask].(string)
	if task == "" {
		t.Fatalf("no task in %v", res.Meta)
	}
	ok(call(t, alice, api.ToolStateSet, map[string]any{"key": "step", "value": 1}, ""), "set step")
	ok(call(t, alice, "counter__echo", map[string]any{"text": "work"}, ""), "echo")
	// Past continue-as-new (3 calls per run): the state came along.
	got := ok(call(t, alice, api.ToolStateGet, map[string]any{"key": "checklist"}, ""), "get checklist")
	if b, _ := json.Marshal(got["value"]); string(b) != `["plan","write"]` {
		t.Fatalf("checklist after continue-as-new = %s", b)
	}

	// Refusals: isError results naming the limit; nothing changes.
	bad := call(t, alice, api.ToolStateSet, map[string]any{"key": "step", "value": "two"}, "")
	if !bad.IsError || !strings.Contains(text(bad), "would not match its schema (task.state.schema)") {
		t.Fatalf("schema violation: isError=%v %s", bad.IsError, text(bad))
	}
	big := call(t, alice, api.ToolStateSet, map[string]any{"key": "notes", "value": strings.Repeat("n", 200)}, "")
	if !big.IsError || !strings.Contains(text(big), "more than its limit of 120 (task.state.max_bytes)") {
		t.Fatalf("size violation: isError=%v %s", big.IsError, text(big))
	}
	ok(call(t, alice, api.ToolStateDelete, map[string]any{"key": "checklist"}, ""), "delete checklist")
	whole := ok(call(t, alice, api.ToolStateGet, map[string]any{}, ""), "get all")
	if b, _ := json.Marshal(whole["state"]); string(b) != `{"step":1}` {
		t.Fatalf("state = %s, want {\"step\":1}", b)
	}

	// Bob names alice's task (stateless: each request on its own, so
	// nothing checks at initialize): refused, by the task itself.
	bob := connectStateless(t, s.url, map[string]string{"Authorization": "Bearer bob-key", gateway.HeaderTask: task})
	if r := call(t, bob, api.ToolStateGet, map[string]any{}, ""); !r.IsError || !strings.Contains(text(r), "belongs to another principal") || strings.Contains(text(r), "step") {
		t.Fatalf("bob read alice's state: isError=%v %s", r.IsError, text(r))
	}
	if r := call(t, bob, api.ToolStateSet, map[string]any{"key": "step", "value": 99}, ""); !r.IsError || !strings.Contains(text(r), "belongs to another principal") {
		t.Fatalf("bob wrote alice's state: isError=%v %s", r.IsError, text(r))
	}

	// A rollback restores every value the task changed: all were new.
	rb := call(t, alice, gateway.ToolRollback, map[string]any{"reason": "start over"}, "")
	if rb.IsError || !strings.Contains(text(rb), "rolled back: 3 change(s) undone") {
		t.Fatalf("rollback: %s", text(rb))
	}
	after := ok(call(t, alice, api.ToolStateGet, map[string]any{}, ""), "get after rollback")
	if b, _ := json.Marshal(after["state"]); string(b) != `{}` {
		t.Fatalf("state after rollback = %s, want {}", b)
	}
	st, err := s.client.QueryWorkflow(context.Background(), task, "", api.QueryStatus)
	var status api.Status
	if err == nil {
		err = st.Get(&status)
	}
	if err != nil {
		t.Fatal(err)
	}
	if status.Runs < 3 {
		t.Errorf("the task ran in %d run(s); the test means to cross continue-as-new twice", status.Runs)
	}
	for _, r := range status.Recent {
		if strings.HasPrefix(r.Tool, "airlock_state_") && (r.Decision == nil || (r.Decision.Check != "task_state" && r.Outcome == api.OutcomeOK)) {
			t.Errorf("call %s (%s) recorded without its decision: %+v", r.CallID, r.Tool, r.Decision)
		}
	}

	// Finish, then replay every run (and record them with -record).
	ctx := context.Background()
	if err := s.client.SignalWorkflow(ctx, task, "", api.SignalFinish, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.client.GetWorkflow(ctx, task, "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	replayRuns(t, s, task, firstRun(t, s, task), "state_v1")
}

// firstRun walks a task's runs back from its current one to its first.
func firstRun(t *testing.T, s *stack, task string) string {
	t.Helper()
	run := ""
	for {
		h := fetchHistory(t, s.client, task, run)
		prev := h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if prev == "" {
			if run == "" {
				d, err := s.client.DescribeWorkflowExecution(context.Background(), task, "")
				if err != nil {
					t.Fatal(err)
				}
				return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
			}
			return run
		}
		run = prev
	}
}

// TestRecordStatePlanHistory runs a plan on the real embedded Temporal
// whose steps set the task's state, use it (${{ state.dir }}) in an
// upstream call and in another set, then fail, which rolls the plan back:
// the upstream call is compensated and the state restored. With -record it
// writes state_v1_plan_run1.json.
func TestRecordStatePlanHistory(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{compensationCounter(t)}})
	waitTools(t, s.connect(t, nil), "counter__put")
	run := s.startPlan(t, `name: remember
steps:
  - id: dir
    tool: airlock_state_set
    args: {key: dir, value: /srv/x}
  - id: put
    tool: counter__put
    args: {key: "${{ state.dir }}"}
  - id: note
    tool: airlock_state_set
    when: has(state.dir)
    args: {key: readme, value: "${{ state.dir }}/README.md"}
  - id: read
    tool: airlock_state_get
    args: {key: readme}
  - id: boom
    tool: counter__fail
    args: {text: boom}
`, "record-state-plan")
	if res := planResult(t, run); res.State != api.StateRolledBack {
		t.Fatalf("plan ended %+v", res)
	}
	st := status(t, s, "record-state-plan")
	if got := st.Plan.Steps[3]; got.State != api.StepOK {
		t.Errorf("step read: %+v", got)
	}
	var undone []string
	for _, e := range st.Undone {
		undone = append(undone, e.Tool+" by "+e.Compensation.Tool+" "+string(e.Compensation.Arguments))
	}
	want := []string{
		`airlock_state_set by airlock_state_restore {"key":"readme"}`,
		`counter__put by counter__put {"key":"undo-/srv/x"}`,
		`airlock_state_set by airlock_state_restore {"key":"dir"}`,
	}
	if strings.Join(undone, "\n") != strings.Join(want, "\n") {
		t.Errorf("undone:\n%s\nwant:\n%s", strings.Join(undone, "\n"), strings.Join(want, "\n"))
	}
	if string(st.TaskState) != `{}` {
		t.Errorf("state after the rollback: %s, want {}", st.TaskState)
	}
	replayRuns(t, s, "record-state-plan", run.GetRunID(), "state_v1_plan")
}
