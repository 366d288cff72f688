package activities

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
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

// TestNotRunUpdateIsNotCountedAgain: the second update of an approved
// request whose call did not run (NotRun) rewrites the messages but does
// not audit the request's close again: it closed once, when approved.
func TestNotRunUpdateIsNotCountedAgain(t *testing.T) {
	var audit bytes.Buffer
	a := &Activities{Audit: auditstream.New(&audit)}
	n := api.ApprovalNotice{RequestID: "task-1~c1", TaskID: "task-1", CallID: "c1", Tool: "desk__deploy", Principal: "dave@corp", State: "approved", Quorum: 1,
		Votes: []api.NoticeVote{{Approver: "bob", Approve: true, At: time.Now()}}}
	if err := a.UpdateApprovalMessages(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	closed := strings.Count(audit.String(), "\n")
	if closed != 1 || !strings.Contains(audit.String(), "task-1~c1") {
		t.Fatalf("the closing update audited %d lines: %s", closed, audit.String())
	}
	n.NotRun = "desk__deploy did not run: cannot act as dave@corp"
	if err := a.UpdateApprovalMessages(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(audit.String(), "\n"); got != closed {
		t.Errorf("the not-run update audited the close again:\n%s", audit.String())
	}
}
