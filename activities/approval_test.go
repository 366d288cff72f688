package activities

import (
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

// TestApprovalOutcome: how a closed request ended and when, from the
// notice the workflow sends when it closes (the wait time's end).
func TestApprovalOutcome(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	exp := t0.Add(time.Hour)
	now := t0.Add(2 * time.Hour)
	vote := func(who string, ok bool, after time.Duration) api.NoticeVote {
		return api.NoticeVote{Approver: who, Approve: ok, At: t0.Add(after), Via: "cli"}
	}
	tests := []struct {
		name        string
		n           api.ApprovalNotice
		wantOutcome string
		wantAt      time.Time
	}{
		{"approved by one", api.ApprovalNotice{State: "approved", Quorum: 1, Votes: []api.NoticeVote{vote("bob", true, time.Minute)}}, "approved", t0.Add(time.Minute)},
		{"approved at the quorum's last vote", api.ApprovalNotice{State: "approved", Quorum: 2,
			Votes: []api.NoticeVote{vote("bob", true, time.Minute), vote("carol", true, 5*time.Minute)}}, "approved", t0.Add(5 * time.Minute)},
		{"approved on timeout", api.ApprovalNotice{State: "approved", Quorum: 2, ExpiresAt: exp, Votes: []api.NoticeVote{vote("bob", true, time.Minute)}}, "approved", exp},
		{"denied at the deny vote", api.ApprovalNotice{State: "denied", Quorum: 2,
			Votes: []api.NoticeVote{vote("bob", true, time.Minute), vote("carol", false, 3*time.Minute)}}, "denied", t0.Add(3 * time.Minute)},
		{"expired", api.ApprovalNotice{State: "expired", ExpiresAt: exp}, "expired", exp},
		{"cancelled while waiting", api.ApprovalNotice{State: "denied", ExpiresAt: exp}, "canceled", now},
	}
	for _, tc := range tests {
		outcome, at := approvalOutcome(tc.n, now)
		if outcome != tc.wantOutcome || !at.Equal(tc.wantAt) {
			t.Errorf("%s: %s at %s, want %s at %s", tc.name, outcome, at, tc.wantOutcome, tc.wantAt)
		}
	}
}

// TestRequestedAt: a request started its tool's approval timeout before
// it expires (the default timeout for a tool the worker does not know).
func TestRequestedAt(t *testing.T) {
	exp := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	a := &Activities{}
	if got := a.requestedAt(api.ApprovalNotice{Tool: "x__y", ExpiresAt: exp}); !got.Equal(exp.Add(-DefaultApprovalTimeout)) {
		t.Errorf("requestedAt without a catalog = %s, want %s", got, exp.Add(-DefaultApprovalTimeout))
	}
	// A notice that says when it was requested is believed.
	req := exp.Add(-17 * time.Minute)
	if got := a.requestedAt(api.ApprovalNotice{Tool: "x__y", ExpiresAt: exp, RequestedAt: req}); !got.Equal(req) {
		t.Errorf("requestedAt = %s, want the notice's %s", got, req)
	}
}
