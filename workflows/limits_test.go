package workflows

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/plans"
)

// TestGCRATake: a window of 3 calls per 3s admits a burst of 3, refuses
// the 4th until one interval (1s) has passed, and refills completely
// after the window; a burst below calls admits fewer at once.
func TestGCRATake(t *testing.T) {
	l := api.RateLimit{Name: "w", Scope: api.ScopeTask, Calls: 3, Window: 3 * time.Second}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var tat time.Time
	for i := range 3 {
		next, _, ok := gcraTake(l, tat, t0)
		if !ok {
			t.Fatalf("call %d of the burst refused", i+1)
		}
		tat = next
	}
	if _, retry, ok := gcraTake(l, tat, t0); ok || retry != time.Second {
		t.Fatalf("4th call: ok=%v retry %s, want refused, retry after 1s", ok, retry)
	}
	if _, retry, ok := gcraTake(l, tat, t0.Add(400*time.Millisecond)); ok || retry != 600*time.Millisecond {
		t.Fatalf("4th call 400ms later: ok=%v retry %s, want refused, retry after 600ms", ok, retry)
	}
	if _, _, ok := gcraTake(l, tat, t0.Add(time.Second)); !ok {
		t.Fatal("4th call after retry_after refused")
	}
	later := t0.Add(3 * time.Second)
	for i := range 3 {
		next, _, ok := gcraTake(l, tat, later)
		if !ok {
			t.Fatalf("call %d after the window refused", i+1)
		}
		tat = next
	}
	l.Burst = 1
	next, _, ok := gcraTake(l, time.Time{}, t0)
	if _, _, ok2 := gcraTake(l, next, t0); !ok || ok2 {
		t.Fatalf("burst 1: first ok=%v, second ok=%v; want only the first", ok, ok2)
	}
}

// TestBudgetGivesBackDeniedCalls: a call denied by policy costs nothing;
// the budget refuses the call that would exceed it, with check budget,
// before it reaches the upstream.
func TestBudgetGivesBackDeniedCalls(t *testing.T) {
	h := newHarness(t)
	h.policy.decide = func(in api.DecideInput) (api.Verdict, error) {
		if in.CallID == "denied" {
			return api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no", Version: "v-test"}, nil
		}
		return api.Verdict{Effect: api.Allow, Check: api.CheckDefault, Version: "v-test"}, nil
	}
	in := baseInput()
	in.Quota = api.NewQuota(nil, 2)
	ids := []string{"denied", "a", "b", "over"}
	res := make([]api.CallResult, len(ids))
	for i, id := range ids {
		r := req(id, true)
		r.Spec.Cost = 1
		h.callAt(time.Duration(i+1)*time.Second, r, &res[i], nil)
	}
	h.finishAt(10 * time.Second)
	h.run(in)
	want := []api.Outcome{api.OutcomeDenied, api.OutcomeOK, api.OutcomeOK, api.OutcomeLimit}
	for i, r := range res {
		if r.Outcome != want[i] {
			t.Errorf("call %s: outcome %s (%s), want %s", ids[i], r.Outcome, r.Reason, want[i])
		}
	}
	over := res[3]
	if over.Decision == nil || over.Decision.Check != api.CheckBudget || over.Limit == nil || over.Limit.Check != api.CheckBudget {
		t.Errorf("refusal %+v: want decision and limit with check budget", over)
	}
	if n := h.tools.calls(); n != 2 {
		t.Errorf("the upstream saw %d calls, want 2", n)
	}
}

// newLimiterEnv runs Limiter in the SDK's test environment.
func newLimiterEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(sdkworker.Options{DeadlockDetectionTimeout: 15 * time.Second})
	env.RegisterWorkflowWithOptions(Limiter, workflow.RegisterOptions{Name: api.LimiterName})
	return env
}

