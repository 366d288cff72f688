package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// fakeTools is a scripted CallTool activity: each call takes the next
// response; it records every input it saw.
type fakeTools struct {
	mu     sync.Mutex
	script []func(api.CallToolInput) (api.CallToolOutput, error)
	seen   []api.CallToolInput
}

func (f *fakeTools) CallTool(_ context.Context, in api.CallToolInput) (api.CallToolOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, in)
	if len(f.script) == 0 {
		return okOutput(`{"content":[{"type":"text","text":"default"}]}`), nil
	}
	next := f.script[0]
	f.script = f.script[1:]
	return next(in)
}

func (f *fakeTools) calls() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.seen) }

func okOutput(js string) api.CallToolOutput {
	return api.CallToolOutput{Result: json.RawMessage(js)}
}

func respond(out api.CallToolOutput, err error) func(api.CallToolInput) (api.CallToolOutput, error) {
	return func(api.CallToolInput) (api.CallToolOutput, error) { return out, err }
}

func appErr(kind string) error {
	return temporal.NewApplicationError("upstream said no ("+kind+")", kind)
}

type harness struct {
	t      *testing.T
	env    *testsuite.TestWorkflowEnvironment
	tools  *fakeTools
	policy *fakePolicy
}

// fakePolicy is a scripted Decide activity: it allows unless decide is set.
type fakePolicy struct {
	mu       sync.Mutex
	decide   func(api.DecideInput) (api.Verdict, error)
	approval *api.ApprovalSpec
	seen     []api.DecideInput
	// undo adds the compensation facts (capture, compensable) to a decision.
	undo func(api.DecideInput, *api.DecideOutput)
}

func (f *fakePolicy) Decide(_ context.Context, in api.DecideInput) (api.DecideOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, in)
	out := api.DecideOutput{Verdict: api.Verdict{Effect: api.Allow, Check: api.CheckDefault, Version: "v-test"}}
	var err error
	if f.decide != nil {
		out.Verdict, err = f.decide(in)
		out.Approval = f.approval
	}
	if f.undo != nil && out.Effect != api.Deny {
		f.undo(in, &out)
	}
	return out, err
}

func newHarness(t *testing.T, script ...func(api.CallToolInput) (api.CallToolOutput, error)) *harness {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	if harnessMetrics != nil {
		s.SetMetricsHandler(harnessMetrics)
	}
	env := s.NewTestWorkflowEnvironment()
	// The SDK calls a workflow task that runs over a second a deadlock;
	// on a loaded 2-core machine under -race a sound task can take that
	// long. A real deadlock still fails the test, later.
	env.SetWorkerOptions(sdkworker.Options{DeadlockDetectionTimeout: 15 * time.Second})
	f := &fakeTools{script: script}
	p := &fakePolicy{}
	env.RegisterWorkflowWithOptions(AgentTask, workflow.RegisterOptions{Name: api.AgentTaskName})
	env.RegisterActivityWithOptions(f.CallTool, activity.RegisterOptions{Name: api.CallToolName})
	env.RegisterActivityWithOptions(p.Decide, activity.RegisterOptions{Name: api.DecideName})
	env.RegisterActivityWithOptions(passProgramGuard, activity.RegisterOptions{Name: api.GuardProgramName})
	return &harness{t: t, env: env, tools: f, policy: p}
}

// passProgramGuard is a content guard that finds nothing in a program's
// result (changeProgramGuard; the real one is activities.GuardProgram).
func passProgramGuard(_ context.Context, in api.GuardProgramInput) (api.GuardProgramOutput, error) {
	return api.GuardProgramOutput{Result: in.Result, Output: in.Output}, nil
}

func req(id string, idempotent bool) api.CallRequest {
	return api.CallRequest{
		CallID: id, Tool: "fs__read", Server: "fs", UpstreamTool: "read",
		Arguments: json.RawMessage(`{"path":"/a"}`),
		Spec: api.ToolSpec{Timeout: time.Minute, Idempotent: idempotent,
			Retry: api.RetrySpec{MaxAttempts: 3, InitialInterval: time.Second, Backoff: 2, MaxInterval: 10 * time.Second}},
	}
}

