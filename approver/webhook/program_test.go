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
