package approver

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
	"github.com/airlock-run/airlock/internal/auditstream"
)

func TestMayDecide(t *testing.T) {
	now := time.Now()
	r := approvertest.Request("task-1", now)
	if err := MayDecide(r, "bob", now); err != nil {
		t.Errorf("bob: %v", err)
	}
	for name, want := range map[string]string{"alice": "asked for this call", "mallory": "not in approver group"} {
		if err := MayDecide(r, name, now); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	if err := MayDecide(r, "bob", now.Add(2*time.Hour)); err == nil {
		t.Error("expired request offered")
	}
	r.Votes = []api.Vote{{Approver: "bob", Approve: true}}
	if err := MayDecide(r, "bob", now); err == nil || !strings.Contains(err.Error(), "already decided") {
		t.Errorf("second vote: %v", err)
	}
}

func TestLocalDecide(t *testing.T) {
	now := time.Now()
	ft := &approvertest.FakeTemporal{Reqs: []api.ApprovalRequest{approvertest.Request("task-1", now), approvertest.Request("task-2", now)}}
	l := Local{Temporal: ft, Namespace: "default"}
	ctx := context.Background()

	// Bound to what bob saw: a wrong prefix is refused before anything is sent.
	_, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: true, Via: "cli", Digest: "ffffffff"})
	var ref *Refusal
	if !errors.As(err, &ref) || !strings.Contains(ref.Reason, "not the ffffffff you decided on") {
		t.Fatalf("wrong digest: %v", err)
	}
	if _, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: true, Via: "cli", Digest: "0123"}); err == nil ||
		!strings.Contains(err.Error(), "at least 8 hex digits") {
		t.Fatalf("short digest: %v", err)
	}
	if n := len(ft.Sent()); n != 0 {
		t.Fatalf("%d updates sent for refused decisions", n)
	}

	res, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: true, Via: "cli", Digest: "0123456789AB", Comment: "fine"})
	if err != nil || res.State != api.ApprovalApproved {
		t.Fatalf("approve: %+v %v", res, err)
	}
	u := ft.Sent()[0]
	d := u.Args[0].(api.DecideRequest)
	if u.UpdateID != "cli:task-1~call-1:bob:approve" || u.WorkflowID != "task-1" || u.UpdateName != api.UpdateDecide ||
		d.Digest != "0123456789abcdef0123456789abcdef" || d.Approver != "bob" || d.Via != "cli" || !d.Approve || d.Comment != "fine" {
		t.Fatalf("update sent: %+v %+v", u, d)
	}

	// The validator's refusal comes back as a Refusal with its words.
	ft.Refuse = func(d api.DecideRequest) error {
		return errors.New(d.Approver + " asked for this call and may not approve it")
	}
	_, err = l.Decide(ctx, Decision{RequestID: "task-2~call-1", Approver: "alice", Approve: true, Via: "cli"})
	if !errors.As(err, &ref) || ref.Reason != "alice asked for this call and may not approve it" || err.Error() != "refused: "+ref.Reason {
		t.Fatalf("refusal: %v", err)
	}

	if _, err := l.Decide(ctx, Decision{RequestID: "task-9~call-1", Approver: "bob", Via: "cli"}); err == nil || !strings.Contains(err.Error(), "no approval request") {
		t.Fatalf("unknown request: %v", err)
	}
	if _, err := l.Decide(ctx, Decision{RequestID: "nonsense", Approver: "bob", Via: "cli"}); err == nil || !strings.Contains(err.Error(), "not an approval request ID") {
		t.Fatalf("malformed ID: %v", err)
	}
}

