package integration

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/manifests"
)

// TestRecordGrantsHistory proves approval grants on the real embedded
// Temporal, worker and upstream, and records the history (grants_v1): bob
// approves put {key: a} with a grant of 3 calls (a grant of 6, above
// max_grant, is refused first); the next calls with key a run without a
// request (check grant), one with key b asks; the task continues as new
// with 1 call left on the grant, which the next run uses; the call after
// asks again; its new grant is revoked (by bob; mallory may not), and the
// next call asks again.
func TestRecordGrantsHistory(t *testing.T) {
	t.Parallel()
	m := grantsManifest(t, "{calls: 5, duration: 1h}")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, groups: map[string][]string{"ops": {"bob"}},
		continueAsNewAfter: 4})
	waitTools(t, s.connect(t, nil), "counter__put")
	ctx := context.Background()
	taskID := "record-grants"
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 20, IdleTimeout: time.Hour, ContinueAsNewAfter: 4})
	pending := func(callID string) api.ApprovalRequest {
		t.Helper()
		var ar api.ApprovalRequest
		waitFor(t, "the request of "+callID, 30*time.Second, func() bool {
			var err error
			ar, err = approver.Lookup(ctx, s.client, api.RequestID(taskID, callID))
			return err == nil && ar.State == api.ApprovalPending
		})
		return ar
	}
	decide := func(ar api.ApprovalRequest, approve bool, grant *api.GrantAsk) error {
		_, err := approver.Deliver(ctx, s.client, "record:"+ar.ID+":"+grant.String(), api.DecideRequest{
			RequestID: ar.ID, Digest: ar.Digest, Approver: "bob", Approve: approve, Via: "cli", Grant: grant})
		return err
	}
	// send runs one call (retrying across continue-as-new); act, when
	// set, decides on its request meanwhile.
	send := func(id, key string, act func(api.ApprovalRequest)) api.CallResult {
		t.Helper()
		done := make(chan struct{})
		if act != nil {
			go func() {
				defer close(done)
				act(pending(id))
			}()
		} else {
			close(done)
		}
		req := api.CallRequest{CallID: id, Tool: "counter__put", Server: "counter", UpstreamTool: "put",
			Arguments: json.RawMessage(`{"key":"` + key + `"}`), Spec: api.SpecFor(m.Tools["put"])}
		var res api.CallResult
		// Between runs the update may race the new run: send it again.
		waitUntil(t, "call "+id+" to be answered", 60*time.Second, func() (err error) {
			res, err = sendCall(ctx, s, taskID, req)
			return err
		})
		<-done
		return res
	}
	check := func(res api.CallResult, outcome api.Outcome, chk string) {
		t.Helper()
		if res.Outcome != outcome || res.Decision == nil || res.Decision.Check != chk {
			t.Fatalf("call %s: %s %+v (%s), want %s by check %s", res.CallID, res.Outcome, res.Decision, res.Reason, outcome, chk)
		}
	}
	noRequest := func(id string) {
		t.Helper()
		if _, err := approver.Lookup(ctx, s.client, api.RequestID(taskID, id)); err == nil {
			t.Errorf("call %s asked for approval; its grant should have allowed it", id)
		}
	}

	var refused error
	check(send("p1", "a", func(ar api.ApprovalRequest) {
		if ar.MaxGrant == nil || ar.MaxGrant.Calls != 5 || len(ar.GrantArgs) != 1 {
			t.Errorf("request carries max_grant %+v grant_args %v", ar.MaxGrant, ar.GrantArgs)
		}
		refused = decide(ar, true, &api.GrantAsk{Calls: 6})
		if err := decide(ar, true, &api.GrantAsk{Calls: 3}); err != nil {
			t.Errorf("approve with a grant of 3: %v", err)
		}
	}), api.OutcomeOK, "default")
	var app *temporal.ApplicationError
	if !errors.As(refused, &app) || app.Type() != api.ErrTypeGrantRefused || !strings.Contains(app.Message(), "at most 5 calls") {
		t.Errorf("a grant of 6 calls above max_grant 5: %v", refused)
	}
	g1 := api.GrantIDOf(taskID, "p1")
	p2 := send("p2", "a", nil)
	check(p2, api.OutcomeOK, api.CheckGrant)
	if p2.Decision.Grant != g1 || !strings.Contains(p2.Decision.Reason, "2 of 3 calls left") {
		t.Errorf("p2 decision %+v", p2.Decision)
	}
	noRequest("p2")
	check(send("p3", "b", func(ar api.ApprovalRequest) { _ = decide(ar, false, nil) }), api.OutcomeDenied, "default")
	check(send("p4", "a", nil), api.OutcomeOK, api.CheckGrant)
	// continue-as-new after 4 calls: the grant (1 call left) goes along.
	p5 := send("p5", "a", nil)
	check(p5, api.OutcomeOK, api.CheckGrant)
	if !strings.Contains(p5.Decision.Reason, "0 of 3 calls left") {
		t.Errorf("p5 decision %+v", p5.Decision)
	}
	check(send("p6", "a", func(ar api.ApprovalRequest) { _ = decide(ar, true, &api.GrantAsk{For: 30 * time.Minute}) }), api.OutcomeOK, "default")
	g6 := api.GrantIDOf(taskID, "p6")
	if _, err := approver.Revoke(ctx, s.client, g6, "someone", "not theirs"); !isRefusal(err) {
		t.Errorf("revoke by someone outside ops: %v, want refused", err)
	}
	if g, err := approver.Revoke(ctx, s.client, g6, "bob", "done for today"); err != nil || g.RevokedBy != "bob" {
		t.Fatalf("revoke: %+v %v", g, err)
	}
	check(send("p7", "a", func(ar api.ApprovalRequest) { _ = decide(ar, false, nil) }), api.OutcomeDenied, "default")

	st := status(t, s, taskID)
	if st.Runs != 2 || len(st.Grants) != 2 || st.Grants[0].State(time.Now()) != "used" || st.Grants[1].State(time.Now()) != "revoked" {
		t.Errorf("status: runs %d grants %+v", st.Runs, st.Grants)
	}
	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, run.GetRunID(), "grants_v1")
}

