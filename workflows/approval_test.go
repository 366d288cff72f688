package workflows

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
)

// fakeNotifier records the approval notices the workflow sends.
type fakeNotifier struct {
	mu      sync.Mutex
	posts   []api.ApprovalNotice
	updates []api.ApprovalNotice
	failing bool
}

func (f *fakeNotifier) Notify(_ context.Context, n api.ApprovalNotice) ([]api.MessageRef, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.posts = append(f.posts, n)
	if f.failing {
		return nil, activities.ErrNoChannel
	}
	return []api.MessageRef{{Notifier: "fake", Channel: "C-" + n.Group, TS: "1"}}, nil
}

func (f *fakeNotifier) Update(_ context.Context, n api.ApprovalNotice) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, n)
	return nil
}

type approvalHarness struct {
	*harness
	notes *fakeNotifier
}

func newApprovalHarness(t *testing.T, spec api.ApprovalSpec, quorum int) *approvalHarness {
	h := newHarness(t)
	n := &fakeNotifier{}
	h.env.RegisterActivityWithOptions(n.Notify, activity.RegisterOptions{Name: api.NotifyApproversName})
	h.env.RegisterActivityWithOptions(n.Update, activity.RegisterOptions{Name: api.UpdateApprovalName})
	h.policy.decide = func(api.DecideInput) (api.Verdict, error) {
		return api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "ops", Quorum: quorum, Version: "pv1"}, nil
	}
	h.policy.approval = &spec
	return &approvalHarness{harness: h, notes: n}
}

func ops(approvers ...string) api.ApprovalSpec {
	return api.ApprovalSpec{Approvers: approvers, Timeout: time.Hour, OnTimeout: "deny", SideEffects: []string{"write"}, DataLevel: "internal", Risk: "high"}
}

// decideAt sends a decision at delay d; it reports rejection or result.
func (h *approvalHarness) decideAt(d time.Duration, updateID string, dr api.DecideRequest, res *api.DecideResult, rejected *error) {
	h.env.RegisterDelayedCallback(func() {
		if dr.Digest == "" {
			dr.Digest = api.RequestDigest("task-1", "c1", "fs__read", []byte(`{"path":"/a"}`), "pv1")
		}
		h.env.UpdateWorkflow(api.UpdateDecide, updateID, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) {
				if rejected != nil {
					*rejected = err
				}
			},
			OnComplete: func(v any, err error) {
				if err == nil && res != nil {
					*res = v.(api.DecideResult)
				}
			},
		}, dr)
	}, d)
}

func vote(approver string, approve bool) api.DecideRequest {
	return api.DecideRequest{RequestID: "task-1~c1", Approver: approver, Approve: approve, Via: "test"}
}

func TestApprovalApproveRunsOnce(t *testing.T) {
	h := newApprovalHarness(t, ops("bob", "carol"), 1)
	var res api.CallResult
	var dres api.DecideResult
	h.callAt(time.Second, req("c1", false), &res, nil)
	h.decideAt(10*time.Minute, "click-1", vote("bob", true), &dres, nil)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	if res.Outcome != api.OutcomeOK || h.tools.calls() != 1 {
		t.Fatalf("call %+v ran %d times", res, h.tools.calls())
	}
	if dres.State != api.ApprovalApproved {
		t.Fatalf("decide result %+v", dres)
	}
	if len(h.notes.posts) != 1 || h.notes.posts[0].RequestID != "task-1~c1" || h.notes.posts[0].Group != "ops" || h.notes.posts[0].Digest == "" {
		t.Fatalf("posts %+v", h.notes.posts)
	}
	if len(h.notes.updates) != 1 || h.notes.updates[0].State != api.ApprovalApproved || len(h.notes.updates[0].Votes) != 1 ||
		len(h.notes.updates[0].Messages) != 1 {
		t.Fatalf("message updates %+v", h.notes.updates)
	}
}

func TestApprovalDeny(t *testing.T) {
	h := newApprovalHarness(t, ops("bob"), 1)
	var res api.CallResult
	h.callAt(time.Second, req("c1", false), &res, nil)
	h.decideAt(time.Minute, "click-1", api.DecideRequest{RequestID: "task-1~c1", Approver: "bob", Approve: false, Via: "test", Comment: "not in prod"}, nil, nil)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	if res.Outcome != api.OutcomeDenied || !strings.Contains(res.Reason, "bob denied fs__read: not in prod") || h.tools.calls() != 0 {
		t.Fatalf("call %+v ran %d", res, h.tools.calls())
	}
}

