package workflows

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/airlock-run/airlock/api"
)

// grantSpec is an approval by ops (bob, carol) whose tool allows grants
// of up to 5 calls and 1h, bound to the path argument.
func grantSpec() api.ApprovalSpec {
	s := ops("bob", "carol")
	s.MaxGrant = &api.GrantBound{Calls: 5, Duration: time.Hour}
	s.GrantArgs = []string{"path"}
	return s
}

func pathReq(id, path string) api.CallRequest {
	r := req(id, false)
	r.Arguments = json.RawMessage(`{"path":"` + path + `"}`)
	return r
}

// grantDecide delivers approver's decision on call id at delay d, with
// grant (nil: none); the outcome goes to *res or *rejected.
func (h *approvalHarness) grantDecide(d time.Duration, r api.CallRequest, approver string, approve bool, grant *api.GrantAsk, res *api.DecideResult, rejected *error) {
	dr := api.DecideRequest{RequestID: "task-1~" + r.CallID, Approver: approver, Approve: approve, Via: "test", Grant: grant,
		Digest: api.RequestDigest("task-1", r.CallID, r.Tool, r.Arguments, "pv1")}
	h.decideAt(d, "decide-"+r.CallID+"-"+approver+d.String(), dr, res, rejected)
}

func (h *approvalHarness) revokeAt(d time.Duration, id, by string, res *api.Grant, rejected *error) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateRevokeGrant, "revoke-"+id+d.String(), &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { *rejected = err },
			OnComplete: func(v any, err error) {
				if err == nil {
					*res = v.(api.Grant)
				}
			},
		}, api.RevokeGrantRequest{GrantID: id, By: by, Reason: "enough"})
	}, d)
}

func grantRefused(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == api.ErrTypeGrantRefused
}

// TestGrantCallsArgsAndRevoke: an approval with a grant of 2 calls lets
// the next 2 calls of the tool with the same path run without asking
// (check grant, naming the grant and what is left); a call with another
// path asks; the third matching call asks again; a grant above max_grant
// and a grant on a denial are refused; a revoked grant covers nothing.
func TestGrantCallsArgsAndRevoke(t *testing.T) {
	h := newApprovalHarness(t, grantSpec(), 1)
	calls := map[string]*api.CallResult{}
	at := func(d time.Duration, r api.CallRequest) {
		calls[r.CallID] = &api.CallResult{}
		h.callAt(d, r, calls[r.CallID], nil)
	}
	var tooMany, onDeny, revokeTwice, notTheirs, revokeErr error
	var granted api.DecideResult
	var revoked, none api.Grant

	c1 := pathReq("c1", "/a")
	at(time.Second, c1)
	h.grantDecide(time.Minute, c1, "bob", true, &api.GrantAsk{Calls: 6}, nil, &tooMany)
	h.grantDecide(2*time.Minute, c1, "bob", true, &api.GrantAsk{Calls: 2}, &granted, nil)
	at(3*time.Minute, pathReq("c2", "/a"))
	c3 := pathReq("c3", "/b") // another path: asks
	at(4*time.Minute, c3)
	h.grantDecide(5*time.Minute, c3, "carol", false, &api.GrantAsk{Calls: 1}, nil, &onDeny)
	h.grantDecide(6*time.Minute, c3, "carol", false, nil, nil, nil)
	at(7*time.Minute, pathReq("c4", "/a"))
	c5 := pathReq("c5", "/a") // the grant is used up: asks
	at(8*time.Minute, c5)
	h.grantDecide(9*time.Minute, c5, "bob", true, &api.GrantAsk{Calls: 3}, nil, nil)
	h.revokeAt(9*time.Minute+30*time.Second, api.GrantIDOf("task-1", "c5"), "olivia", &none, &notTheirs)
	h.revokeAt(10*time.Minute, api.GrantIDOf("task-1", "c5"), "carol", &revoked, &revokeErr)
	h.revokeAt(11*time.Minute, api.GrantIDOf("task-1", "c5"), "alice", &none, &revokeTwice)
	c6 := pathReq("c6", "/a") // revoked: asks
	at(12*time.Minute, c6)
	h.grantDecide(13*time.Minute, c6, "bob", false, nil, nil, nil)
	var st api.Status
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(api.QueryStatus)
		if err == nil {
			err = v.Get(&st)
		}
		if err != nil {
			t.Errorf("status: %v", err)
		}
	}, 14*time.Minute)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())

	if !grantRefused(tooMany) || !strings.Contains(tooMany.Error(), "above fs__read's approval.max_grant") {
		t.Errorf("a grant of 6 calls above max_grant 5: %v, want refused", tooMany)
	}
	if !grantRefused(onDeny) {
		t.Errorf("a grant on a denial: %v, want refused", onDeny)
	}
	if granted.State != api.ApprovalApproved || !strings.Contains(granted.Message, "grant of 2 calls") {
		t.Errorf("decision with grant: %+v", granted)
	}
	want := map[string]struct {
		outcome api.Outcome
		check   string
	}{
		"c1": {api.OutcomeOK, "default"}, "c2": {api.OutcomeOK, api.CheckGrant}, "c3": {api.OutcomeDenied, "default"},
		"c4": {api.OutcomeOK, api.CheckGrant}, "c5": {api.OutcomeOK, "default"}, "c6": {api.OutcomeDenied, "default"},
	}
	for id, w := range want {
		r := calls[id]
		if r.Outcome != w.outcome || r.Decision == nil || r.Decision.Check != w.check {
			t.Errorf("%s: %s %+v, want %s by check %s", id, r.Outcome, r.Decision, w.outcome, w.check)
		}
	}
	g1 := api.GrantIDOf("task-1", "c1")
	if d := calls["c2"].Decision; d == nil || d.Grant != g1 || d.Effect != "allow" || !strings.Contains(d.Reason, "1 of 2 calls left") ||
		!strings.Contains(d.Reason, `path="/a"`) || !strings.Contains(d.Reason, "bob") {
		t.Errorf("c2 decision %+v", d)
	}
	if d := calls["c4"].Decision; d == nil || !strings.Contains(d.Reason, "0 of 2 calls left") {
		t.Errorf("c4 decision %+v", d)
	}
	if h.tools.calls() != 4 {
		t.Errorf("the tool ran %d times, want 4 (c1, c2, c4, c5)", h.tools.calls())
	}
	if u := h.notes.updates; len(u) == 0 || u[0].RequestID != "task-1~c1" || len(u[0].Votes) != 1 || u[0].Votes[0].Grant != "2 calls" {
		t.Errorf("the closing notice of c1 does not say what bob granted: %+v", u)
	}
	if len(h.notes.posts) != 4 { // c1, c3, c5, c6 asked
		t.Errorf("%d approval requests posted, want 4", len(h.notes.posts))
	}
	if revoked.RevokedBy != "carol" || revoked.Used != 0 || revokeErr != nil || !grantRefused(revokeTwice) {
		t.Errorf("revoke by an approver: %+v %v, again (by the principal): %v", revoked, revokeErr, revokeTwice)
	}
	if !grantRefused(notTheirs) || !strings.Contains(notTheirs.Error(), "olivia may not revoke") {
		t.Errorf("revoke by someone outside the group: %v", notTheirs)
	}
	if len(st.Grants) != 2 || st.Grants[0].ID != g1 || st.Grants[0].Used != 2 || st.Grants[0].State(time.Time{}) != "used" ||
		st.Grants[1].State(time.Time{}) != "revoked" || st.Grants[0].Args[0] != (api.GrantArg{Path: "path", Value: `"/a"`}) {
		t.Errorf("status grants %+v", st.Grants)
	}
}

