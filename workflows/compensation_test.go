package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/airlock-run/airlock/api"
)

// compensationHarness adds a compensation planner and a rollback notifier to the
// harness: every call of a tool whose name starts with "fs__write" is
// compensable by "fs__restore" with the call's ID in its arguments.
type compensationHarness struct {
	*harness
	mu       sync.Mutex
	planned  []api.CompensationInput
	alerts   []api.RollbackNotice
	planFail bool
}

func newCompensationHarness(t *testing.T, script ...func(api.CallToolInput) (api.CallToolOutput, error)) *compensationHarness {
	h := &compensationHarness{harness: newHarness(t, script...)}
	h.policy.undo = func(in api.DecideInput, out *api.DecideOutput) {
		if strings.HasPrefix(in.Tool, "fs__write") {
			out.Compensable = true
			out.Capture = &api.ToolCall{Tool: "fs__read", Server: "fs", UpstreamTool: "read",
				Arguments: json.RawMessage(`{"path":"/a"}`), Spec: api.ToolSpec{Timeout: time.Minute, Idempotent: true, Retry: api.RetrySpec{MaxAttempts: 2}}}
		}
	}
	h.env.RegisterActivityWithOptions(h.PlanCompensation, activity.RegisterOptions{Name: api.PlanCompensationName})
	h.env.RegisterActivityWithOptions(h.NotifyRollbackFailed, activity.RegisterOptions{Name: api.NotifyRollbackFailedName})
	return h
}

func (h *compensationHarness) PlanCompensation(_ context.Context, in api.CompensationInput) (api.CompensationOutput, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.planned = append(h.planned, in)
	if h.planFail {
		return api.CompensationOutput{Error: "tools.write.compensation.args.content: no such key: content"}, nil
	}
	return api.CompensationOutput{Compensation: &api.ToolCall{Tool: "fs__restore", Server: "fs", UpstreamTool: "restore",
		Arguments: json.RawMessage(fmt.Sprintf(`{"undo":%q}`, in.CallID)),
		Spec:      api.ToolSpec{Timeout: time.Minute, Idempotent: true, Retry: api.RetrySpec{MaxAttempts: 2, InitialInterval: time.Second}}}}, nil
}

func (h *compensationHarness) NotifyRollbackFailed(_ context.Context, n api.RollbackNotice) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.alerts = append(h.alerts, n)
	return nil
}

func writeReq(id string) api.CallRequest {
	r := req(id, true)
	r.Tool, r.UpstreamTool = "fs__write", "write"
	return r
}

// rollbackAt sends a rollback update at d and stores its result.
func (h *compensationHarness) rollbackAt(d time.Duration, id string, res *api.RollbackResult) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateRollback, id, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { h.t.Errorf("rollback %s rejected: %v", id, err) },
			OnComplete: func(v any, err error) {
				if err != nil {
					h.t.Errorf("rollback %s failed: %v", id, err)
					return
				}
				*res = v.(api.RollbackResult)
			},
		}, api.RollbackRequest{By: "test"})
	}, d)
}

// toolSeq lists the upstream tools (and undo arguments) run, in order.
func (h *compensationHarness) toolSeq() []string {
	h.tools.mu.Lock()
	defer h.tools.mu.Unlock()
	var out []string
	for _, in := range h.tools.seen {
		s := in.Tool
		if in.Tool == "restore" {
			s += string(in.Arguments)
		}
		out = append(out, s)
	}
	return out
}

func TestRollbackRunsCompensationsInReverseOnce(t *testing.T) {
	h := newCompensationHarness(t)
	var r1, r2 api.CallResult
	h.callAt(time.Second, writeReq("c1"), &r1, nil)
	h.callAt(2*time.Second, req("plain", true), nil, nil) // not compensable
	h.callAt(3*time.Second, writeReq("c2"), &r2, nil)
	var rb, again api.RollbackResult
	h.rollbackAt(time.Minute, "rb-1", &rb)
	h.rollbackAt(2*time.Minute, "rb-2", &again)
	h.finishAt(time.Hour - time.Minute)
	out := h.run(baseInput())

	if r1.Outcome != api.OutcomeOK || r2.Outcome != api.OutcomeOK {
		t.Fatalf("calls: %v %v", r1, r2)
	}
	want := []string{"read", "write", "read", "read", "write", `restore{"undo":"c2"}`, `restore{"undo":"c1"}`}
	if got := h.toolSeq(); !slices.Equal(got, want) {
		t.Fatalf("tools ran %q, want %q", got, want)
	}
	if rb.State != api.StateRolledBack || len(rb.Compensated) != 2 || rb.Compensated[0].CallID != "c2" {
		t.Fatalf("rollback = %+v", rb)
	}
	if again.State != api.RollbackNothing {
		t.Errorf("second rollback = %+v, want nothing to do", again)
	}
	if out.State != api.StateFinished || len(out.Undone) != 0 {
		t.Errorf("task result %+v", out)
	}
	// The compensation was computed from the capture's result.
	if len(h.planned) != 2 || h.planned[0].Before == nil || h.planned[0].Result == nil {
		t.Errorf("planned %+v", h.planned)
	}
}

