package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

// TestAuditShowPrincipalGrantRevocation: bob approves alice's call with a
// grant across her tasks and later revokes it. The revocation happens in
// alice's grants workflow, yet `airlock audit show TASK` of the task that
// made the grant shows it (and --json names the workflow), and the audit
// stream has the grant_revoked line.
func TestAuditShowPrincipalGrantRevocation(t *testing.T) {
	upstream := buildTestupstream(t)
	cfg, _ := approvalsConfig(t, upstream)
	allowGrants(t, cfg, "{calls: 3, duration: 1h, principal: true}")
	ctx, s := approvalsDev(t, cfg, filepath.Join(t.TempDir(), "data"))
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	temporal := []string{"--config", cfg, "--temporal-address", s.srv.HostPort(), "--audit-log", auditPath}
	cs := approvalsSession(t, ctx, s, "alice-key")
	done := appendInBackground(t, ctx, cs, "k1")
	idRE := regexp.MustCompile(`(?m)^(\S+~\S+)\s+\S+\s+counter__append\s+alice\s`)
	id := listedRequest(t, temporal, idRE)
	t.Setenv(envAPIKey, "bob-key")
	if code, stdout, stderr := runCLI(t, append([]string{"approvals", "approve", id, "--grant-for", "1h", "--grant-principal"}, temporal...)...); code != 0 {
		t.Fatalf("approve --grant-principal: %d %s %s", code, stdout, stderr)
	}
	select {
	case r := <-done:
		if r.IsError {
			t.Fatalf("approved call: %s", textOf(r))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the approved call did not finish")
	}
	task, callID, _ := api.SplitRequestID(id)
	grant := api.PrincipalGrantIDOf("alice", task, callID)
	if code, stdout, stderr := runCLI(t, append([]string{"approvals", "revoke", grant, "--reason", "over"}, temporal...)...); code != 0 {
		t.Fatalf("revoke %s: %d %s %s", grant, code, stdout, stderr)
	}
	code, stdout, stderr := runCLI(t, "audit", "show", task, "--temporal-address", s.srv.HostPort())
	want := "grant " + grant + ` revoked by bob ("over") (a grant across the principal's tasks, recorded in grants-alice)`
	if code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("audit show lacks %q: %d %s\n%s", want, code, stderr, stdout)
	}
	code, stdout, _ = runCLI(t, "audit", "show", "--json", task, "--temporal-address", s.srv.HostPort())
	var tl struct {
		Revocations []struct{ Grant, By, Reason, Workflow string }
	}
	if err := json.Unmarshal([]byte(stdout), &tl); err != nil || code != 0 || len(tl.Revocations) != 1 ||
		tl.Revocations[0].Grant != grant || tl.Revocations[0].By != "bob" || tl.Revocations[0].Workflow != "grants-alice" {
		t.Errorf("audit show --json revocations %+v (%v)", tl.Revocations, err)
	}
	if b, _ := os.ReadFile(auditPath); !strings.Contains(string(b), `"event":"grant_revoked","grant":"`+grant+`","by":"bob","via":"cli"}`) {
		t.Errorf("audit stream lacks the revocation:\n%s", b)
	}
}