// TestGrantExpires: a grant for 30 minutes covers a call 10 minutes later
// and not one 40 minutes later (workflow time, skipped by the test
// environment).
func TestGrantExpires(t *testing.T) {
	spec := grantSpec()
	spec.GrantArgs = nil // any arguments
	h := newApprovalHarness(t, spec, 1)
	var r1, r2, r3 api.CallResult
	c1 := pathReq("c1", "/a")
	h.callAt(time.Second, c1, &r1, nil)
	h.grantDecide(time.Minute, c1, "bob", true, &api.GrantAsk{For: 30 * time.Minute}, nil, nil)
	h.callAt(10*time.Minute, pathReq("c2", "/other"), &r2, nil)
	c3 := pathReq("c3", "/a")
	h.callAt(40*time.Minute, c3, &r3, nil)
	h.grantDecide(41*time.Minute, c3, "bob", false, nil, nil, nil)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	if r2.Outcome != api.OutcomeOK || r2.Decision.Check != api.CheckGrant || !strings.Contains(r2.Decision.Reason, "4 of 5 calls left") {
		t.Errorf("c2 within the grant: %s %+v", r2.Outcome, r2.Decision)
	}
	if r3.Outcome != api.OutcomeDenied || r3.Decision.Check == api.CheckGrant {
		t.Errorf("c3 after the grant expired: %s %+v, want asked and denied", r3.Outcome, r3.Decision)
	}
}

// TestGrantNeverCoversDeny: a grant only replaces require_approval; a
// call policy denies outright stays denied.
func TestGrantNeverCoversDeny(t *testing.T) {
	h := newApprovalHarness(t, grantSpec(), 1)
	var r2 api.CallResult
	c1 := pathReq("c1", "/a")
	h.callAt(time.Second, c1, nil, nil)
	h.grantDecide(time.Minute, c1, "bob", true, &api.GrantAsk{Calls: 5}, nil, nil)
	h.env.RegisterDelayedCallback(func() {
		h.policy.mu.Lock()
		defer h.policy.mu.Unlock()
		h.policy.decide = func(api.DecideInput) (api.Verdict, error) {
			return api.Verdict{Effect: api.Deny, Check: api.CheckDefault, Reason: "frozen", Version: "pv2"}, nil
		}
	}, 2*time.Minute)
	h.callAt(3*time.Minute, pathReq("c2", "/a"), &r2, nil)
	h.finishAt(time.Hour)
	h.run(baseInput())
	if r2.Outcome != api.OutcomeDenied || r2.Decision.Check == api.CheckGrant {
		t.Errorf("c2 denied by policy: %s %+v", r2.Outcome, r2.Decision)
	}
}

