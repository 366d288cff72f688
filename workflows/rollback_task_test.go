package workflows

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// rollbackHarness runs the RollbackTask workflow over the compensation harness.
type rollbackHarness struct {
	*compensationHarness
}

func newRollbackHarness(t *testing.T, script ...func(api.CallToolInput) (api.CallToolOutput, error)) *rollbackHarness {
	h := &rollbackHarness{compensationHarness: newCompensationHarness(t, script...)}
	h.env.RegisterWorkflowWithOptions(RollbackTask, workflow.RegisterOptions{Name: api.RollbackTaskName})
	return h
}

// seededCompensations is an ended task's stack, oldest first: one pending
// compensation per call ID, each fs__restore {"undo": id}.
func seededCompensations(ids ...string) []api.CompensationEntry {
	var out []api.CompensationEntry
	for _, id := range ids {
		out = append(out, api.CompensationEntry{CallID: id, Tool: "fs__write", State: api.CompensationPending,
			Compensation: &api.ToolCall{Tool: "fs__restore", Server: "fs", UpstreamTool: "restore",
				Arguments: json.RawMessage(fmt.Sprintf(`{"undo":%q}`, id)),
				Spec:      api.ToolSpec{Timeout: time.Minute, Idempotent: true, Retry: api.RetrySpec{MaxAttempts: 1}}}})
	}
	return out
}

func rollbackInput(ids ...string) api.RollbackTaskInput {
	return api.RollbackTaskInput{TaskID: "task-1", Principal: "alice", Compensations: seededCompensations(ids...), RollbackNotify: "ops"}
}

// rollbackUpdate is one rollback request's fate.
type rollbackUpdate struct {
	result   api.RollbackResult
	rejected error
	err      error
	done     bool
}

// requestAt sends a rollback request at d.
func (h *rollbackHarness) requestAt(d time.Duration, id string, req api.RollbackRequest) *rollbackUpdate {
	u := &rollbackUpdate{}
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateRollback, id, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { u.rejected, u.done = err, true },
			OnComplete: func(v any, err error) {
				u.err, u.done = err, true
				if err == nil {
					u.result = v.(api.RollbackResult)
				}
			},
		}, req)
	}, d)
	return u
}

func (h *rollbackHarness) runRollback(in api.RollbackTaskInput) api.TaskResult {
	h.t.Helper()
	h.env.ExecuteWorkflow(api.RollbackTaskName, in)
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("rollback task did not complete")
	}
	var out api.TaskResult
	if err := h.env.GetWorkflowResult(&out); err != nil {
		h.t.Fatalf("rollback task error: %v", err)
	}
	return out
}

// restoreSeq lists the compensations that ran, in order.
func (h *rollbackHarness) restoreSeq() []string {
	h.tools.mu.Lock()
	defer h.tools.mu.Unlock()
	var out []string
	for _, in := range h.tools.seen {
		out = append(out, in.CallID+"/"+in.TaskID)
	}
	return out
}

func TestRollbackTaskRunsTheCompensationsNewestFirstAndEnds(t *testing.T) {
	h := newRollbackHarness(t)
	u := h.requestAt(time.Second, "rb-1", api.RollbackRequest{By: "operator", Reason: "undo the plan"})
	out := h.runRollback(rollbackInput("c1", "c2", "c3"))

	if !u.done || u.err != nil || u.rejected != nil {
		t.Fatalf("rollback update: %+v", u)
	}
	if u.result.State != api.StateRolledBack || u.result.Joined || u.result.TaskID != "task-1" {
		t.Errorf("rollback result %+v", u.result)
	}
	if diff := cmp.Diff([]string{"c3=done", "c2=done", "c1=done"}, compensationCallIDs(u.result.Compensated)); diff != "" {
		t.Errorf("compensated (-want +got):\n%s", diff)
	}
	// Each compensation runs as call undo-<id> of the ended task, so its
	// idempotency key is the one the task's own rollback would have used.
	if diff := cmp.Diff([]string{"undo-c3/task-1", "undo-c2/task-1", "undo-c1/task-1"}, h.restoreSeq()); diff != "" {
		t.Errorf("compensations ran (-want +got):\n%s", diff)
	}
	if out.State != api.StateRolledBack || out.TaskID != "task-1" || len(out.Undone) != 0 {
		t.Errorf("task result %+v, want rolled_back", out)
	}
}

