package workflows

import (
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

// TestCallRunsTheJudgedRoute: when the decision carries the route and spec
// the worker's catalog judged (changeJudgedRoute), the call runs them, not
// the gateway's copy in the request. Here the two differ in server,
// upstream tool and idempotency: the request's spec would not re-run an
// unknown outcome; the judged one, idempotent, does, on the judged route.
func TestCallRunsTheJudgedRoute(t *testing.T) {
	judged := &api.Route{Server: "fs-worker", UpstreamTool: "read_v2", Spec: api.ToolSpec{Timeout: time.Minute, Idempotent: true,
		Retry: api.RetrySpec{MaxAttempts: 2, InitialInterval: time.Second, Backoff: 2}}}
	h := newHarness(t, respond(api.CallToolOutput{}, appErr(api.ErrTypeOutcomeUnknown)), respond(okOutput(`{"content":[]}`), nil))
	h.policy.undo = func(_ api.DecideInput, out *api.DecideOutput) { out.Route = judged }
	var res api.CallResult
	h.callAt(time.Second, req("c1", false), &res, nil) // fs/read, not idempotent
	h.finishAt(time.Hour - time.Minute)
	h.run(baseInput())

	if res.Outcome != api.OutcomeOK || res.Attempts != 2 {
		t.Fatalf("outcome %q after %d attempts (%s); want ok after 2, as the judged (idempotent) spec retries", res.Outcome, res.Attempts, res.Reason)
	}
	if len(h.tools.seen) != 2 {
		t.Fatalf("CallTool ran %d times, want 2", len(h.tools.seen))
	}
	for i, in := range h.tools.seen {
		if in.Server != judged.Server || in.Tool != judged.UpstreamTool || !in.Idempotent || in.ExposedName != "fs__read" {
			t.Errorf("attempt %d ran %s/%s (idempotent %v, exposed %s); want the judged %s/%s, idempotent, exposed fs__read",
				i+1, in.Server, in.Tool, in.Idempotent, in.ExposedName, judged.Server, judged.UpstreamTool)
		}
	}
}

// TestCallWithoutAJudgedRouteRunsTheRequest: a decision without a route
// (recorded before changeJudgedRoute, or a catalog that does not know the
// tool) leaves the request's route and spec.
func TestCallWithoutAJudgedRouteRunsTheRequest(t *testing.T) {
	h := newHarness(t, respond(api.CallToolOutput{}, appErr(api.ErrTypeOutcomeUnknown)))
	var res api.CallResult
	h.callAt(time.Second, req("c1", false), &res, nil)
	h.finishAt(time.Hour - time.Minute)
	h.run(baseInput())
	if res.Outcome != api.OutcomeUnknown || res.Attempts != 1 {
		t.Fatalf("outcome %q after %d attempts; want unknown after 1 (the request's spec is not idempotent)", res.Outcome, res.Attempts)
	}
	if in := h.tools.seen[0]; in.Server != "fs" || in.Tool != "read" || in.Idempotent {
		t.Errorf("ran %+v, want the request's fs/read", in)
	}
}

// TestFastPathRetriesTheJudgedRoute: a fast-path call that failed before
// it was sent is retried, as the regular path would, by the judged spec
// and on the judged route (the request's spec allows one attempt only).
func TestFastPathRetriesTheJudgedRoute(t *testing.T) {
	judged := &api.Route{Server: "fs-worker", UpstreamTool: "read_v2", Spec: api.ToolSpec{Timeout: time.Minute, Idempotent: true, Risk: "low",
		Retry: api.RetrySpec{MaxAttempts: 2, InitialInterval: time.Second, Backoff: 2}}}
	h := withFastPath(newHarness(t), respond(api.CallToolOutput{}, appErr(api.ErrTypeNotSent)))
	h.policy.undo = func(_ api.DecideInput, out *api.DecideOutput) { out.Route = judged }
	r := lowRisk(req("c1", true))
	r.Spec.Retry.MaxAttempts = 1
	var res api.CallResult
	h.callAt(time.Second, r, &res, nil)
	h.finishAt(time.Hour - time.Minute)
	h.run(fastInput())

	if res.Outcome != api.OutcomeOK || res.Attempts != 2 {
		t.Fatalf("outcome %q after %d attempts (%s); want ok after 2, as the judged spec retries", res.Outcome, res.Attempts, res.Reason)
	}
	if len(h.tools.seen) != 1 {
		t.Fatalf("CallTool ran %d times, want once (the retry)", len(h.tools.seen))
	}
	if in := h.tools.seen[0]; in.Server != judged.Server || in.Tool != judged.UpstreamTool {
		t.Errorf("the retry ran %+v; want the judged %s/%s", in, judged.Server, judged.UpstreamTool)
	}
}