// TestGrantQuorumAndNoGrant: with a quorum of 2 the grant is what both
// approvals granted (the fewer calls); an approval without a grant
// grants nothing, and a tool without max_grant refuses grants.
func TestGrantQuorumAndNoGrant(t *testing.T) {
	h := newApprovalHarness(t, grantSpec(), 2)
	res := map[string]*api.CallResult{}
	for i, id := range []string{"c1", "c2", "c3", "c4"} {
		res[id] = &api.CallResult{}
		h.callAt(time.Duration(i*10+1)*time.Minute, pathReq(id, "/a"), res[id], nil)
	}
	c1 := pathReq("c1", "/a")
	h.grantDecide(2*time.Minute, c1, "bob", true, &api.GrantAsk{Calls: 4}, nil, nil)
	h.grantDecide(3*time.Minute, c1, "carol", true, &api.GrantAsk{Calls: 1}, nil, nil)
	// c2 runs by the grant (1 call); c3 asks: bob grants, carol does not.
	c3 := pathReq("c3", "/a")
	h.grantDecide(22*time.Minute, c3, "bob", true, &api.GrantAsk{Calls: 4}, nil, nil)
	h.grantDecide(23*time.Minute, c3, "carol", true, nil, nil, nil)
	// c4 asks again: nobody granted it.
	c4 := pathReq("c4", "/a")
	h.grantDecide(32*time.Minute, c4, "bob", false, nil, nil, nil)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	for id, check := range map[string]string{"c1": "default", "c2": api.CheckGrant, "c3": "default", "c4": "default"} {
		if d := res[id].Decision; d == nil || d.Check != check {
			t.Errorf("%s: %+v, want check %s", id, d, check)
		}
	}
	if res["c4"].Outcome != api.OutcomeDenied || !strings.Contains(res["c2"].Decision.Reason, "bob, carol") {
		t.Errorf("c4 %+v c2 %+v", res["c4"], res["c2"].Decision)
	}

	// No max_grant: once only.
	spec := ops("bob")
	h2 := newApprovalHarness(t, spec, 1)
	var refused error
	c := pathReq("c1", "/a")
	h2.callAt(time.Second, c, nil, nil)
	h2.grantDecide(time.Minute, c, "bob", true, &api.GrantAsk{Calls: 1}, nil, &refused)
	h2.grantDecide(2*time.Minute, c, "bob", false, nil, nil, nil)
	h2.finishAt(time.Hour)
	h2.run(baseInput())
	if !grantRefused(refused) || !strings.Contains(refused.Error(), "allows no grant") {
		t.Errorf("grant without max_grant: %v", refused)
	}
}

// TestGrantCarriedThroughContinueAsNew: a task continues as new with its
// grant, and the next run's calls use what is left of it.
func TestGrantCarriedThroughContinueAsNew(t *testing.T) {
	h := newApprovalHarness(t, grantSpec(), 1)
	in := baseInput()
	in.Limits.ContinueAsNewAfter = 2
	c1 := pathReq("c1", "/a")
	h.callAt(time.Second, c1, nil, nil)
	h.grantDecide(time.Minute, c1, "bob", true, &api.GrantAsk{Calls: 3}, nil, nil)
	h.callAt(2*time.Minute, pathReq("c2", "/a"), nil, nil)
	next := h.continued(in)
	if next.Carried == nil || len(next.Carried.Grants) != 1 || next.Carried.Grants[0].Used != 1 {
		t.Fatalf("carried grants %+v", next.Carried)
	}
	h2 := newApprovalHarness(t, grantSpec(), 1)
	var r3, r4 api.CallResult
	h2.callAt(time.Minute, pathReq("c3", "/a"), &r3, nil)
	h2.callAt(2*time.Minute, pathReq("c4", "/a"), &r4, nil)
	c5 := pathReq("c5", "/a")
	var r5 api.CallResult
	h2.callAt(3*time.Minute, c5, &r5, nil)
	h2.grantDecide(4*time.Minute, c5, "bob", false, nil, nil, nil)
	h2.finishAt(time.Hour)
	next.Limits.ContinueAsNewAfter = 100
	h2.run(next)
	if r3.Decision.Check != api.CheckGrant || r4.Decision.Check != api.CheckGrant || r5.Outcome != api.OutcomeDenied {
		t.Errorf("next run: c3 %+v c4 %+v c5 %s", r3.Decision, r4.Decision, r5.Outcome)
	}
}