func TestRollbackTaskJoinsASecondRequest(t *testing.T) {
	// The first compensation is not sent and retried after a second, so
	// the second request arrives while the first rollback runs.
	notSent := respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent))
	h := newRollbackHarness(t, notSent)
	in := rollbackInput("c1", "c2")
	in.Compensations[1].Compensation.Spec.Retry = api.RetrySpec{MaxAttempts: 2, InitialInterval: time.Minute}
	a := h.requestAt(time.Second, "rb-a", api.RollbackRequest{By: "operator"})
	b := h.requestAt(30*time.Second, "rb-b", api.RollbackRequest{By: "alice", Principal: "alice"})
	out := h.runRollback(in)

	if !a.done || !b.done || a.err != nil || b.err != nil || a.rejected != nil || b.rejected != nil {
		t.Fatalf("updates %+v / %+v: want both to complete", a, b)
	}
	if a.result.Joined || !b.result.Joined {
		t.Errorf("joined: first %v, second %v; want only the second to join", a.result.Joined, b.result.Joined)
	}
	if a.result.State != api.StateRolledBack || b.result.State != api.StateRolledBack {
		t.Errorf("states %s / %s, want both rolled_back", a.result.State, b.result.State)
	}
	if diff := cmp.Diff(compensationCallIDs(a.result.Compensated), compensationCallIDs(b.result.Compensated)); diff != "" {
		t.Errorf("the joined request saw another rollback (-first +second):\n%s", diff)
	}
	// c2's compensation twice (not sent, then sent), c1's once: the
	// second request ran nothing.
	if diff := cmp.Diff([]string{"undo-c2/task-1", "undo-c2/task-1", "undo-c1/task-1"}, h.restoreSeq()); diff != "" {
		t.Errorf("compensations ran (-want +got):\n%s", diff)
	}
	if out.State != api.StateRolledBack {
		t.Errorf("task ended %s", out.State)
	}
}

func TestRollbackTaskRefusesAnotherPrincipal(t *testing.T) {
	h := newRollbackHarness(t)
	other := h.requestAt(time.Second, "rb-mallory", api.RollbackRequest{By: "mallory", Principal: "mallory"})
	long := h.requestAt(2*time.Second, "rb-long", api.RollbackRequest{By: "operator", Reason: strings.Repeat("x", api.MaxReasonBytes+1)})
	own := h.requestAt(time.Minute, "rb-alice", api.RollbackRequest{By: "alice", Principal: "alice"})
	out := h.runRollback(rollbackInput("c1"))

	if other.rejected == nil || !strings.Contains(other.rejected.Error(), "belongs to another principal") {
		t.Errorf("another principal's rollback: rejected = %v, result %+v", other.rejected, other.result)
	}
	if long.rejected == nil || !strings.Contains(long.rejected.Error(), "keep it under") {
		t.Errorf("an oversized reason: rejected = %v", long.rejected)
	}
	if own.rejected != nil || own.result.State != api.StateRolledBack {
		t.Errorf("the principal's own rollback: %+v", own)
	}
	// Only the accepted request ran anything.
	if diff := cmp.Diff([]string{"undo-c1/task-1"}, h.restoreSeq()); diff != "" {
		t.Errorf("compensations ran (-want +got):\n%s", diff)
	}
	if out.State != api.StateRolledBack {
		t.Errorf("task ended %s", out.State)
	}
}

