package approver

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
	"github.com/airlock-run/airlock/internal/redact"
)

func TestRedacted(t *testing.T) {
	r := Redacted(approvertest.Request("task-1", time.Now()))
	if strings.Contains(string(r.Arguments), "s3cret") || !strings.Contains(string(r.Arguments), redact.Mask) {
		t.Errorf("Redacted: %s", r.Arguments)
	}
}

func TestWriteRequestAndList(t *testing.T) {
	now := time.Now()
	r := approvertest.Request("task-1", now)
	r.Votes = []api.Vote{{Approver: "carol", Approve: true, Via: "web", Comment: "ok\x1b[2J\nstate: approved"}}
	var b strings.Builder
	if err := WriteRequest(&b, r, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"task-1~call-1", "counter__append", "alice", "ops", redact.Mask, r.Digest, "carol approved via web", `\u001b`} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cret") || strings.Contains(out, "\x1b") || strings.Contains(out, "\nstate: approved") {
		t.Errorf("show output leaks a secret or a control sequence:\n%s", out)
	}
	b.Reset()
	if err := WriteList(&b, []api.ApprovalRequest{r}, now); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "task-1~call-1") || !strings.Contains(out, "1/1") || !strings.Contains(out, "1h0m") {
		t.Errorf("list:\n%s", out)
	}
}

func TestExpiresIn(t *testing.T) {
	now := time.Now()
	for d, want := range map[time.Duration]string{90 * time.Minute: "1h30m", 90 * time.Second: "1m", 30 * time.Second: "30s", 0: "expired", -time.Hour: "expired"} {
		if got := ExpiresIn(api.ApprovalRequest{ExpiresAt: now.Add(d)}, now); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}

// TestWriteRequestShowsDeliveries (issue 25 §10): approvals show says how
// each channel's delivery stands: a webhook still retried after a 500, one
// delivered late, one that gave up.
func TestWriteRequestShowsDeliveries(t *testing.T) {
	now := time.Now()
	r := approvertest.Request("task-1", now)
	r.Deliveries = []api.Delivery{
		{Notifier: "slack", Group: "ops", State: api.DeliveryDelivered, At: now},
		{Notifier: "webhook:teams", Group: "ops", State: api.DeliveryRetrying, Error: "the bridge answered 500 Internal Server Error", Since: now, At: now},
		{Notifier: "webhook:pager", Group: "ops", State: api.DeliveryFailed, Error: "the bridge refused it: 403 Forbidden", Since: now, At: now},
	}
	var b strings.Builder
	if err := WriteRequest(&b, r, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"delivered to:", "slack (group ops): delivered", "webhook:teams (group ops): retrying since", "answered 500",
		"webhook:pager (group ops): failed", "403 Forbidden"} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
}

// TestWriteRequestShowsActsAs (issue 31): a call that will act as its user
// upstream says so, and when the user's sign-in ends; once it has, that an
// approval now will not make it run.
func TestWriteRequestShowsActsAs(t *testing.T) {
	now := time.Now()
	r := approvertest.Request("task-1", now)
	r.ActsAs, r.ActsUntil = "alice@corp", now.Add(time.Hour)
	var b strings.Builder
	if err := WriteRequest(&b, r, now); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "acts as:") || !strings.Contains(out, "alice@corp upstream") || !strings.Contains(out, "approved after that, the call does not run") {
		t.Errorf("show output:\n%s", out)
	}
	b.Reset()
	if err := WriteRequest(&b, r, now.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "ended: approved now, the call does not run") {
		t.Errorf("show output after the sign-in ended:\n%s", out)
	}
	b.Reset()
	r.ActsHeld = true // offline: true
	if err := WriteRequest(&b, r, now.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "does not run") || !strings.Contains(out, "holds their grant") || !strings.Contains(out, "fresh exchange") {
		t.Errorf("show output of a held grant:\n%s", out)
	}
	b.Reset()
	r.ActsAs = ""
	if err := WriteRequest(&b, r, now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "acts as") {
		t.Errorf("a call that does not act as its user says it does:\n%s", b.String())
	}
}

// An approved request whose call did not run (the user's grant was gone)
// shows its outcome on one line, control characters and line breaks of the
// provider's reason made harmless.
func TestWriteRequestShowsNotRun(t *testing.T) {
	now := time.Now()
	r := approvertest.Request("task-1", now)
	r.State, r.ActsAs, r.ActsHeld = "approved", "dave@corp", true
	r.NotRun = "fs__write did not run: cannot act as dave@corp: the provider refused: user disabled\n\x1b[2Jforged: line"
	var b strings.Builder
	if err := WriteRequest(&b, r, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "outcome:") || !strings.Contains(out, "did not run: cannot act as dave@corp") || !strings.Contains(out, "user disabled") {
		t.Errorf("show output:\n%s", out)
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "\nforged") {
		t.Errorf("the reason's control characters or line break reach the terminal:\n%q", out)
	}
	b.Reset()
	r.NotRun = ""
	if err := WriteRequest(&b, r, now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "outcome:") {
		t.Errorf("a request whose call ran shows an outcome:\n%s", b.String())
	}
}