// callAt sends an update at delay d and stores its outcome in *res / *rejected.
func (h *harness) callAt(d time.Duration, r api.CallRequest, res *api.CallResult, rejected *error) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateCallTool, r.CallID, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) {
				if rejected != nil {
					*rejected = err
				}
			},
			OnComplete: func(v any, err error) {
				if err != nil {
					h.t.Errorf("update %s failed: %v", r.CallID, err)
					return
				}
				if res != nil {
					*res = v.(api.CallResult)
				}
			},
		}, r)
	}, d)
}

func (h *harness) finishAt(d time.Duration) {
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(api.SignalFinish, nil) }, d)
}

func (h *harness) run(in api.TaskInput) api.TaskResult {
	h.t.Helper()
	h.env.ExecuteWorkflow(api.AgentTaskName, in)
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
	var out api.TaskResult
	if err := h.env.GetWorkflowResult(&out); err != nil {
		h.t.Fatalf("workflow error: %v", err)
	}
	return out
}

func baseInput() api.TaskInput {
	return api.TaskInput{TaskID: "task-1", Principal: "alice", Limits: api.Limits{MaxCalls: 10, IdleTimeout: time.Hour}}
}

func TestCallOutcomes(t *testing.T) {
	timeoutErr := temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
	tests := []struct {
		name         string
		idempotent   bool
		script       []func(api.CallToolInput) (api.CallToolOutput, error)
		wantOutcome  api.Outcome
		wantAttempts int
		wantReason   string // substring
	}{
		{name: "ok", script: nil, wantOutcome: api.OutcomeOK, wantAttempts: 1},
		{name: "tool error passes through", script: []func(api.CallToolInput) (api.CallToolOutput, error){
			respond(api.CallToolOutput{Result: json.RawMessage(`{"content":[],"isError":true}`), IsError: true}, nil)},
			wantOutcome: api.OutcomeToolError, wantAttempts: 1},
		{name: "not sent is retried", script: []func(api.CallToolInput) (api.CallToolOutput, error){
			respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)), respond(okOutput(`{"content":[]}`), nil)},
			wantOutcome: api.OutcomeOK, wantAttempts: 2},
		{name: "not sent exhausts attempts", script: []func(api.CallToolInput) (api.CallToolOutput, error){
			respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)),
			respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)),
			respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent))},
			wantOutcome: api.OutcomeUnavailable, wantAttempts: 3, wantReason: "did not run"},
		{name: "unknown outcome not re-run for non-idempotent tool", script: []func(api.CallToolInput) (api.CallToolOutput, error){
			respond(api.CallToolOutput{}, appErr(api.ErrTypeOutcomeUnknown))},
			wantOutcome: api.OutcomeUnknown, wantAttempts: 1, wantReason: "not idempotent"},
		{name: "worker died mid-call, non-idempotent", script: []func(api.CallToolInput) (api.CallToolOutput, error){
			respond(api.CallToolOutput{}, timeoutErr)},
			wantOutcome: api.OutcomeUnknown, wantAttempts: 1, wantReason: "not re-run"},
		{name: "worker died mid-call, idempotent is re-run", idempotent: true, script: []func(api.CallToolInput) (api.CallToolOutput, error){
			respond(api.CallToolOutput{}, timeoutErr), respond(okOutput(`{"content":[]}`), nil)},
			wantOutcome: api.OutcomeOK, wantAttempts: 2},
		{name: "rejected is not retried", idempotent: true, script: []func(api.CallToolInput) (api.CallToolOutput, error){
			respond(api.CallToolOutput{}, temporal.NewNonRetryableApplicationError("bad params", api.ErrTypeRejected, nil))},
			wantOutcome: api.OutcomeRejected, wantAttempts: 1, wantReason: "bad params"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.script...)
			var res api.CallResult
			h.callAt(time.Second, req("c1", tc.idempotent), &res, nil)
			h.finishAt(time.Hour - time.Minute)
			out := h.run(baseInput())
			if res.Outcome != tc.wantOutcome || res.Attempts != tc.wantAttempts {
				t.Fatalf("got outcome %q after %d attempts (reason %q); want %q after %d", res.Outcome, res.Attempts, res.Reason, tc.wantOutcome, tc.wantAttempts)
			}
			if !strings.Contains(res.Reason, tc.wantReason) {
				t.Errorf("reason %q does not mention %q", res.Reason, tc.wantReason)
			}
			if h.tools.calls() != tc.wantAttempts {
				t.Errorf("activity ran %d times, want %d", h.tools.calls(), tc.wantAttempts)
			}
			if out.State != api.StateFinished || out.Calls != 1 {
				t.Errorf("task result %+v", out)
			}
			for i, in := range h.tools.seen {
				if in.CallID != "c1" || in.Attempt != i+1 || in.TaskID != "task-1" || in.Tool != "read" || in.Server != "fs" {
					t.Errorf("activity input %d: %+v", i, in)
				}
			}
		})
	}
}

