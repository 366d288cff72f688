package auditstream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func lines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestEvents(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	l.now = func() time.Time { return at }
	args := []byte(`{"path":"/srv/secret-plan.md","content":"launch codes"}`)
	exp := time.Date(2026, 3, 1, 12, 10, 0, 0, time.UTC)

	l.Decision(Decision{Task: "t1", Call: "c1", Tool: "fs__write", Principal: "alice", Effect: "require_approval", Check: "rule",
		Rule: "writes-need-ops", PolicyVersion: "v1", Group: "ops", Args: args})
	l.Call(Call{Task: "t1", Call: "c1", Tool: "fs__write", Attempt: 2, Result: "error", ErrorType: "NotSent", Duration: 1500 * time.Millisecond, Args: args}, false)
	l.Call(Call{Task: "t1", Call: "undo-c1", Tool: "fs__move", Attempt: 1, Result: "ok", Duration: time.Second}, true)
	l.ApprovalRequested(ApprovalRequest{Request: "t1~c1", Task: "t1", Call: "c1", Tool: "fs__write", Principal: "alice", Group: "ops",
		Quorum: 1, Rule: "writes-need-ops", Digest: "abc", ExpiresAt: exp, Posted: 0, NotifyError: "slack: 500"})
	l.ApprovalDecision(ApprovalDecision{Request: "t1~c1", Approver: "bob", Approve: true, Via: "cli", UpdateID: "cli:t1~c1:bob", State: "approved"})
	l.ApprovalDecision(ApprovalDecision{Request: "t1~c1", Approver: "alice", Approve: true, Via: "web", UpdateID: "web:t1~c1:alice",
		Refused: "alice asked for this call and may not approve it"})
	l.ApprovalClosed(ApprovalOutcome{Request: "t1~c1", Task: "t1", Call: "c1", Tool: "fs__write", Principal: "alice", Outcome: "approved",
		Approvers: []string{"bob"}, Waited: 90 * time.Second})
	l.RollbackFailed(RollbackFailure{Task: "t1", Principal: "alice", Group: "ops", RequestedBy: "operator", Remaining: []string{"c1"}, Tools: []string{"fs__write"}})
	l.AuthFailed(AuthFailure{Status: 401, Reason: "unknown API key", Method: "POST", Path: "/mcp", Remote: "10.0.0.1:5000"})

	ts := "2026-03-01T11:00:00Z"
	hash := ArgsHash(args)
	want := []map[string]any{
		{"audit": true, "ts": ts, "event": "policy_decision", "task": "t1", "call": "c1", "tool": "fs__write", "principal": "alice",
			"effect": "require_approval", "check": "rule", "rule": "writes-need-ops", "policy_version": "v1", "group": "ops", "args_sha256": hash},
		{"audit": true, "ts": ts, "event": "call_executed", "task": "t1", "call": "c1", "tool": "fs__write", "attempt": 2.0,
			"result": "error", "error_type": "NotSent", "duration_seconds": 1.5, "args_sha256": hash},
		{"audit": true, "ts": ts, "event": "compensation_run", "task": "t1", "call": "undo-c1", "tool": "fs__move", "attempt": 1.0,
			"result": "ok", "duration_seconds": 1.0, "args_sha256": ""},
		{"audit": true, "ts": ts, "event": "approval_requested", "task": "t1", "call": "c1", "request": "t1~c1", "tool": "fs__write",
			"principal": "alice", "group": "ops", "quorum": 1.0, "rule": "writes-need-ops", "digest": "abc", "expires_at": "2026-03-01T12:10:00Z",
			"escalation": false, "posted": 0.0, "notify_error": "slack: 500"},
		{"audit": true, "ts": ts, "event": "approval_decided", "task": "t1", "request": "t1~c1", "approver": "bob", "decision": "approve",
			"via": "cli", "update_id": "cli:t1~c1:bob", "state": "approved"},
		{"audit": true, "ts": ts, "event": "approval_refused", "task": "t1", "request": "t1~c1", "approver": "alice", "decision": "approve",
			"via": "web", "update_id": "web:t1~c1:alice", "reason": "alice asked for this call and may not approve it"},
		{"audit": true, "ts": ts, "event": "approval_closed", "task": "t1", "call": "c1", "request": "t1~c1", "tool": "fs__write",
			"principal": "alice", "outcome": "approved", "approvers": []any{"bob"}, "waited_seconds": 90.0},
		{"audit": true, "ts": ts, "event": "rollback_failed", "task": "t1", "principal": "alice", "group": "ops", "requested_by": "operator",
			"remaining": 1.0, "calls": []any{"c1"}, "tools": []any{"fs__write"}},
		{"audit": true, "ts": ts, "event": "auth_failed", "channel": "mcp", "status": 401.0, "principal": "", "reason": "unknown API key", "method": "POST",
			"path": "/mcp", "remote": "10.0.0.1:5000"},
	}
	if diff := cmp.Diff(want, lines(t, buf.Bytes())); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	// Argument values never appear, only their hash.
	for _, secret := range []string{"secret-plan", "launch codes"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("the audit log holds the argument value %q", secret)
		}
	}
}

func TestNilLogWritesNothing(t *testing.T) {
	var l *Log
	l.Decision(Decision{Task: "t"})
	l.Call(Call{Task: "t"}, true)
	l.ApprovalRequested(ApprovalRequest{})
	l.ApprovalDecision(ApprovalDecision{Refused: "x"})
	l.ApprovalClosed(ApprovalOutcome{})
	l.RollbackFailed(RollbackFailure{})
	l.AuthFailed(AuthFailure{})
	(&Log{}).Decision(Decision{Task: "t"}) // the zero value too
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	for _, dest := range []string{Stdout, Stderr} {
		l, c, err := Open(dest, &stdout, &stderr)
		if err != nil {
			t.Fatal(err)
		}
		l.AuthFailed(AuthFailure{Status: 403})
		_ = c.Close()
	}
	if len(lines(t, stdout.Bytes())) != 1 || len(lines(t, stderr.Bytes())) != 1 {
		t.Errorf("stdout %q, stderr %q: want one line each", stdout.String(), stderr.String())
	}
	if l, _, err := Open(Off, &stdout, &stderr); err != nil || l != nil {
		t.Errorf("off: %v %v, want a nil log", l, err)
	}
	if _, _, err := Open("", &stdout, &stderr); err == nil {
		t.Error("empty destination: no error")
	}

	// A file: created with its directory, appended to across opens, and
	// every line whole when written from many goroutines.
	path := filepath.Join(dir, "logs", "audit.jsonl")
	for range 2 {
		l, c, err := Open(path, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() { l.Call(Call{Task: "t", Call: strings.Repeat("c", i*20), Result: "ok"}, false) })
		}
		wg.Wait()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(lines(t, b)); n != 100 {
		t.Errorf("%d lines after two opens of 50 writes, want 100", n)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("audit file mode: %v %v, want 0600", fi.Mode(), err)
	}
	if _, _, err := Open(filepath.Join(path, "under-a-file"), nil, nil); err == nil {
		t.Error("a path under a file: no error")
	}
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("é", maxReason) // two bytes each: the cut falls inside a rune
	got := truncate(long)
	if len(got) > maxReason+len("…") || !strings.HasSuffix(got, "…") || !json.Valid([]byte(`"`+got+`"`)) {
		t.Errorf("truncate: %d bytes, suffix %q", len(got), got[len(got)-3:])
	}
}
