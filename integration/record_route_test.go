package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// TestRecordJudgedRouteHistory records an agent task on the path where a
// call runs the route and spec its decision judged (changeJudgedRoute):
// each request names a route and spec the worker's manifests do not (as a
// gateway whose copy went stale would), and the worker runs its own: a
// regular call (put, medium risk) through the CallTool activity with the
// manifest's timeout, and a fast-path call (echo) inside DecideAndCall.
// With -record it writes judged_route_v1_run1.json.
func TestRecordJudgedRouteHistory(t *testing.T) {
	m, effects := counterManifest(t, `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  put:  {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, timeout: 20s}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	waitTools(t, s.connect(t, nil), "counter__echo", "counter__put")
	ctx := context.Background()
	taskID := "record-judged-route"
	// max_calls far off: the last calls under it keep off the fast path.
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 100, IdleTimeout: time.Hour})
	// The gateway's stale view: another upstream tool name, and a spec
	// that is not the manifest's (one attempt, another timeout).
	stale := api.ToolSpec{Timeout: 5 * time.Second, Retry: api.RetrySpec{MaxAttempts: 1}}
	for _, c := range []api.CallRequest{
		{CallID: "regular", Tool: "counter__put", Server: "counter", UpstreamTool: "put_old",
			Arguments: json.RawMessage(`{"key":"p1"}`), Spec: stale},
		{CallID: "fast", Tool: "counter__echo", Server: "counter", UpstreamTool: "echo_old",
			Arguments: json.RawMessage(`{"text":"hi"}`), Spec: api.ToolSpec{Timeout: 5 * time.Second, Idempotent: true, Risk: string(manifests.RiskLow)}},
	} {
		res, err := sendCall(ctx, s, taskID, c)
		if err != nil || res.Outcome != api.OutcomeOK {
			t.Fatalf("%s: %+v (%v), want ok: the judged route runs", c.CallID, res, err)
		}
	}
	if n := sideEffects(t, effects, "put", "p1"); n != 1 {
		t.Errorf("put ran %d times, want once (the judged upstream tool)", n)
	}
	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, run.GetRunID(), "judged_route_v1")
}
