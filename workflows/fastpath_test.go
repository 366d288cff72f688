package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// fastHarness adds the fast path's local activity to a harness: the
// scripted policy decides, and an allowed call with no approval, capture or
// compensation runs on its own scripted tools (not the CallTool activity's),
// as activities.DecideAndCall does. It records which activities ran, local
// and regular, by name.
type fastHarness struct {
	*harness
	fast *fakeTools

	mu      sync.Mutex
	local   []string
	regular []string
}

func withFastPath(h *harness, script ...func(api.CallToolInput) (api.CallToolOutput, error)) *fastHarness {
	f := &fastHarness{harness: h, fast: &fakeTools{script: script}}
	h.env.RegisterActivityWithOptions(f.DecideAndCall, activity.RegisterOptions{Name: api.DecideAndCallName})
	h.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.local = append(f.local, info.ActivityType.Name)
	})
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.regular = append(f.regular, info.ActivityType.Name)
	})
	return f
}

func (f *fastHarness) DecideAndCall(ctx context.Context, in api.DecideAndCallInput) (api.DecideAndCallOutput, error) {
	d, err := f.policy.Decide(ctx, in.Decide)
	if err != nil {
		return api.DecideAndCallOutput{}, err
	}
	out := api.DecideAndCallOutput{Decision: d}
	if d.Effect != api.Allow || d.Approval != nil || d.Capture != nil || d.CaptureError != "" || d.Compensable {
		return out, nil
	}
	out.Ran = true
	res, err := f.fast.CallTool(ctx, in.Call)
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		return out, err // the local activity itself timed out
	}
	if err != nil {
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) {
			return out, err
		}
		out.ErrorType, out.Error = ae.Type(), ae.Message()
		return out, nil
	}
	out.Call = &res
	return out, nil
}

func (f *fastHarness) ran() (local, regular []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.local), slices.Clone(f.regular)
}

// lowRisk is a call that may take the fast path: an idempotent, low-risk
// tool.
func lowRisk(r api.CallRequest) api.CallRequest {
	r.Spec.Idempotent, r.Spec.Risk = true, "low"
	return r
}

func TestFastPathRunsAllowedCallInOneLocalActivity(t *testing.T) {
	h := withFastPath(newHarness(t), respond(okOutput(`{"content":[{"type":"text","text":"fast"}]}`), nil))
	var res api.CallResult
	h.callAt(time.Second, lowRisk(req("c1", true)), &res, nil)
	h.finishAt(time.Minute)
	h.run(fastInput())
	if res.Outcome != api.OutcomeOK || res.Attempts != 1 || string(res.Result) != `{"content":[{"type":"text","text":"fast"}]}` {
		t.Fatalf("result %+v", res)
	}
	if res.Decision == nil || res.Decision.Effect != api.Allow || res.Decision.PolicyVersion != "v-test" {
		t.Fatalf("the decision is not recorded with the call: %+v", res.Decision)
	}
	local, regular := h.ran()
	if !slices.Equal(local, []string{api.DecideAndCallName}) || len(regular) != 0 || h.tools.calls() != 0 {
		t.Fatalf("local activities %q, activities %q, CallTool ran %d times; want one DecideAndCall and nothing else",
			local, regular, h.tools.calls())
	}
	if h.fast.calls() != 1 || h.fast.seen[0].CallID != "c1" || h.fast.seen[0].TaskID != "task-1" || h.fast.seen[0].Attempt != 1 {
		t.Fatalf("the tool ran %d times in the local activity: %+v", h.fast.calls(), h.fast.seen)
	}
}

func TestFastPathDeniedCallDoesNotRun(t *testing.T) {
	h := withFastPath(newHarness(t))
	h.policy.decide = func(api.DecideInput) (api.Verdict, error) {
		return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no", Reason: "denied by rule no", Version: "v-test"}, nil
	}
	var res api.CallResult
	h.callAt(time.Second, lowRisk(req("c1", true)), &res, nil)
	h.finishAt(time.Minute)
	h.run(fastInput())
	if res.Outcome != api.OutcomeDenied || res.Decision == nil || res.Decision.Rule != "no" {
		t.Fatalf("result %+v", res)
	}
	local, regular := h.ran()
	if !slices.Equal(local, []string{api.DecideAndCallName}) || len(regular) != 0 || h.tools.calls()+h.fast.calls() != 0 {
		t.Fatalf("local %q, activities %q, tool ran %d+%d times; want the decision only", local, regular, h.tools.calls(), h.fast.calls())
	}
}

