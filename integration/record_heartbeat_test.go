package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/worker"
)

// TestRecordHeartbeatHistory records an agent task on the path where each
// call's heartbeat timeout follows its tool (changeHeartbeat): a declared
// one, the default of a short tool, none for a call shorter than that; and
// two calls in flight on a worker that a restarted process finds dead
// (worker.ResolveOrphans): the non-idempotent one is answered unknown, the
// idempotent one is re-run. With -record it writes heartbeat_v1_run1.json.
func TestRecordHeartbeatHistory(t *testing.T) {
	t.Parallel()
	effects := filepath.Join(t.TempDir(), "effects.log")
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "counter.yaml"), []byte(fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env: {SIDE_EFFECT_LOG: %s, IDEMPOTENCY_KEYS: put}
tools:
  echo:   {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  append: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false, timeout: 5m, heartbeat_timeout: 30s}
  put:    {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, timeout: 5m, heartbeat_timeout: 30s, retry: {initial_interval: 100ms}}
`, buildBinary(t, "./integration/testupstream"), effects)))
	if err != nil {
		t.Fatal(err)
	}
	// The worker is marked sole, as airlock dev's is, so that the sweep
	// below (standing for the next process) takes its calls for dead.
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, workerIdentity: worker.SoleIdentity()})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__echo", "counter__append", "counter__put")

	ctx := context.Background()
	taskID := "record-heartbeat"
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 10, IdleTimeout: time.Hour})
	callReq := func(id, tool, args string, spec api.ToolSpec) api.CallRequest {
		return api.CallRequest{CallID: id, Tool: "counter__" + tool, Server: "counter", UpstreamTool: tool,
			Arguments: json.RawMessage(args), Spec: spec}
	}
	send := func(c api.CallRequest) api.CallResult {
		t.Helper()
		res, err := sendCall(ctx, s, taskID, c)
		if err != nil {
			t.Errorf("call %s: %v", c.CallID, err)
		}
		return res
	}

	echo := `{"text":"hi"}`
	for _, c := range []api.CallRequest{
		callReq("declared", "echo", echo, api.SpecFor(&manifests.Tool{Timeout: manifests.Duration(time.Hour), HeartbeatTimeout: manifests.Duration(30 * time.Second)})),
		callReq("short", "echo", echo, api.SpecFor(&manifests.Tool{Timeout: manifests.Duration(6 * time.Second)})),
		callReq("shorter", "echo", echo, api.SpecFor(&manifests.Tool{Timeout: manifests.Duration(time.Second)})),
		callReq("unset", "echo", echo, api.ToolSpec{Timeout: time.Minute}), // a gateway older than the field
	} {
		if res := send(c); res.Outcome != api.OutcomeOK {
			t.Fatalf("%s: %+v", c.CallID, res)
		}
	}

	// Two calls in flight when "the process dies".
	slow := []api.CallRequest{
		callReq("lost-append", "append", `{"key":"a1","sleep_ms":5000}`, api.SpecFor(m.Tools["append"])),
		callReq("lost-put", "put", `{"key":"p1","sleep_ms":5000}`, api.SpecFor(m.Tools["put"])),
	}
	results := make(chan api.CallResult, len(slow))
	for _, c := range slow {
		go func() { results <- send(c) }()
	}
	waitFor(t, "both slow calls to reach the upstream", 30*time.Second, func() bool {
		return sideEffects(t, effects, "append", "a1") == 1 && sideEffects(t, effects, "put", "p1") == 1
	})
	orphans, err := worker.ResolveOrphans(ctx, s.client, worker.OrphanOptions{Namespace: s.srv.Namespace(),
		TaskQueue: api.DefaultTaskQueue, Identity: worker.SoleIdentity(), Logger: s.log})
	if err != nil || len(orphans) != 2 {
		t.Fatalf("ResolveOrphans ended %+v (%v), want the two slow calls", orphans, err)
	}
	got := map[string]api.CallResult{}
	for range slow {
		r := <-results
		got[r.CallID] = r
	}
	if r := got["lost-append"]; r.Outcome != api.OutcomeUnknown || r.Attempts != 1 {
		t.Errorf("lost-append: %+v, want unknown after 1 attempt", r)
	}
	if r := got["lost-put"]; r.Outcome != api.OutcomeOK || r.Attempts != 2 {
		t.Errorf("lost-put: %+v, want ok after 2 attempts (re-run)", r)
	}

	if err := s.client.SignalWorkflow(ctx, taskID, "", api.SignalFinish, nil); err != nil {
		t.Fatal(err)
	}
	var out api.TaskResult
	if err := run.Get(ctx, &out); err != nil || out.State != api.StateFinished || out.Calls != 6 {
		t.Fatalf("task result %+v (%v)", out, err)
	}
	replayRuns(t, s, taskID, run.GetRunID(), "heartbeat_v1")
}