func TestResultPassesThroughUnchanged(t *testing.T) {
	body := `{"content":[{"type":"image","data":"AAEC","mimeType":"image/png"}],"structuredContent":{"n":1}}`
	h := newHarness(t, respond(okOutput(body), nil))
	var res api.CallResult
	h.callAt(time.Second, req("c1", false), &res, nil)
	h.finishAt(time.Minute)
	h.run(baseInput())
	if string(res.Result) != body {
		t.Fatalf("result changed:\n got %s\nwant %s", res.Result, body)
	}
}

func TestMaxCallsLimit(t *testing.T) {
	h := newHarness(t)
	in := baseInput()
	in.Limits.MaxCalls = 2
	var r1, r2, r3 api.CallResult
	h.callAt(time.Second, req("c1", false), &r1, nil)
	h.callAt(2*time.Second, req("c2", false), &r2, nil)
	h.callAt(3*time.Second, req("c3", false), &r3, nil)
	h.finishAt(time.Minute)
	out := h.run(in)
	if r1.Outcome != api.OutcomeOK || r2.Outcome != api.OutcomeOK {
		t.Fatalf("first calls: %v %v", r1.Outcome, r2.Outcome)
	}
	if r3.Outcome != api.OutcomeLimit || !strings.Contains(r3.Reason, "limit of 2 tool calls") {
		t.Fatalf("third call: %+v", r3)
	}
	if h.tools.calls() != 2 || out.Calls != 2 {
		t.Fatalf("activity ran %d times, task counted %d; want 2", h.tools.calls(), out.Calls)
	}
}

func TestDeadline(t *testing.T) {
	h := newHarness(t)
	in := baseInput()
	in.Limits.Deadline = h.env.Now().Add(10 * time.Minute)
	var r1 api.CallResult
	h.callAt(time.Minute, req("c1", false), &r1, nil)
	out := h.run(in)
	if r1.Outcome != api.OutcomeOK {
		t.Fatalf("call before deadline: %+v", r1)
	}
	if out.State != api.StateDeadline {
		t.Fatalf("task ended %q, want %q", out.State, api.StateDeadline)
	}
}

func TestIdleTimeoutEndsTask(t *testing.T) {
	h := newHarness(t)
	in := baseInput()
	in.Limits.IdleTimeout = 30 * time.Minute
	var r1 api.CallResult
	h.callAt(20*time.Minute, req("c1", false), &r1, nil)
	start := h.env.Now()
	out := h.run(in)
	if out.State != api.StateIdle || r1.Outcome != api.OutcomeOK {
		t.Fatalf("task %+v call %+v", out, r1)
	}
	// Idle counts from the last call, not from the start.
	if got := h.env.Now().Sub(start); got < 50*time.Minute {
		t.Fatalf("task ended after %s; the call at 20m should have pushed idle end to 50m", got)
	}
}