// Calls that need more than a plain allow keep the regular pipeline after
// the fast path's decision: approval, capture and compensation, each with
// the CallTool activity; and calls that may not take it at all (not
// idempotent, not low-risk) are decided by Decide as before.
func TestFastPathLeavesOtherCallsOnTheRegularPath(t *testing.T) {
	ok := respond(okOutput(`{"content":[]}`), nil)
	compensable := func(_ api.DecideInput, out *api.DecideOutput) { out.Compensable = true }
	captured := func(_ api.DecideInput, out *api.DecideOutput) {
		out.Capture = &api.ToolCall{Tool: "fs__read", Server: "fs", UpstreamTool: "read",
			Arguments: json.RawMessage(`{"path":"/a"}`), Spec: api.ToolSpec{Timeout: time.Minute, Idempotent: true, Retry: api.RetrySpec{MaxAttempts: 2}}}
	}
	tests := []struct {
		name        string
		setup       func(*fastHarness)
		req         api.CallRequest
		wantLocal   []string
		wantRegular []string
	}{
		{name: "require_approval", req: lowRisk(req("c1", true)),
			setup: func(h *fastHarness) {
				n := &fakeNotifier{}
				h.env.RegisterActivityWithOptions(n.Notify, activity.RegisterOptions{Name: api.NotifyApproversName})
				h.env.RegisterActivityWithOptions(n.Update, activity.RegisterOptions{Name: api.UpdateApprovalName})
				h.policy.decide = func(api.DecideInput) (api.Verdict, error) {
					return api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "ops", Quorum: 1, Version: "pv1"}, nil
				}
				spec := ops("bob")
				h.policy.approval = &spec
				ah := &approvalHarness{harness: h.harness, notes: n}
				ah.decideAt(10*time.Minute, "click-1", vote("bob", true), nil, nil)
			},
			// Decide: the approved call is judged again before it runs
			// (changeApprovalRecheck).
			wantLocal:   []string{api.DecideAndCallName, api.DecideName},
			wantRegular: []string{api.NotifyApproversName, api.CallToolName, api.UpdateApprovalName}},
		{name: "compensable", req: lowRisk(req("c1", true)),
			setup: func(h *fastHarness) {
				h.policy.undo = compensable
				h.env.RegisterActivityWithOptions((&compensationHarness{}).PlanCompensation, activity.RegisterOptions{Name: api.PlanCompensationName})
			},
			wantLocal:   []string{api.DecideAndCallName, api.PlanCompensationName},
			wantRegular: []string{api.CallToolName}},
		{name: "capture", req: lowRisk(req("c1", true)),
			setup:       func(h *fastHarness) { h.policy.undo = captured },
			wantLocal:   []string{api.DecideAndCallName},
			wantRegular: []string{api.CallToolName, api.CallToolName}},
		{name: "not idempotent", req: func() api.CallRequest { r := lowRisk(req("c1", false)); r.Spec.Idempotent = false; return r }(),
			wantLocal: []string{api.DecideName}, wantRegular: []string{api.CallToolName}},
		{name: "not low-risk", req: func() api.CallRequest { r := req("c1", true); r.Spec.Risk = "medium"; return r }(),
			wantLocal: []string{api.DecideName}, wantRegular: []string{api.CallToolName}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := withFastPath(newHarness(t, ok, ok), ok)
			if tc.setup != nil {
				tc.setup(h)
			}
			var res api.CallResult
			h.callAt(time.Second, tc.req, &res, nil)
			h.finishAt(2 * time.Hour)
			h.run(fastInput())
			if res.Outcome != api.OutcomeOK || res.Decision == nil {
				t.Fatalf("result %+v", res)
			}
			local, regular := h.ran()
			slices.Sort(regular)
			slices.Sort(tc.wantRegular)
			if !slices.Equal(local, tc.wantLocal) || !slices.Equal(regular, tc.wantRegular) {
				t.Fatalf("local activities %q, activities %q; want %q, %q", local, regular, tc.wantLocal, tc.wantRegular)
			}
			if h.fast.calls() != 0 {
				t.Fatalf("the tool ran %d times inside the local activity; want only through CallTool", h.fast.calls())
			}
		})
	}
}

func TestFastPathFailureIsRetriedOnTheRegularPath(t *testing.T) {
	h := withFastPath(newHarness(t, respond(okOutput(`{"content":[]}`), nil)),
		respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)))
	var res api.CallResult
	h.callAt(time.Second, lowRisk(req("c1", true)), &res, nil)
	h.finishAt(time.Hour)
	h.run(fastInput())
	if res.Outcome != api.OutcomeOK || res.Attempts != 2 {
		t.Fatalf("result %+v; want ok after 2 attempts", res)
	}
	if h.fast.calls() != 1 || h.tools.calls() != 1 {
		t.Fatalf("fast attempts %d, CallTool attempts %d; want 1 and 1", h.fast.calls(), h.tools.calls())
	}
}

func TestFastPathRejectedIsNotRetried(t *testing.T) {
	h := withFastPath(newHarness(t),
		respond(api.CallToolOutput{}, temporal.NewNonRetryableApplicationError("bad params", api.ErrTypeRejected, nil)))
	var res api.CallResult
	h.callAt(time.Second, lowRisk(req("c1", true)), &res, nil)
	h.finishAt(time.Hour)
	h.run(fastInput())
	if res.Outcome != api.OutcomeRejected || res.Attempts != 1 || h.tools.calls() != 0 {
		t.Fatalf("result %+v, CallTool ran %d times", res, h.tools.calls())
	}
}

