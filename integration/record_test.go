package integration

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/worker"
)

var record = flag.Bool("record", false, "write the recorded histories to workflows/testdata (see README)")

// TestRecordHistory runs an AgentTask through every path of the call
// pipeline on the real server (approval, ok, tool error, unavailable
// upstream, policy denial, limit, continue-as-new, a call retried after
// continue-as-new, finish), then replays its histories against the current
// workflow code. With -record it also writes them to workflows/testdata,
// where workflows' replay test keeps checking them.
func TestRecordHistory(t *testing.T) {
	t.Parallel()
	effects := filepath.Join(t.TempDir(), "effects.log")
	counter := testupstreamManifest(t, effects)
	// An upstream that never comes up: calls to it are "unavailable".
	down, err := manifests.Parse(filepath.Join(t.TempDir(), "down.yaml"), []byte(`server:
  name: down
  stdio: {command: /nonexistent/airlock-test-upstream}
tools:
  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true, retry: {max_attempts: 2, initial_interval: 100ms}}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{counter, down}, policy: &policy.Config{Rules: []policy.Rule{
		{Name: "no-secrets", When: `args.?text.orValue("") == "secret"`, Effect: api.Deny, Reason: "secrets stay out of tools"},
		{Name: "approve-puts", When: `tool.upstream == "put"`, Effect: api.RequireApproval, Group: "ops"},
	}}, groups: map[string][]string{"ops": {"bob"}}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__echo")

	ctx := context.Background()
	taskID := "record-agent-task"
	in := api.TaskInput{TaskID: taskID, Principal: "recorder",
		Identity: &api.Identity{Name: "recorder", Permissions: []string{"*"}, DataLevel: "restricted", AllowTools: []string{"counter__*", "down__*"}},
		Limits:   api.Limits{MaxCalls: 6, IdleTimeout: time.Hour, ContinueAsNewAfter: 2}}
	run, err := s.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: taskID, TaskQueue: api.DefaultTaskQueue}, api.AgentTaskName, in)
	if err != nil {
		t.Fatal(err)
	}
	// Low-risk and idempotent, as the manifests declare echo and fail: those
	// calls take the fast path (DecideAndCall) when policy allows them; the
	// approved put and the denied echo show its decision-only answers, and
	// the unavailable upstream its fallback to the CallTool activity.
	spec := api.ToolSpec{Timeout: 30 * time.Second, Idempotent: true, Risk: "low",
		Retry: api.RetrySpec{MaxAttempts: 2, InitialInterval: 100 * time.Millisecond, Backoff: 2}}
	calls := []api.CallRequest{
		{CallID: "c0", Tool: "counter__put", Server: "counter", UpstreamTool: "put", Arguments: json.RawMessage(`{"key":"approved"}`), Spec: spec},
		{CallID: "c1", Tool: "counter__echo", Server: "counter", UpstreamTool: "echo", Arguments: json.RawMessage(`{"text":"hi"}`), Spec: spec},
		{CallID: "c2", Tool: "counter__fail", Server: "counter", UpstreamTool: "fail", Arguments: json.RawMessage(`{"text":"x"}`), Spec: spec},
		// continue-as-new happens here (ContinueAsNewAfter: 2)
		{CallID: "c3", Tool: "down__echo", Server: "down", UpstreamTool: "echo", Arguments: json.RawMessage(`{}`), Spec: spec},
		// continue-as-new again: c1 of run 1, retried in run 3, is
		// answered from the task's memory (the call ledger), not run
		{CallID: "c1", Tool: "counter__echo", Server: "counter", UpstreamTool: "echo", Arguments: json.RawMessage(`{"text":"hi"}`), Spec: spec},
		{CallID: "c4", Tool: "counter__echo", Server: "counter", UpstreamTool: "echo", Arguments: json.RawMessage(`{"text":"again"}`), Spec: spec},
		{CallID: "c5", Tool: "counter__echo", Server: "counter", UpstreamTool: "echo", Arguments: json.RawMessage(`{"text":"secret"}`), Spec: spec},
		{CallID: "c6", Tool: "counter__echo", Server: "counter", UpstreamTool: "echo", Arguments: json.RawMessage(`{"text":"over"}`), Spec: spec},
	}
	want := []api.Outcome{api.OutcomeOK, api.OutcomeOK, api.OutcomeToolError, api.OutcomeUnavailable, api.OutcomeOK, api.OutcomeOK, api.OutcomeDenied, api.OutcomeLimit}
	for i, c := range calls {
		if c.CallID == "c0" {
			// Approved by bob while the call waits.
			go func() {
				_ = testenv.Poll("the request of c0 to be pending", time.Minute, func() error {
					ar, err := approver.Lookup(ctx, s.client, taskID+"~c0")
					if err != nil || ar.State != api.ApprovalPending {
						return errors.Join(err, errors.New("not pending"))
					}
					_, _ = approver.Deliver(ctx, s.client, "record:bob", api.DecideRequest{RequestID: ar.ID, Digest: ar.Digest, Approver: "bob", Approve: true, Via: "cli"})
					return nil
				})
			}()
		}
		var res api.CallResult
		// Between runs (continue-as-new) the update may race the new run:
		// send it again.
		waitUntil(t, "call "+c.CallID+" to be answered", 30*time.Second, func() error {
			h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: taskID, UpdateID: c.CallID,
				UpdateName: api.UpdateCallTool, Args: []any{c}, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err == nil {
				err = h.Get(ctx, &res)
			}
			return err
		})
		if res.Outcome != want[i] {
			t.Fatalf("call %s: outcome %q (%s), want %q", c.CallID, res.Outcome, res.Reason, want[i])
		}
		if repeat := i == 4; (res.Repeat != nil) != repeat || repeat && (res.Repeat.Run != 1 || !res.Repeat.Held) {
			t.Fatalf("call %s (send %d): repeat %+v", c.CallID, i+1, res.Repeat)
		}
	}
	if err := s.client.SignalWorkflow(ctx, taskID, "", api.SignalFinish, nil); err != nil {
		t.Fatal(err)
	}
	var out api.TaskResult
	if err := s.client.GetWorkflow(ctx, taskID, "").Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.State != api.StateFinished || out.Calls != 6 {
		t.Fatalf("task result %+v", out)
	}

	replayRuns(t, s, taskID, run.GetRunID(), "agent_task_v5")
}

// replayRuns replays every run of a workflow, following the continue-as-new
// chain from runID, against the current code; with -record it writes them
// to workflows/testdata as <name>_run<N>.json.
func replayRuns(t *testing.T, s *stack, id, runID, name string) {
	t.Helper()
	replayClientRuns(t, s.client, id, runID, name)
}

// replayClientRuns is replayRuns with the histories read through c.
func replayClientRuns(t *testing.T, c client.Client, id, runID, name string) {
	t.Helper()
	replayer := sdkworker.NewWorkflowReplayer()
	worker.RegisterWorkflows(replayer)
	for i := 1; runID != ""; i++ {
		hist := fetchHistory(t, c, id, runID)
		if err := replayer.ReplayWorkflowHistory(nil, hist); err != nil {
			t.Fatalf("replaying run %d against the current code: %v", i, err)
		}
		last := hist.Events[len(hist.Events)-1]
		runID = last.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
		if *record {
			b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(hist)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(repoRoot(), "workflows", "testdata", fmt.Sprintf("%s_run%d.json", name, i))
			if _, err := os.Stat(path); err == nil {
				// Recorded histories are never overwritten: old ones must
				// keep replaying. Bump the version in the name instead.
				t.Logf("%s exists, not overwritten; to record the current code, bump the version in %q", path, name)
				continue
			}
			if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("recorded %s (%d events)", path, len(hist.Events))
		}
	}
}

// startRecorderTask starts an agent task as the principal "recorder" (every
// counter__ tool allowed), for the recorded histories.
func startRecorderTask(t testing.TB, s *stack, taskID string, limits api.Limits) client.WorkflowRun {
	t.Helper()
	in := api.TaskInput{TaskID: taskID, Principal: "recorder",
		Identity: &api.Identity{Name: "recorder", Permissions: []string{"*"}, DataLevel: "restricted", AllowTools: []string{"counter__*"}},
		Limits:   limits}
	run, err := s.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: taskID, TaskQueue: api.DefaultTaskQueue}, api.AgentTaskName, in)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// finishTask signals task taskID to finish and waits until it has.
func finishTask(t testing.TB, s *stack, taskID string) {
	t.Helper()
	ctx := context.Background()
	if err := s.client.SignalWorkflow(ctx, taskID, "", api.SignalFinish, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.client.GetWorkflow(ctx, taskID, "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// sendCall delivers one call to task taskID as the gateway does (update
// UpdateCallTool, its ID the call's) and waits for the result.
func sendCall(ctx context.Context, s *stack, taskID string, req api.CallRequest) (api.CallResult, error) {
	h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: taskID, UpdateID: req.CallID,
		UpdateName: api.UpdateCallTool, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted})
	var res api.CallResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	return res, err
}

// compensationCounter is testupstream with compensable writes: append captures
// with echo and is undone by put; put is undone by put.
func compensationCounter(t testing.TB) *manifests.Manifest {
	m, _ := counterManifest(t, `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  append:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: false
    capture: {tool: echo, args: {text: args.key}}
    compensation:
      when: before != null
      tool: put
      args: {key: '"undo-" + args.key'}
  put:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: true
    compensation: {tool: put, args: {key: '"undo-" + args.key'}}
  fail: {side_effects: [none], data_access_level: public, risk: low, idempotent: true, retry: {max_attempts: 1}}
`)
	return m
}

// TestRecordRollbackHistory records an agent task whose compensable calls
// are captured, then rolled back by an Update (twice: the second finds
// nothing), then a call and a cancellation, which rolls that one back.
func TestRecordRollbackHistory(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{compensationCounter(t)}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__append")
	ctx := context.Background()
	taskID := "record-rollback"
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 10, IdleTimeout: time.Hour})
	m := compensationCounter(t)
	callReq := func(id, tool, key string) api.CallRequest {
		return api.CallRequest{CallID: id, Tool: "counter__" + tool, Server: "counter", UpstreamTool: tool,
			Arguments: json.RawMessage(fmt.Sprintf(`{"key":%q}`, key)), Spec: api.SpecFor(m.Tools[tool])}
	}
	update := func(name, id string, arg, out any) {
		t.Helper()
		h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: taskID, UpdateID: id,
			UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, out)
		}
		if err != nil {
			t.Fatalf("%s %s: %v", name, id, err)
		}
	}
	var res api.CallResult
	for _, c := range []api.CallRequest{callReq("c1", "append", "a1"), callReq("c2", "put", "p1")} {
		if update(api.UpdateCallTool, c.CallID, c, &res); res.Outcome != api.OutcomeOK {
			t.Fatalf("%s: %+v", c.CallID, res)
		}
	}
	var rb api.RollbackResult
	if update(api.UpdateRollback, "rb1", api.RollbackRequest{By: "recorder"}, &rb); rb.State != api.StateRolledBack || len(rb.Compensated) != 2 {
		t.Fatalf("rollback: %+v", rb)
	}
	if update(api.UpdateRollback, "rb2", api.RollbackRequest{By: "recorder"}, &rb); rb.State != api.RollbackNothing {
		t.Fatalf("second rollback: %+v", rb)
	}
	if update(api.UpdateCallTool, "c3", callReq("c3", "put", "p2"), &res); res.Outcome != api.OutcomeOK {
		t.Fatalf("c3: %+v", res)
	}
	if err := s.client.CancelWorkflow(ctx, taskID, ""); err != nil {
		t.Fatal(err)
	}
	var out api.TaskResult
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.State != api.StateCanceled {
		t.Fatalf("task result %+v", out)
	}
	replayRuns(t, s, taskID, run.GetRunID(), "saga_v1")
}

// TestRecordPlanHistory records a plan: a step, a skipped step, a step
// whose arguments use an earlier result, and a failing step that rolls the
// plan back.
func TestRecordPlanHistory(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{compensationCounter(t)}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__append")
	run := s.startPlan(t, `name: recorded
vars: {prefix: rec}
steps:
  - id: first
    tool: counter__append
    args: {key: "${{ vars.prefix }}-1"}
  - id: skipped
    tool: counter__put
    when: steps.first.outcome != "ok"
    args: {key: never}
  - id: second
    tool: counter__put
    args: {key: "${{ steps.first.result.key }}-then"}
  - id: boom
    tool: counter__fail
    args: {text: boom}
`, "record-plan")
	if res := planResult(t, run); res.State != api.StateRolledBack {
		t.Fatalf("plan ended %+v", res)
	}
	st := status(t, s, "record-plan")
	if got := st.Plan.Steps[1].State; got != api.StepSkipped {
		t.Errorf("step skipped: %s", got)
	}
	if len(st.Undone) != 2 || !strings.Contains(string(st.Undone[0].Compensation.Arguments), "rec-1-then") {
		t.Errorf("undone %+v", st.Undone)
	}
	replayRuns(t, s, "record-plan", run.GetRunID(), "plan_v1")
}

func fetchHistory(t testing.TB, c client.Client, id, runID string) *historypb.History {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	return h
}

// TestRecordApprovalHistory records the approval paths the main recording
// does not take: a request denied by its approver, one that times out, and
// one escalated to a second group whose member approves it.
func TestRecordApprovalHistory(t *testing.T) {
	t.Parallel()
	m, _ := counterManifest(t, `  put:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: true
    approval: {group: ops, timeout: 1h}
  fail:
    side_effects: [none]
    data_access_level: public
    risk: high
    idempotent: true
    approval: {group: ops, timeout: 2s}
  append:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: false
    approval: {group: ops, timeout: 1h, escalate_after: 1s, escalate_to: leads}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, groups: map[string][]string{"ops": {"bob"}, "leads": {"lisa"}}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__put")
	ctx := context.Background()
	taskID := "record-approvals"
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 10, IdleTimeout: time.Hour})
	// decide waits for the call's request to be pending (and, when
	// escalated is set, escalated), then delivers one approver's decision.
	decide := func(callID, who string, approve, escalated bool) {
		err := testenv.Poll("the request of "+callID+" to be ready for "+who, time.Minute, func() error {
			ar, err := approver.Lookup(ctx, s.client, api.RequestID(taskID, callID))
			if err != nil || ar.State != api.ApprovalPending || escalated && !ar.Escalated {
				return errors.Join(err, errors.New("not ready"))
			}
			if _, err := approver.Deliver(ctx, s.client, "record:"+who+":"+callID, api.DecideRequest{
				RequestID: ar.ID, Digest: ar.Digest, Approver: who, Approve: approve, Via: "cli"}); err != nil {
				t.Errorf("deliver %s: %v", callID, err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	for _, c := range []struct {
		id, tool string
		want     api.Outcome
		act      func()
	}{
		{"denied", "put", api.OutcomeDenied, func() { decide("denied", "bob", false, false) }},
		{"timed-out", "fail", api.OutcomeDenied, nil},
		{"escalated", "append", api.OutcomeOK, func() { decide("escalated", "lisa", true, true) }},
	} {
		if c.act != nil {
			go c.act()
		}
		req := api.CallRequest{CallID: c.id, Tool: "counter__" + c.tool, Server: "counter", UpstreamTool: c.tool,
			Arguments: json.RawMessage(`{"key":"k"}`), Spec: api.SpecFor(m.Tools[c.tool])}
		if c.tool == "fail" {
			req.Arguments = json.RawMessage(`{"text":"t"}`)
		}
		res, err := sendCall(ctx, s, taskID, req)
		if err != nil || res.Outcome != c.want {
			t.Fatalf("call %s: %v %+v, want %s", c.id, err, res, c.want)
		}
	}
	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, run.GetRunID(), "approvals_v1")
}