func TestRollbackTaskFailureWaitsForAnOperator(t *testing.T) {
	toolErr := respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[{"type":"text","text":"disk full"}],"isError":true}`), IsError: true}, nil)
	tests := []struct {
		name string
		// then is what the operator does after the failed rollback.
		then      func(h *rollbackHarness) *rollbackUpdate
		wantState string
		wantRuns  []string
		wantLeft  []string // the result's Undone
	}{
		{
			name: "a retried rollback finishes the job",
			then: func(h *rollbackHarness) *rollbackUpdate {
				return h.requestAt(time.Hour, "rb-2", api.RollbackRequest{By: "operator"})
			},
			wantState: api.StateRolledBack,
			wantRuns:  []string{"undo-c2/task-1", "undo-c1/task-1", "undo-c1/task-1"},
		},
		{
			name: "finishing leaves it rolled back in part",
			then: func(h *rollbackHarness) *rollbackUpdate {
				h.finishAt(time.Hour)
				return nil
			},
			wantState: api.StateRollbackFailed,
			wantRuns:  []string{"undo-c2/task-1", "undo-c1/task-1"},
			wantLeft:  []string{"c1=failed"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// c2's compensation runs, c1's reports an error.
			h := newRollbackHarness(t, respond(okOutput(`{"content":[]}`), nil), toolErr)
			first := h.requestAt(time.Second, "rb-1", api.RollbackRequest{By: "operator"})
			retry := tc.then(h)
			out := h.runRollback(rollbackInput("c1", "c2"))

			if first.result.State != api.StateRollbackFailed || !strings.Contains(first.result.Reason, "disk full") {
				t.Fatalf("first rollback = %+v", first.result)
			}
			if diff := cmp.Diff([]string{"c1=failed"}, compensationCallIDs(first.result.Remaining)); diff != "" {
				t.Errorf("remaining after the failure (-want +got):\n%s", diff)
			}
			if len(h.alerts) != 1 || h.alerts[0].Group != "ops" || len(h.alerts[0].Remaining) != 1 || h.alerts[0].Remaining[0].CallID != "c1" {
				t.Errorf("alerts = %+v, want one to ops naming c1", h.alerts)
			}
			if retry != nil && (retry.result.State != api.StateRolledBack || len(retry.result.Compensated) != 1) {
				t.Errorf("retried rollback = %+v", retry.result)
			}
			if out.State != tc.wantState {
				t.Errorf("task ended %s, want %s", out.State, tc.wantState)
			}
			if diff := cmp.Diff(tc.wantRuns, h.restoreSeq()); diff != "" {
				t.Errorf("compensations ran (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLeft, compensationCallIDs(out.Undone)); diff != "" {
				t.Errorf("left undone (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRollbackTaskEndsWithoutRollingBack(t *testing.T) {
	t.Run("finished before any request", func(t *testing.T) {
		h := newRollbackHarness(t)
		h.finishAt(time.Minute)
		out := h.runRollback(rollbackInput("c1"))
		if out.State != api.StateFinished || h.tools.calls() != 0 {
			t.Fatalf("task ended %s after %d tool calls, want finished after none", out.State, h.tools.calls())
		}
	})
	t.Run("cancelled: the cancel rolls back", func(t *testing.T) {
		h := newRollbackHarness(t)
		h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute)
		out := h.runRollback(rollbackInput("c1", "c2"))
		if out.State != api.StateRolledBack {
			t.Errorf("task ended %s", out.State)
		}
		if diff := cmp.Diff([]string{"undo-c2/task-1", "undo-c1/task-1"}, h.restoreSeq()); diff != "" {
			t.Errorf("compensations ran (-want +got):\n%s", diff)
		}
	})
	t.Run("nothing to roll back", func(t *testing.T) {
		h := newRollbackHarness(t)
		h.env.ExecuteWorkflow(api.RollbackTaskName, rollbackInput())
		if err := h.env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "nothing to roll back") {
			t.Fatalf("workflow error %v, want nothing to roll back", err)
		}
	})
}