// TestSecondDecisionRefused: the page open in two tabs, Approve in one and
// then Deny in the other (or approvals deny after approvals approve). The
// deny must be refused and audited as refused, not reported as recorded;
// repeating the approve stays idempotent.
func TestSecondDecisionRefused(t *testing.T) {
	for _, via := range []string{"web", "cli"} {
		t.Run(via, func(t *testing.T) {
			ft := &approvertest.FakeTemporal{Reqs: []api.ApprovalRequest{approvertest.Request("task-1", time.Now())}}
			var audit bytes.Buffer
			l := Local{Temporal: ft, Namespace: "default", Audit: auditstream.New(&audit)}
			ctx := context.Background()
			if _, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: true, Via: via}); err != nil {
				t.Fatalf("approve: %v", err)
			}
			res, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: false, Via: via})
			var ref *Refusal
			if !errors.As(err, &ref) || !strings.Contains(ref.Reason, "already approved") {
				t.Fatalf("deny after approve: %+v %v, want a refusal saying it is already approved", res, err)
			}
			if _, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: true, Via: via}); !errors.As(err, &ref) || !ref.Repeat ||
				!strings.Contains(ref.Reason, "bob already approved") {
				t.Fatalf("approve again: %v, want a repeat saying bob already approved", err)
			}
			if v := ft.Reqs[0].Votes; len(v) != 1 || !v[0].Approve {
				t.Fatalf("votes: %+v", v)
			}
			lines := strings.Split(strings.TrimSpace(audit.String()), "\n")
			if len(lines) != 2 || !strings.Contains(lines[1], "refused") || strings.Contains(lines[1], `"state"`) {
				t.Fatalf("audit: %s", audit.String())
			}
		})
	}
}

// TestRepeatedDecisionRecordedOnce (issue 25 §9): the same decision made
// again (the page submitted twice, the CLI or MCP command run again) is
// reported as already decided, by whom, and writes no second
// approval_decided line (webhook's test of the name covers a replayed
// delivery).
func TestRepeatedDecisionRecordedOnce(t *testing.T) {
	for _, via := range []string{"web", "cli", "mcp"} {
		t.Run(via, func(t *testing.T) {
			ft := &approvertest.FakeTemporal{Reqs: []api.ApprovalRequest{approvertest.Request("task-1", time.Now())}}
			var audit bytes.Buffer
			l := Local{Temporal: ft, Namespace: "default", Audit: auditstream.New(&audit)}
			d := Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: false, Via: via, Comment: "no"}
			if _, err := l.Decide(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			_, err := l.Decide(context.Background(), d)
			var ref *Refusal
			if !errors.As(err, &ref) || !ref.Repeat || !strings.Contains(ref.Reason, "bob already denied") || !strings.Contains(ref.Reason, "via "+via) {
				t.Fatalf("repeat: %v, want already decided", err)
			}
			if n := strings.Count(audit.String(), `"approval_decided"`); n != 1 {
				t.Fatalf("%d approval_decided lines for one vote:\n%s", n, audit.String())
			}
		})
	}
	// Two deliveries of one Update ID that both read the request before
	// either recorded (two replicas, a bridge retrying at once): Temporal
	// answers the second with the first outcome, and the nonce tells it.
	t.Run("race", func(t *testing.T) {
		ft := &approvertest.FakeTemporal{Reqs: []api.ApprovalRequest{approvertest.Request("task-1", time.Now())}}
		d := api.DecideRequest{RequestID: "task-1~call-1", Digest: ft.Reqs[0].Digest, Approver: "bob", Approve: true, Via: "slack"}
		if _, err := Deliver(context.Background(), ft, "slack:1:U1", d); err != nil {
			t.Fatal(err)
		}
		_, err := Deliver(context.Background(), ft, "slack:1:U1", d)
		var rep *RepeatedError
		if !errors.As(err, &rep) || !strings.Contains(err.Error(), "bob already approved") {
			t.Fatalf("second delivery of one Update ID: %v, want a RepeatedError", err)
		}
	})
}

// TestDeliverNoSuchTask: Temporal answers an Update to an ended task and to
// one that never existed alike (NotFound); the person is told which (and
// Slack counts both as the task's answer: slack's test of the name).
func TestDeliverNoSuchTask(t *testing.T) {
	ft := &approvertest.FakeTemporal{Ended: map[string]bool{"task-8": true}}
	ctx := context.Background()
	d := api.DecideRequest{RequestID: "task-9~call-1", Approver: "bob", Approve: true, Via: "slack"}
	_, err := Deliver(ctx, ft, "slack:1:U", d)
	if why := Explain(err); !strings.Contains(why, "no task task-9 exists") {
		t.Errorf("never existed: %q", why)
	}
	d.RequestID = "task-8~call-1"
	_, err = Deliver(ctx, ft, "slack:2:U", d)
	if why := Explain(err); !strings.Contains(why, "its task has ended") {
		t.Errorf("ended: %q", why)
	}
}