func TestConcurrentRollbacksRunOnce(t *testing.T) {
	// The first compensation takes a while, so the second request arrives
	// while the first rollback runs.
	slow := func(in api.CallToolInput) (api.CallToolOutput, error) {
		return okOutput(`{"content":[]}`), nil
	}
	h := newCompensationHarness(t)
	h.tools.script = nil
	_ = slow
	h.callAt(time.Second, writeReq("c1"), nil, nil)
	h.callAt(2*time.Second, writeReq("c2"), nil, nil)
	var a, b api.RollbackResult
	h.rollbackAt(time.Minute, "rb-a", &a)
	h.rollbackAt(time.Minute, "rb-b", &b)
	h.finishAt(time.Hour - time.Minute)
	h.run(baseInput())
	restores := 0
	for _, s := range h.toolSeq() {
		if strings.HasPrefix(s, "restore") {
			restores++
		}
	}
	if restores != 2 {
		t.Fatalf("compensations ran %d times, want 2 (one per call): %q", restores, h.toolSeq())
	}
	if a.State != api.StateRolledBack || b.State != api.StateRolledBack || a.Joined == b.Joined {
		t.Fatalf("results %+v / %+v: want both rolled back, exactly one joined", a, b)
	}
}

func TestRollbackFailureKeepsWhatRemainsAndAlerts(t *testing.T) {
	toolErr := respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[{"type":"text","text":"disk full"}],"isError":true}`), IsError: true}, nil)
	ok := respond(okOutput(`{"content":[]}`), nil)
	// capture c1, c1, capture c2, c2, undo c2 fails, (retry) undo c2, undo c1.
	h := newCompensationHarness(t, ok, ok, ok, ok, toolErr)
	h.callAt(time.Second, writeReq("c1"), nil, nil)
	h.callAt(2*time.Second, writeReq("c2"), nil, nil)
	var first, retry api.RollbackResult
	h.rollbackAt(time.Minute, "rb-1", &first)
	var rejected error
	h.callAt(2*time.Minute, writeReq("c3"), nil, &rejected)
	h.rollbackAt(3*time.Minute, "rb-2", &retry)
	h.finishAt(time.Hour - time.Minute)
	in := baseInput()
	in.RollbackNotify = "ops"
	out := h.run(in)

	if first.State != api.StateRollbackFailed || len(first.Remaining) != 2 || !strings.Contains(first.Reason, "disk full") {
		t.Fatalf("first rollback = %+v", first)
	}
	if len(h.alerts) != 1 || h.alerts[0].Group != "ops" || len(h.alerts[0].Remaining) != 2 {
		t.Fatalf("alerts = %+v", h.alerts)
	}
	if rejected == nil || !strings.Contains(rejected.Error(), "rolled back completely") {
		t.Errorf("call during rollback_failed: rejected = %v", rejected)
	}
	if retry.State != api.StateRolledBack || len(retry.Compensated) != 2 {
		t.Fatalf("retried rollback = %+v", retry)
	}
	if out.State != api.StateFinished {
		t.Errorf("task ended %s", out.State)
	}
}

func TestUncomputableCompensationStopsRollback(t *testing.T) {
	h := newCompensationHarness(t)
	h.planFail = true
	h.callAt(time.Second, writeReq("c1"), nil, nil)
	var rb api.RollbackResult
	h.rollbackAt(time.Minute, "rb", &rb)
	h.finishAt(time.Hour - time.Minute)
	out := h.run(baseInput())
	if rb.State != api.StateRollbackFailed || !strings.Contains(rb.Reason, "no such key") {
		t.Fatalf("rollback = %+v", rb)
	}
	if out.State != api.StateRollbackFailed || len(out.Undone) != 1 {
		t.Fatalf("task = %+v, want it to end rollback_failed listing the entry", out)
	}
}

func TestCancelRollsBack(t *testing.T) {
	h := newCompensationHarness(t)
	h.callAt(time.Second, writeReq("c1"), nil, nil)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, time.Minute)
	out := h.run(baseInput())
	if out.State != api.StateCanceled {
		t.Fatalf("state %s", out.State)
	}
	if got := h.toolSeq(); got[len(got)-1] != `restore{"undo":"c1"}` {
		t.Fatalf("tools %q: want the compensation last", got)
	}
}

func TestRollbackOnDeny(t *testing.T) {
	h := newCompensationHarness(t)
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.Tool == "fs__delete" {
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no-deletes", Reason: "denied by rule no-deletes"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault}, nil
	}
	var denied api.CallResult
	h.callAt(time.Second, writeReq("c1"), nil, nil)
	del := req("c2", true)
	del.Tool = "fs__delete"
	h.callAt(2*time.Second, del, &denied, nil)
	h.finishAt(time.Hour - time.Minute)
	in := baseInput()
	in.RollbackOnDeny = true
	h.run(in)
	if denied.Outcome != api.OutcomeDenied || !strings.Contains(denied.Reason, "rolled back") {
		t.Fatalf("denied call = %+v", denied)
	}
	if got := h.toolSeq(); got[len(got)-1] != `restore{"undo":"c1"}` {
		t.Fatalf("tools %q: want the compensation after the denial", got)
	}
}

func TestToolErrorDoesNotRollBackOrPush(t *testing.T) {
	toolErr := respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[],"isError":true}`), IsError: true}, nil)
	ok := respond(okOutput(`{"content":[]}`), nil)
	h := newCompensationHarness(t, ok, toolErr)
	var res api.CallResult
	h.callAt(time.Second, writeReq("c1"), &res, nil)
	h.finishAt(time.Hour - time.Minute)
	out := h.run(baseInput())
	if res.Outcome != api.OutcomeToolError || len(h.planned) != 0 || out.State != api.StateFinished {
		t.Fatalf("result %+v, planned %d, state %s", res, len(h.planned), out.State)
	}
}

