package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
)

// postedRequest posts n through a Notifier to a test bridge and returns
// the event's request object as the bridge decoded it.
func postedRequest(t *testing.T, n api.ApprovalNotice) map[string]any {
	t.Helper()
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
	}))
	t.Cleanup(srv.Close)
	w := NewNotifier(Channel{Name: "bridge", URL: srv.URL, Secret: "s"}, srv.Client())
	if _, err := w.Post(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	var ev struct{ Request map[string]any }
	if err := json.Unmarshal(body, &ev); err != nil || ev.Request == nil {
		t.Fatalf("event %s: %v", body, err)
	}
	return ev.Request
}

func programNotice() api.ApprovalNotice {
	return api.ApprovalNotice{RequestID: "task-2~prog-7/3", TaskID: "task-2", CallID: api.ProgramCallID("prog-7", 3), Tool: "fs__write",
		Principal: "alice", Group: "ops", Quorum: 1, ExpiresAt: time.Now().Add(time.Hour), Program: "prog-7", Line: 12}
}

// TestWebhookProgramCall (issue 27 §5): approval_requested carries program
// and line for a program's call, and neither for a direct call.
func TestWebhookProgramCall(t *testing.T) {
	got := postedRequest(t, programNotice())
	if got["program"] != "prog-7" || got["line"] != float64(12) || got["call"] != "prog-7/3" {
		t.Errorf("program call's request: program %v line %v call %v", got["program"], got["line"], got["call"])
	}
	direct := programNotice()
	direct.CallID, direct.Program, direct.Line = "call-1", "", 0
	got = postedRequest(t, direct)
	if _, ok := got["program"]; ok {
		t.Errorf("direct call's request has program %v", got["program"])
	}
	if _, ok := got["line"]; ok {
		t.Errorf("direct call's request has line %v", got["line"])
	}
}

// TestWebhookHostileProgram: a hostile ID arrives as a JSON string a
// bridge decodes back (markup, newline and all), cut to MaxShownProgram.
func TestWebhookHostileProgram(t *testing.T) {
	n := programNotice()
	n.Program = approvertest.HostileProgram
	got, _ := postedRequest(t, n)["program"].(string)
	want := approver.ShownProgram(approvertest.HostileProgram)
	if got != want || strings.Contains(got, "TAIL") || !strings.Contains(got, "<script>alert(1)</script>") || !strings.Contains(got, "\nstate: approved") {
		t.Errorf("program %d bytes %.120q, want %d bytes", len(got), got, len(want))
	}
}

// TestWebhookActsAsAndNotRun (issue 31 §2): approval_requested says whom a
// token-exchange call acts as, until when, and whether the grant is held;
// once approved, a call that did not run (the user's grant was gone) is a
// second approval_closed with outcome not_run and its own delivery ID.
func TestWebhookActsAsAndNotRun(t *testing.T) {
	n := programNotice()
	until := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	n.ActsAs, n.ActsUntil, n.ActsHeld = "dave@corp", until, true
	got := postedRequest(t, n)
	if got["acts_as"] != "dave@corp" || got["acts_until"] != "2030-01-02T03:04:05Z" || got["acts_held"] != true {
		t.Errorf("approval_requested: acts_as %v until %v held %v", got["acts_as"], got["acts_until"], got["acts_held"])
	}
	if got := postedRequest(t, programNotice()); got["acts_as"] != nil || got["acts_until"] != nil || got["acts_held"] != nil {
		t.Errorf("a call without token exchange carries acts_*: %v", got)
	}

	var deliveries []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Errorf("event %s: %v", b, err)
		}
		deliveries = append(deliveries, ev)
	}))
	t.Cleanup(srv.Close)
	w := NewNotifier(Channel{Name: "bridge", URL: srv.URL, Secret: "s"}, srv.Client())
	n.State, n.Votes = api.ApprovalApproved, []api.NoticeVote{{Approver: "bob", Approve: true}}
	n.Messages = []api.MessageRef{{Notifier: w.Name(), Channel: "bridge", TS: "d1", Group: "ops"}}
	if err := w.Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	n.NotRun = "fs__write did not run: cannot act as dave@corp: the provider refused: user disabled"
	if err := w.Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	if len(deliveries) != 2 {
		t.Fatalf("%d deliveries, want 2", len(deliveries))
	}
	first, second := deliveries[0]["request"].(map[string]any), deliveries[1]["request"].(map[string]any)
	if deliveries[0]["event"] != ApprovalClosed || deliveries[1]["event"] != ApprovalClosed || first["outcome"] != "approved" ||
		second["outcome"] != "not_run" || !strings.Contains(second["not_run"].(string), "user disabled") {
		t.Errorf("the closing events %v, %v; want approved, then not_run", deliveries[0], deliveries[1])
	}
	if deliveries[0]["delivery"] == deliveries[1]["delivery"] {
		t.Errorf("the not_run event repeats the closing event's delivery ID %v: a bridge would drop it", deliveries[0]["delivery"])
	}
}