// An approved call is judged again before it runs (changeApprovalRecheck):
// policy that now denies it, or wants another group, refuses it after the
// approval; policy that now allows it, or still wants the same group,
// lets it run.
func TestApprovalRecheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		second  api.Verdict
		want    api.Outcome
		inWords string
	}{
		{"unchanged", api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "ops", Quorum: 1, Version: "pv1"}, api.OutcomeOK, ""},
		{"now allowed", api.Verdict{Effect: api.Allow, Check: api.CheckRule, Rule: "ok", Version: "pv2"}, api.OutcomeOK, ""},
		{"now denied", api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "freeze", Reason: "change freeze", Version: "pv2"}, api.OutcomeDenied, "policy pv2 denies it now: change freeze"},
		{"now another group", api.Verdict{Effect: api.RequireApproval, Check: api.CheckRule, Group: "leads", Quorum: 1, Version: "pv2"}, api.OutcomeDenied, `now needs approval by "leads"`},
		{"now a larger quorum", api.Verdict{Effect: api.RequireApproval, Check: api.CheckRule, Group: "ops", Quorum: 2, Version: "pv2"}, api.OutcomeDenied, "quorum 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newApprovalHarness(t, ops("bob"), 1)
			decides := 0
			h.policy.decide = func(api.DecideInput) (api.Verdict, error) {
				decides++
				if decides == 1 {
					return api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "ops", Quorum: 1, Version: "pv1"}, nil
				}
				return tc.second, nil
			}
			var res api.CallResult
			h.callAt(time.Second, req("c1", false), &res, nil)
			h.decideAt(time.Minute, "click-1", vote("bob", true), nil, nil)
			h.finishAt(2 * time.Hour)
			h.run(baseInput())
			if decides != 2 || res.Outcome != tc.want || !strings.Contains(res.Reason, tc.inWords) {
				t.Fatalf("decided %d times, call %+v; want judged twice and %s (%q)", decides, res, tc.want, tc.inWords)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.want == api.OutcomeOK]; h.tools.calls() != want {
				t.Fatalf("the tool ran %d times, want %d", h.tools.calls(), want)
			}
			if res.Outcome == api.OutcomeDenied && (res.Decision == nil || res.Decision.Effect != api.RequireApproval) {
				t.Errorf("a refused approved call's decision %+v; want the approval's", res.Decision)
			}
		})
	}
}

func TestApprovalTimeout(t *testing.T) {
	for _, tc := range []struct {
		onTimeout string
		want      api.Outcome
	}{{"deny", api.OutcomeDenied}, {"approve", api.OutcomeOK}} {
		t.Run(tc.onTimeout, func(t *testing.T) {
			spec := ops("bob")
			spec.OnTimeout = tc.onTimeout
			h := newApprovalHarness(t, spec, 1)
			var res api.CallResult
			h.callAt(time.Second, req("c1", false), &res, nil)
			var late error
			h.decideAt(time.Hour+2*time.Second, "late", vote("bob", true), nil, &late)
			h.finishAt(3 * time.Hour)
			h.run(baseInput())
			if res.Outcome != tc.want {
				t.Fatalf("call %+v", res)
			}
			if tc.want == api.OutcomeDenied && !strings.Contains(res.Reason, "expired") {
				t.Fatalf("reason %q", res.Reason)
			}
			if late == nil || !strings.Contains(late.Error(), "already") {
				t.Fatalf("a click after expiry: %v", late)
			}
		})
	}
}

func TestApprovalEscalation(t *testing.T) {
	spec := ops("bob")
	spec.EscalateAfter, spec.EscalateTo, spec.EscalateApprovers = 15*time.Minute, "leads", []string{"dana"}
	h := newApprovalHarness(t, spec, 1)
	var res api.CallResult
	var early error
	h.callAt(time.Second, req("c1", false), &res, nil)
	h.decideAt(time.Minute, "dana-early", vote("dana", true), nil, &early)
	h.decideAt(20*time.Minute, "dana-late", vote("dana", true), nil, nil)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	if early == nil || !strings.Contains(early.Error(), "not in approver group") {
		t.Fatalf("escalation approver before escalation: %v", early)
	}
	if res.Outcome != api.OutcomeOK {
		t.Fatalf("call %+v", res)
	}
	if len(h.notes.posts) != 2 || !h.notes.posts[1].Escalation || h.notes.posts[1].Group != "leads" {
		t.Fatalf("posts %+v", h.notes.posts)
	}
}