func TestValidatorRejectsBadRequests(t *testing.T) {
	h := newHarness(t)
	var rejected error
	bad := req("", false)
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateCallTool, "u1", &testsuite.TestUpdateCallback{
			OnAccept:   func() { t.Error("empty CallID accepted") },
			OnReject:   func(err error) { rejected = err },
			OnComplete: func(any, error) {},
		}, bad)
	}, time.Second)
	h.finishAt(time.Minute)
	h.run(baseInput())
	if rejected == nil || !strings.Contains(rejected.Error(), "CallID is empty") {
		t.Fatalf("rejection: %v", rejected)
	}
	if h.tools.calls() != 0 {
		t.Fatal("activity ran for a rejected update")
	}
}

func TestStatusQuery(t *testing.T) {
	h := newHarness(t)
	h.callAt(time.Second, req("c1", false), nil, nil)
	var st api.Status
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(api.QueryStatus)
		if err != nil {
			t.Errorf("query: %v", err)
			return
		}
		if err := v.Get(&st); err != nil {
			t.Errorf("decode: %v", err)
		}
	}, 2*time.Second)
	h.finishAt(time.Minute)
	h.run(baseInput())
	if st.TaskID != "task-1" || st.Principal != "alice" || st.State != api.StateRunning || st.Calls != 1 ||
		!cmp.Equal(st.ToolsUsed, []string{"fs__read"}) || len(st.Recent) != 1 || st.Recent[0].Outcome != api.OutcomeOK {
		t.Fatalf("status: %+v", st)
	}
	if st.Recent[0].Result != nil {
		t.Error("status carries results; it should be a summary")
	}
}

func TestContinueAsNewCarriesState(t *testing.T) {
	h := newHarness(t)
	in := baseInput()
	in.Limits.ContinueAsNewAfter = 2
	h.callAt(time.Second, req("c1", false), nil, nil)
	h.callAt(2*time.Second, req("c2", false), nil, nil)
	h.env.ExecuteWorkflow(api.AgentTaskName, in)
	err := h.env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("want continue-as-new, got %v", err)
	}
	var next api.TaskInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if next.Carried == nil || next.Carried.Calls != 2 || next.Carried.Runs != 1 || len(next.Carried.Recent) != 2 ||
		next.TaskID != "task-1" || !cmp.Equal(next.Carried.ToolsUsed, []string{"fs__read"}) {
		t.Fatalf("carried: %+v", next.Carried)
	}

	// The next run answers a retried call ID from the carried record
	// instead of running the tool again, and keeps counting.
	h2 := newHarness(t)
	var again, fresh api.CallResult
	h2.callAt(time.Second, req("c2", false), &again, nil)
	h2.callAt(2*time.Second, req("c3", false), &fresh, nil)
	h2.finishAt(time.Minute)
	next.Limits.ContinueAsNewAfter = 100
	out := h2.run(next)
	if again.Outcome != api.OutcomeOK || again.CallID != "c2" || fresh.Outcome != api.OutcomeOK {
		t.Fatalf("again %+v fresh %+v", again, fresh)
	}
	if h2.tools.calls() != 1 {
		t.Fatalf("activity ran %d times in the new run; want 1 (c2 was already done)", h2.tools.calls())
	}
	if out.Calls != 3 {
		t.Fatalf("calls over the task = %d, want 3", out.Calls)
	}
}

func TestFinishWaitsForInFlightCall(t *testing.T) {
	slow := func(api.CallToolInput) (api.CallToolOutput, error) {
		return okOutput(`{"content":[]}`), nil
	}
	h := newHarness(t, slow)
	h.env.SetTestTimeout(time.Minute)
	var res api.CallResult
	h.callAt(time.Second, req("c1", false), &res, nil)
	h.finishAt(time.Second + time.Millisecond)
	out := h.run(baseInput())
	if res.Outcome != api.OutcomeOK || out.State != api.StateFinished || out.Calls != 1 {
		t.Fatalf("res %+v out %+v", res, out)
	}
}