func TestFastPathTimeoutFallsBackToTheRegularPath(t *testing.T) {
	h := withFastPath(newHarness(t, respond(okOutput(`{"content":[]}`), nil)),
		respond(api.CallToolOutput{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil)))
	var res api.CallResult
	h.callAt(time.Second, lowRisk(req("c1", true)), &res, nil)
	h.finishAt(time.Hour)
	h.run(fastInput())
	local, regular := h.ran()
	if res.Outcome != api.OutcomeOK || !slices.Equal(local, []string{api.DecideAndCallName, api.DecideName}) ||
		!slices.Equal(regular, []string{api.CallToolName}) {
		t.Fatalf("result %+v, local %q, activities %q; want ok through Decide and CallTool", res, local, regular)
	}
}

// fastInput is a task with room for the fast path: max_calls far from
// reached, no budget, no rate limits, no deadline.
func fastInput() api.TaskInput {
	in := baseInput()
	in.Limits.MaxCalls = 1000
	return in
}

// TestCountedCallsTakeTheRegularPath (issue 25): a call whose admission
// counted something a dropped workflow task would not have committed
// (the budget, a rate limit over its tool, the last calls under
// max_calls, a near deadline) is decided by Decide and run by the
// CallTool activity, never inside DecideAndCall; a rate limit over other
// tools leaves it on the fast path.
func TestCountedCallsTakeTheRegularPath(t *testing.T) {
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		in   func(*api.TaskInput)
		fast bool
		// v0: a run from before changeFastHeadroom (headroom 10).
		v0 bool
	}{
		{name: "nothing counted", in: func(*api.TaskInput) {}, fast: true},
		{name: "budget", in: func(in *api.TaskInput) { in.Quota = api.NewQuota(nil, 10) }},
		{name: "rate limit over the tool", in: func(in *api.TaskInput) {
			in.Quota = api.NewQuota([]api.RateLimit{{Name: "reads", Scope: api.ScopeTask, Tool: "fs__*", Calls: 100, Window: time.Minute}}, 0)
		}},
		{name: "rate limit over other tools", fast: true, in: func(in *api.TaskInput) {
			in.Quota = api.NewQuota([]api.RateLimit{{Name: "gh", Scope: api.ScopeTask, Tool: "github__*", Calls: 100, Window: time.Minute}}, 0)
		}},
		{name: "max_calls near", in: func(in *api.TaskInput) { in.Limits.MaxCalls = fastHeadroom }},
		{name: "max_calls with headroom", fast: true, in: func(in *api.TaskInput) { in.Limits.MaxCalls = fastHeadroom + 1 }},
		{name: "max_calls within the widened headroom", in: func(in *api.TaskInput) { in.Limits.MaxCalls = fastHeadroomV0 + 1 }},
		{name: "max_calls past the old headroom, old run", fast: true, v0: true, in: func(in *api.TaskInput) { in.Limits.MaxCalls = fastHeadroomV0 + 1 }},
		{name: "max_calls near, old run", v0: true, in: func(in *api.TaskInput) { in.Limits.MaxCalls = fastHeadroomV0 }},
		{name: "deadline near", in: func(in *api.TaskInput) { in.Limits.Deadline = start.Add(30 * time.Second) }},
		{name: "deadline far", fast: true, in: func(in *api.TaskInput) { in.Limits.Deadline = start.Add(time.Hour) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := withFastPath(newHarness(t, respond(okOutput(`{"content":[]}`), nil)), respond(okOutput(`{"content":[]}`), nil))
			h.env.SetStartTime(start)
			if tc.v0 {
				h.env.OnGetVersion(changeFastHeadroom, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			}
			in := fastInput()
			tc.in(&in)
			var res api.CallResult
			h.callAt(time.Second, lowRisk(req("c1", true)), &res, nil)
			h.finishAt(10 * time.Second)
			h.run(in)
			if res.Outcome != api.OutcomeOK || res.Attempts != 1 {
				t.Fatalf("result %+v", res)
			}
			local, regular := h.ran()
			wantLocal, wantRegular, wantFast, wantTools := []string{api.DecideName}, []string{api.CallToolName}, 0, 1
			if tc.fast {
				wantLocal, wantRegular, wantFast, wantTools = []string{api.DecideAndCallName}, nil, 1, 0
			}
			if !slices.Equal(local, wantLocal) || !slices.Equal(regular, wantRegular) || h.fast.calls() != wantFast || h.tools.calls() != wantTools {
				t.Fatalf("local %q, activities %q, ran %d times in DecideAndCall and %d in CallTool; want %q, %q, %d, %d",
					local, regular, h.fast.calls(), h.tools.calls(), wantLocal, wantRegular, wantFast, wantTools)
			}
		})
	}
}