func TestApprovalQuorumAndValidator(t *testing.T) {
	h := newApprovalHarness(t, ops("alice", "bob", "carol", "dave"), 2)
	in := baseInput() // principal alice asks
	var res api.CallResult
	h.callAt(time.Second, req("c1", false), &res, nil)
	rejections := map[string]*error{}
	try := func(at time.Duration, id string, dr api.DecideRequest) {
		var err error
		rejections[id] = &err
		h.decideAt(at, id, dr, nil, &err)
	}
	try(time.Minute, "self", vote("alice", true))
	try(2*time.Minute, "outsider", vote("mallory", true))
	changed := vote("bob", true)
	changed.Digest = api.RequestDigest("task-1", "c1", "fs__read", []byte(`{"path":"/etc/passwd"}`), "pv1")
	try(3*time.Minute, "changed-args", changed)
	try(4*time.Minute, "unknown", api.DecideRequest{RequestID: "task-1~nope", Approver: "bob", Approve: true})
	var first, second api.DecideResult
	h.decideAt(5*time.Minute, "bob-1", vote("bob", true), &first, nil)
	try(6*time.Minute, "bob-again", vote("bob", true))
	h.decideAt(7*time.Minute, "carol-1", vote("carol", true), &second, nil)
	try(8*time.Minute, "after-close", vote("dave", true))
	h.finishAt(2 * time.Hour)
	h.run(in)

	want := map[string]string{"self": "may not approve", "outsider": "not in approver group", "changed-args": "digest mismatch",
		"unknown": "no approval request", "bob-again": "bob already approved", "after-close": "already approved"}
	for id, sub := range want {
		if err := *rejections[id]; err == nil || !strings.Contains(err.Error(), sub) {
			t.Errorf("%s: rejection %v, want %q", id, err, sub)
		}
	}
	if first.State != api.ApprovalPending || first.Approver != "bob" || !first.Approve || second.State != api.ApprovalApproved || res.Outcome != api.OutcomeOK || h.tools.calls() != 1 {
		t.Fatalf("first %+v second %+v call %+v runs %d", first, second, res, h.tools.calls())
	}
	// The query shows the request with both votes.
	if len(h.notes.updates) != 1 || len(h.notes.updates[0].Votes) != 2 {
		t.Fatalf("updates %+v", h.notes.updates)
	}
}

func TestApprovalNotificationFailureDoesNotApprove(t *testing.T) {
	h := newApprovalHarness(t, ops("bob"), 1)
	h.notes.failing = true
	var res api.CallResult
	h.callAt(time.Second, req("c1", false), &res, nil)
	var apps []api.ApprovalRequest
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(api.QueryApprovals)
		if err == nil {
			_ = v.Get(&apps)
		}
	}, 30*time.Minute)
	h.finishAt(2 * time.Hour)
	h.run(baseInput())
	if res.Outcome != api.OutcomeDenied || h.tools.calls() != 0 {
		t.Fatalf("call %+v ran %d", res, h.tools.calls())
	}
	if len(apps) != 1 || apps[0].State != api.ApprovalPending || apps[0].Digest == "" {
		t.Fatalf("pending request not visible: %+v", apps)
	}
}

func TestRequestDigestCanonical(t *testing.T) {
	a := api.RequestDigest("t", "c", "fs__write", []byte(`{"b":1,"a":[1,2]}`), "v")
	b := api.RequestDigest("t", "c", "fs__write", []byte(`{ "a": [1,2], "b": 1 }`), "v")
	c := api.RequestDigest("t", "c", "fs__write", []byte(`{"b":2,"a":[1,2]}`), "v")
	d := api.RequestDigest("t", "c", "fs__write", []byte(`{"b":1,"a":[1,2]}`), "v2")
	if a != b || a == c || a == d {
		t.Fatalf("digests %s %s %s %s", a, b, c, d)
	}
}