func TestCaptureOutcomes(t *testing.T) {
	notSent := respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent))
	missing := respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[{"type":"text","text":"ENOENT"}],"isError":true}`), IsError: true}, nil)
	t.Run("capture tool error: before is null, call runs", func(t *testing.T) {
		h := newCompensationHarness(t, missing)
		var res api.CallResult
		h.callAt(time.Second, writeReq("c1"), &res, nil)
		h.finishAt(time.Hour - time.Minute)
		h.run(baseInput())
		if res.Outcome != api.OutcomeOK || len(h.planned) != 1 || h.planned[0].Before != nil {
			t.Fatalf("result %+v planned %+v", res, h.planned)
		}
	})
	t.Run("capture unavailable: call does not run", func(t *testing.T) {
		h := newCompensationHarness(t, notSent, notSent)
		var res api.CallResult
		h.callAt(time.Second, writeReq("c1"), &res, nil)
		h.finishAt(time.Hour - time.Minute)
		h.run(baseInput())
		if res.Outcome != api.OutcomeUnavailable || !strings.Contains(res.Reason, "pre-image") {
			t.Fatalf("result %+v", res)
		}
		if got := h.toolSeq(); slices.Contains(got, "write") {
			t.Fatalf("the write ran without its capture: %q", got)
		}
	})
}

func TestIdleTimeoutWaitsForRollback(t *testing.T) {
	notSent := respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent))
	ok := respond(okOutput(`{"content":[]}`), nil)
	// capture, call, then the compensation: not sent, retried after 1s.
	h := newCompensationHarness(t, ok, ok, notSent, ok)
	h.callAt(time.Second, writeReq("c1"), nil, nil)
	var rb api.RollbackResult
	h.rollbackAt(time.Minute+500*time.Millisecond, "rb", &rb)
	in := baseInput()
	in.Limits.IdleTimeout = time.Minute // falls due while the compensation retries
	out := h.run(in)
	if rb.State != api.StateRolledBack {
		t.Fatalf("rollback = %+v: the task must not end in the middle of it", rb)
	}
	if out.State != api.StateIdle {
		t.Errorf("task ended %s, want idle_timeout after the rollback", out.State)
	}
}
