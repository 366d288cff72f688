package integration

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// TestRecordApprovalRecheckHistory records an approved call judged again
// before it runs (changeApprovalRecheck) on the real server: one whose
// policy did not change runs; one whose policy changed to deny it while it
// waited (a hot reload of the worker's configuration) is refused after
// its approval, and does not run; one that policy now sends to another
// group is refused too. With -record it writes
// approval_recheck_v1_run1.json.
func TestRecordApprovalRecheckHistory(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, "  put: {side_effects: [write], data_access_level: internal, risk: high, idempotent: true, approval: {group: ops, timeout: 1h}}\n")
	groups := map[string][]string{"ops": {"bob"}, "leads": {"lisa"}}
	var current atomic.Pointer[activities.Judge]
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, groups: groups, judge: current.Load})
	waitTools(t, s.connect(t, nil), "counter__put")
	// reload makes rules the worker's policy, as a hot reload does.
	reload := func(rules ...policy.Rule) {
		p, err := policy.Compile(policy.Config{Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		current.Store(&activities.Judge{Policy: p, Groups: groups,
			Catalog: activities.NewCatalog([]*manifests.Manifest{m}, []manifests.Server{m.Server}, s.pool, false)})
	}
	ctx := context.Background()
	taskID := "record-recheck"
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 10, IdleTimeout: time.Hour})
	// send calls put with key, approves it once it waits after before()
	// ran, and returns its result.
	send := func(id, key string, before func()) api.CallResult {
		t.Helper()
		done := make(chan api.CallResult, 1)
		go func() {
			req := api.CallRequest{CallID: id, Tool: "counter__put", Server: "counter", UpstreamTool: "put",
				Arguments: json.RawMessage(`{"key":"` + key + `"}`), Spec: api.SpecFor(m.Tools["put"])}
			res, err := sendCall(ctx, s, taskID, req)
			if err != nil {
				t.Errorf("call %s: %v", id, err)
			}
			done <- res
		}()
		reqID := api.RequestID(taskID, id)
		waitFor(t, reqID+" pending", time.Minute, func() bool {
			ar, err := approver.Lookup(ctx, s.client, reqID)
			return err == nil && ar.State == api.ApprovalPending
		})
		before()
		approve(t, s, reqID)
		return <-done
	}

	if res := send("same", "unchanged", func() {}); res.Outcome != api.OutcomeOK {
		t.Fatalf("approved, policy unchanged: %+v; want it run", res)
	}
	res := send("revoked", "revoked", func() {
		reload(policy.Rule{Name: "freeze", When: `args.?key.orValue("") == "revoked"`, Effect: api.Deny, Reason: "change freeze"})
	})
	if res.Outcome != api.OutcomeDenied || !strings.Contains(res.Reason, "judged again before it ran") || !strings.Contains(res.Reason, "change freeze") ||
		res.Decision == nil || res.Decision.Effect != api.RequireApproval {
		t.Fatalf("approved, then policy denies it: %+v; want it refused after approval", res)
	}
	res = send("regrouped", "regrouped", func() {
		reload(policy.Rule{Name: "leads-now", When: `args.?key.orValue("") == "regrouped"`, Effect: api.RequireApproval, Group: "leads"})
	})
	if res.Outcome != api.OutcomeDenied || !strings.Contains(res.Reason, `now needs approval by "leads"`) {
		t.Fatalf("approved by ops, then policy wants leads: %+v; want it refused", res)
	}
	for key, want := range map[string]int{"unchanged": 1, "revoked": 0, "regrouped": 0} {
		if n := sideEffects(t, effects, "put", key); n != want {
			t.Errorf("put %s ran %d times, want %d", key, n, want)
		}
	}

	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, run.GetRunID(), "approval_recheck_v1")
}