func TestCallsDuringContinueAsNewAreRejectedForRetry(t *testing.T) {
	// c1 needs a retry (a 1s durable timer); meanwhile the run has reached
	// ContinueAsNewAfter, so c2 must be rejected for the client to retry
	// against the next run, and c1 must still finish in this run.
	h := newHarness(t, respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)), respond(okOutput(`{"content":[]}`), nil))
	in := baseInput()
	in.Limits.ContinueAsNewAfter = 1
	var r1 api.CallResult
	var rejected error
	h.callAt(time.Second, req("c1", false), &r1, nil)
	h.callAt(1500*time.Millisecond, req("c2", false), nil, &rejected)
	h.env.ExecuteWorkflow(api.AgentTaskName, in)
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want continue-as-new, got %v", err)
	}
	if r1.Outcome != api.OutcomeOK || r1.Attempts != 2 {
		t.Fatalf("c1: %+v", r1)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(rejected, &appErr) || appErr.Type() != api.ErrTypeContinuingAsNew || !strings.HasPrefix(appErr.Message(), api.ErrContinuingAsNew) {
		t.Fatalf("c2 rejection: %v; want an application error of type %s", rejected, api.ErrTypeContinuingAsNew)
	}
	if h.tools.calls() != 2 {
		t.Fatalf("activity ran %d times, want 2 (c1 twice, c2 never)", h.tools.calls())
	}
}

func TestPolicyDecisions(t *testing.T) {
	tests := []struct {
		name       string
		decide     func(api.DecideInput) (api.Verdict, error)
		want       api.Outcome
		wantReason string
		ran        bool
	}{
		{name: "allow runs the tool", want: api.OutcomeOK, ran: true},
		{name: "deny names the rule", decide: func(api.DecideInput) (api.Verdict, error) {
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no-env", Reason: "denied by rule no-env: .env files hold secrets", Version: "v1"}, nil
		}, want: api.OutcomeDenied, wantReason: "rule no-env"},
		{name: "require approval is refused until approvals exist", decide: func(api.DecideInput) (api.Verdict, error) {
			return api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "ops", Quorum: 2, Version: "v1"}, nil
		}, want: api.OutcomeDenied, wantReason: `needs approval by "ops" (quorum 2)`},
		{name: "a policy that cannot decide denies", decide: func(api.DecideInput) (api.Verdict, error) {
			return api.Verdict{}, temporal.NewNonRetryableApplicationError("no policy loaded", api.ErrTypeInternal, nil)
		}, want: api.OutcomeDenied, wantReason: "could not be evaluated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.policy.decide = tc.decide
			in := baseInput()
			in.Identity = &api.Identity{Name: "alice", Roles: []string{"dev"}, Permissions: []string{"fs.read"}, DataLevel: "internal", AllowTools: []string{"fs__*"}}
			var first, res api.CallResult
			h.callAt(time.Second, req("c0", false), &first, nil)
			h.callAt(time.Minute, req("c1", false), &res, nil)
			h.finishAt(time.Hour - time.Minute)
			h.run(in)
			if res.Outcome != tc.want || !strings.Contains(res.Reason, tc.wantReason) {
				t.Fatalf("outcome %q reason %q; want %q containing %q", res.Outcome, res.Reason, tc.want, tc.wantReason)
			}
			if res.Decision == nil || (tc.decide != nil && res.Decision.Effect == api.Allow) {
				t.Fatalf("decision not recorded: %+v", res.Decision)
			}
			if ran := h.tools.calls() == 2; ran != tc.ran && tc.want != api.OutcomeDenied {
				t.Fatalf("tool ran=%v", ran)
			}
			if tc.want == api.OutcomeDenied && h.tools.calls() != 0 && tc.decide != nil {
				// c0 is judged by the same script: nothing may have run.
				t.Fatalf("a denied call ran the tool (%d runs)", h.tools.calls())
			}
			// The decision saw the task's identity and facts.
			seen := h.policy.seen[len(h.policy.seen)-1]
			if seen.Principal.Name != "alice" || seen.Principal.DataLevel != "internal" || !cmp.Equal(seen.AllowTools, []string{"fs__*"}) ||
				seen.Tool != "fs__read" || seen.Calls != 1 || seen.Elapsed != time.Minute || string(seen.Arguments) != `{"path":"/a"}` {
				t.Fatalf("decide input %+v", seen)
			}
		})
	}
}
