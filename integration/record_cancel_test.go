package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// TestRecordCancelHistory records an agent task on the path where a call
// can be cancelled on its own (changeCancelCall, api.SignalCancelCall): a
// call waiting for approval whose request is withdrawn, a running call
// whose activity is cancelled (the upstream tool sees it), a signal for a
// call that already ended (nothing changes), and a call after them. With
// -record it writes cancel_v1_run1.json.
func TestRecordCancelHistory(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, appendNeedsOps+
		"  wait: {side_effects: [none], data_access_level: public, risk: medium, idempotent: false, timeout: 60s, heartbeat_timeout: 4s}\n"+
		"  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, groups: map[string][]string{"ops": {"bob"}}})
	waitTools(t, s.connect(t, nil), "counter__wait")
	ctx := context.Background()
	taskID := "record-cancel"
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 10, IdleTimeout: time.Hour})
	send := func(id, tool, args string) api.CallResult {
		t.Helper()
		req := api.CallRequest{CallID: id, Tool: "counter__" + tool, Server: "counter", UpstreamTool: tool,
			Arguments: json.RawMessage(args), Spec: api.SpecFor(m.Tools[tool])}
		res, err := sendCall(ctx, s, taskID, req)
		if err != nil {
			t.Fatalf("call %s: %v", id, err)
		}
		return res
	}
	cancelCall := func(id string) {
		if err := s.client.SignalWorkflow(ctx, taskID, "", api.SignalCancelCall, api.CancelCall{CallID: id, Reason: "recorded test"}); err != nil {
			t.Errorf("signal %s: %v", id, err)
		}
	}
	logHas := func(line string) bool {
		b, _ := os.ReadFile(effects)
		return slices.Contains(strings.Split(strings.TrimSpace(string(b)), "\n"), line)
	}

	// Waiting for approval: withdrawn.
	go func() {
		err := testenv.Poll("the request of call waiting to be pending", time.Minute, func() error {
			ar, err := approver.Lookup(ctx, s.client, taskID+"~waiting")
			if err != nil || ar.State != api.ApprovalPending {
				return errors.Join(err, errors.New("not pending"))
			}
			return nil
		})
		if err != nil {
			t.Error(err)
			return
		}
		cancelCall("waiting")
	}()
	if res := send("waiting", "append", `{"key":"a1"}`); res.Outcome != api.OutcomeCancelled || !strings.Contains(res.Reason, "withdrawn") {
		t.Fatalf("waiting: %+v, want cancelled, request withdrawn", res)
	}
	if ar, err := approver.Lookup(ctx, s.client, taskID+"~waiting"); err != nil || ar.State != api.ApprovalWithdrawn {
		t.Errorf("request of call waiting: %v %v, want withdrawn", ar.State, err)
	}

	// Running: its activity is cancelled, and the tool with it.
	go func() {
		if err := testenv.Poll("the wait tool to start", time.Minute, func() error {
			if !logHas("wait-started w1") {
				return errors.New("not started")
			}
			return nil
		}); err != nil {
			t.Error(err)
			return
		}
		cancelCall("running")
	}()
	if res := send("running", "wait", `{"key":"w1"}`); res.Outcome != api.OutcomeCancelled {
		t.Fatalf("running: %+v, want cancelled", res)
	}
	waitFor(t, "the upstream tool to see the cancellation", 30*time.Second, func() bool { return logHas("wait-cancelled w1") })

	// A call that ended is not changed by a late signal; later calls run.
	if res := send("ended", "echo", `{"text":"hi"}`); res.Outcome != api.OutcomeOK {
		t.Fatalf("ended: %+v", res)
	}
	cancelCall("ended")
	if res := send("after", "echo", `{"text":"again"}`); res.Outcome != api.OutcomeOK {
		t.Fatalf("after: %+v", res)
	}
	var st api.Status
	q, err := s.client.QueryWorkflow(ctx, taskID, "", api.QueryStatus)
	if err == nil {
		err = q.Get(&st)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Recent {
		if r.CallID == "ended" && r.Outcome != api.OutcomeOK {
			t.Errorf("the late signal changed call ended to %s", r.Outcome)
		}
	}

	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, run.GetRunID(), "cancel_v1")
}