// TestLimiterWindowAndLifetime: the limiter admits a window's burst and
// refuses the next with retry_after, takes a refund back, and ends once
// its window is full again and nobody called for limiterLinger.
func TestLimiterWindowAndLifetime(t *testing.T) {
	env := newLimiterEnv(t)
	l := api.RateLimit{Name: "p", Scope: api.ScopePrincipal, Subject: "alice", Calls: 2, Window: time.Minute}
	var got []api.TakeResult
	take := func(at time.Duration, id string, r api.TakeRequest) {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(api.UpdateTake, id, &testsuite.TestUpdateCallback{
				OnAccept: func() {},
				OnReject: func(err error) { t.Errorf("take %s rejected: %v", id, err) },
				OnComplete: func(v any, err error) {
					if err != nil {
						t.Errorf("take %s: %v", id, err)
						return
					}
					got = append(got, v.(api.TakeResult))
				},
			}, r)
		}, at)
	}
	take(time.Second, "a", api.TakeRequest{Limit: l})
	take(2*time.Second, "b", api.TakeRequest{Limit: l})
	take(3*time.Second, "c", api.TakeRequest{Limit: l})                      // refused
	take(4*time.Second, "b-refund", api.TakeRequest{Limit: l, Refund: true}) // b given back
	take(5*time.Second, "d", api.TakeRequest{Limit: l})                      // admitted again
	env.ExecuteWorkflow(api.LimiterName, api.LimiterInput{Key: l.WindowKey("")})
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("limiter did not end by itself: completed %v, %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	if len(got) != 5 {
		t.Fatalf("%d answers, want 5: %+v", len(got), got)
	}
	if !got[0].Allowed || !got[1].Allowed || got[2].Allowed || got[2].RetryAfter <= 0 || got[2].RetryAfter > 30*time.Second || !got[4].Allowed {
		t.Errorf("answers %+v: want allowed, allowed, refused with retry_after ≤30s, (refund), allowed", got)
	}
}

// TestLimiterContinuesAsNew: after limiterContinueAfter takes the limiter
// continues as new, carrying its window.
func TestLimiterContinuesAsNew(t *testing.T) {
	env := newLimiterEnv(t)
	l := api.RateLimit{Name: "p", Scope: api.ScopeRole, Subject: "dev", Calls: 1 << 20, Window: time.Hour}
	env.RegisterDelayedCallback(func() {
		for i := range limiterContinueAfter {
			env.UpdateWorkflowNoRejection(api.UpdateTake, fmt.Sprint("t", i), t, api.TakeRequest{Limit: l})
		}
	}, time.Second)
	env.ExecuteWorkflow(api.LimiterName, api.LimiterInput{Key: l.WindowKey("")})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want continue-as-new after %d takes, got %v", limiterContinueAfter, err)
	}
	var next api.LimiterInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if next.Key != l.WindowKey("") || next.TAT.IsZero() {
		t.Errorf("carried %+v: want the key and the window's TAT", next)
	}
}

// harnessMetrics, when set, is the metrics handler of the harnesses a test
// makes (newHarness).
var harnessMetrics client.MetricsHandler

// TestPlanStepRefusalIsCounted: a plan step refused by the task's budget
// is counted once in airlock_limit_refusals_total{check=budget,limit=budget}
// (plan steps reach no gateway, which counts the calls it answers), and
// the plan's allowed steps are not.
func TestPlanStepRefusalIsCounted(t *testing.T) {
	harnessMetrics = metrics.NewSDKHandler()
	t.Cleanup(func() { harnessMetrics = nil })
	refusals := func() float64 {
		var m dto.Metric
		if err := metrics.LimitRefusals.WithLabelValues(api.CheckBudget, "budget").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := refusals()
	h := newPlanHarness(t)
	in := planInput(
		plans.Step{ID: "a", Tool: "fs__read", Args: map[string]any{"path": "/a"}},
		plans.Step{ID: "b", Tool: "fs__read", Args: map[string]any{"path": "/b"}},
	)
	in.Quota = api.NewQuota(nil, 1)
	_, st := h.runPlan(in)
	if diff := cmp.Diff([]string{"a=ok", "b=failed/limit"}, stepStates(st)); diff != "" {
		t.Errorf("step states (-want +got):\n%s", diff)
	}
	if got := refusals() - before; got != 1 {
		t.Errorf("airlock_limit_refusals_total{check=budget,limit=budget} rose by %v, want 1", got)
	}
}
