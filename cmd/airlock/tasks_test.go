package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/approver"
)

// TestTasksRollbackWithPendingApproval: a rollback of a task whose call
// waits for approval answers at once, naming the request and how to close
// it, instead of waiting for people; --queue leaves it queued and returns;
// tasks withdraw closes the request (the call ends without running), and
// the queued rollback then runs.
func TestTasksRollbackWithPendingApproval(t *testing.T) {
	upstream := buildTestupstream(t)
	cfg, effects := approvalsConfig(t, upstream)
	ctx, s := approvalsDev(t, cfg, t.TempDir())
	temporal := []string{"--temporal-address", s.srv.HostPort()}

	cs := approvalsSession(t, ctx, s, "alice-key")
	done := appendInBackground(t, ctx, cs, "rb-secret")
	id := listedRequest(t, append([]string{"--config", cfg}, temporal...), regexp.MustCompile(`(?m)^(\S+~\S+)\s+\S+\s+counter__append\s+alice\s`))
	task, _ := approver.TaskOf(id)

	// --wait is long: the answer must not come from waiting it out.
	code, stdout, stderr := runCLI(t, append([]string{"tasks", "rollback", "--wait", "10m", task}, temporal...)...)
	for _, want := range []string{"not rolled back", id, "counter__append", "asked by alice", "group ops", "airlock tasks withdraw " + id, "airlock approvals deny " + id, "--queue"} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Fatalf("rollback with a pending approval: exit %d, stderr lacks %q:\n%s%s", code, want, stdout, stderr)
		}
	}

	code, stdout, stderr = runCLI(t, append([]string{"tasks", "rollback", "--queue", task}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, "rollback queued") || !strings.Contains(stdout, id) {
		t.Fatalf("rollback --queue: %d %s %s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(t, append([]string{"tasks", "withdraw", "--reason", "rolling back", id}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, "withdrawn") {
		t.Fatalf("tasks withdraw: %d %s %s", code, stdout, stderr)
	}
	select {
	case res := <-done:
		if !res.IsError {
			t.Fatalf("the withdrawn call succeeded: %+v", res)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the withdrawn call did not end")
	}
	if b, _ := os.ReadFile(effects); strings.Contains(string(b), "rb-secret") {
		t.Fatalf("the withdrawn call ran: %q", b)
	}
	// Nothing pending now: the rollback (the queued one has run; this one
	// finds nothing more) answers.
	code, stdout, stderr = runCLI(t, append([]string{"tasks", "rollback", "--wait", "60s", task}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, "nothing to roll back") {
		t.Fatalf("rollback after the withdrawal: %d %s %s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, append([]string{"tasks", "withdraw", id}, temporal...)...)
	if code != 1 || !strings.Contains(stderr, "no pending approval request") {
		t.Fatalf("withdrawing again: %d %s", code, stderr)
	}
}