// grantsManifest is the counter whose put needs ops's approval, which may
// grant within maxGrant for the same key.
func grantsManifest(t *testing.T, maxGrant string) *manifests.Manifest {
	m, _ := counterManifest(t, `  put:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: true
    approval:
      group: ops
      timeout: 1h
      max_grant: `+maxGrant+`
      grant_args: [key]
`)
	return m
}

func isRefusal(err error) bool {
	var ref *approver.Refusal
	return errors.As(err, &ref)
}

// TestRecordPrincipalGrantsHistory proves grants across a principal's
// tasks on the real stack and records the histories (grants_v1_principal:
// the second task; grants_v1_principal_grants: the principal's grants
// workflow): bob approves a call of task A with a grant of 2 calls for the
// principal; a call of task B with the same key runs without asking
// (check grant), one with another key asks; task A uses the last call;
// the next call of task B asks, is approved with a new principal grant,
// which the principal revokes; the next call of task A asks again.
func TestRecordPrincipalGrantsHistory(t *testing.T) {
	t.Parallel()
	m := grantsManifest(t, "{calls: 5, duration: 1h, principal: true}")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, groups: map[string][]string{"ops": {"bob"}}})
	waitTools(t, s.connect(t, nil), "counter__put")
	ctx := context.Background()
	start := func(id string) client.WorkflowRun {
		return startRecorderTask(t, s, id, api.Limits{MaxCalls: 20, IdleTimeout: time.Hour})
	}
	runA, runB := start("record-pgrants-a"), start("record-pgrants-b")
	decide := func(task, callID string, approve bool, grant *api.GrantAsk) {
		var ar api.ApprovalRequest
		waitFor(t, "the request of "+callID, 30*time.Second, func() bool {
			var err error
			ar, err = approver.Lookup(ctx, s.client, api.RequestID(task, callID))
			return err == nil && ar.State == api.ApprovalPending
		})
		if _, err := approver.Deliver(ctx, s.client, "record:"+ar.ID, api.DecideRequest{
			RequestID: ar.ID, Digest: ar.Digest, Approver: "bob", Approve: approve, Via: "cli", Grant: grant}); err != nil {
			t.Errorf("decide %s: %v", callID, err)
		}
	}
	send := func(task, id, key string, act func()) api.CallResult {
		t.Helper()
		if act != nil {
			go act()
		}
		req := api.CallRequest{CallID: id, Tool: "counter__put", Server: "counter", UpstreamTool: "put",
			Arguments: json.RawMessage(`{"key":"` + key + `"}`), Spec: api.SpecFor(m.Tools["put"])}
		res, err := sendCall(ctx, s, task, req)
		if err != nil {
			t.Fatalf("call %s: %v", id, err)
		}
		return res
	}
	check := func(res api.CallResult, outcome api.Outcome, chk string) {
		t.Helper()
		if res.Outcome != outcome || res.Decision == nil || res.Decision.Check != chk {
			t.Fatalf("call %s: %s %+v (%s), want %s by check %s", res.CallID, res.Outcome, res.Decision, res.Reason, outcome, chk)
		}
	}
	a, b := runA.GetID(), runB.GetID()
	check(send(a, "q1", "a", func() { decide(a, "q1", true, &api.GrantAsk{Calls: 2, Principal: true}) }), api.OutcomeOK, "default")
	pg := api.PrincipalGrantIDOf("recorder", a, "q1")
	q2 := send(b, "q2", "a", nil)
	check(q2, api.OutcomeOK, api.CheckGrant)
	if q2.Decision.Grant != pg || !strings.Contains(q2.Decision.Reason, "across recorder's tasks") || !strings.Contains(q2.Decision.Reason, "1 of 2 calls left") {
		t.Errorf("q2 decision %+v", q2.Decision)
	}
	check(send(b, "q3", "b", func() { decide(b, "q3", false, nil) }), api.OutcomeDenied, "default")
	check(send(a, "q4", "a", nil), api.OutcomeOK, api.CheckGrant)
	check(send(b, "q5", "a", func() { decide(b, "q5", true, &api.GrantAsk{For: 10 * time.Minute, Principal: true}) }), api.OutcomeOK, "default")
	pg5 := api.PrincipalGrantIDOf("recorder", b, "q5")
	if g, err := approver.Revoke(ctx, s.client, pg5, "recorder", "not needed"); err != nil || g.RevokedBy != "recorder" {
		t.Fatalf("revoke %s: %+v %v", pg5, g, err)
	}
	check(send(a, "q6", "a", func() { decide(a, "q6", false, nil) }), api.OutcomeDenied, "default")

	var grants []api.Grant
	v, err := s.client.QueryWorkflow(ctx, api.PrincipalGrantsID("recorder"), "", api.QueryGrants)
	if err == nil {
		err = v.Get(&grants)
	}
	if err != nil || len(grants) != 2 || grants[0].Used != 2 || grants[1].State(time.Now()) != "revoked" {
		t.Fatalf("principal grants %+v %v", grants, err)
	}
	for _, run := range []client.WorkflowRun{runA, runB} {
		finishTask(t, s, run.GetID())
	}
	// The grants workflow waits for its last grant to expire: end it here
	// so its history is complete.
	pgID := api.PrincipalGrantsID("recorder")
	desc, err := s.client.DescribeWorkflowExecution(ctx, pgID, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.client.TerminateWorkflow(ctx, pgID, "", "recorded"); err != nil {
		t.Fatal(err)
	}
	replayRuns(t, s, b, runB.GetRunID(), "grants_v1_principal")
	replayRuns(t, s, pgID, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "grants_v1_principal_grants")
}
