package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/approver"
)

// TestCLIFindsTheDevsDataDir: with `airlock dev --data-dir DIR`, a CLI run
// from another directory, with no --audit-log and a configuration that
// names no data_dir, audits its decision into DIR/audit.jsonl (not
// ./.airlock) and audit show links to the Web UI that dev recorded in DIR.
func TestCLIFindsTheDevsDataDir(t *testing.T) {
	upstream := buildTestupstream(t)
	cfg, _ := approvalsConfig(t, upstream)
	dataDir := filepath.Join(t.TempDir(), "data")
	ctx, s := approvalsDev(t, cfg, dataDir)
	elsewhere := t.TempDir()
	t.Chdir(elsewhere)
	temporal := []string{"--config", cfg, "--temporal-address", s.srv.HostPort()}

	cs := approvalsSession(t, ctx, s, "alice-key")
	done := appendInBackground(t, ctx, cs, "dd-secret")
	id := listedRequest(t, temporal, regexp.MustCompile(`(?m)^(\S+~\S+)\s+\S+\s+counter__append\s+alice\s`))

	t.Setenv(envAPIKey, "bob-key")
	code, stdout, stderr := runCLI(t, append([]string{"approvals", "deny", id, "--comment", "no"}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, "(as bob): denied") {
		t.Fatalf("approvals deny: %d %s %s", code, stdout, stderr)
	}
	if res := <-done; !res.IsError {
		t.Fatalf("the denied call succeeded: %+v", res)
	}
	audit, err := os.ReadFile(filepath.Join(dataDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`"event":"approval_decided"[^\n]*"approver":"bob"[^\n]*"via":"cli"`).Match(audit) {
		t.Errorf("the CLI's decision is not in the dev's audit log %s:\n%s", filepath.Join(dataDir, "audit.jsonl"), audit)
	}
	for _, stray := range []string{filepath.Join(elsewhere, ".airlock"), filepath.Join(filepath.Dir(cfg), ".airlock")} {
		if _, err := os.Stat(stray); err == nil {
			t.Errorf("the CLI wrote %s instead of the dev's data dir", stray)
		}
	}

	// The dev recorded no UI (none started here); one that it had would be
	// in DIR/ui.json, found through the same namespace data.
	if err := writeServedUI(dataDir, servedUI{TemporalAddress: s.srv.HostPort(), UIURL: "http://127.0.0.1:9999"}); err != nil {
		t.Fatal(err)
	}
	task, _ := approver.TaskOf(id)
	code, stdout, stderr = runCLI(t, append([]string{"audit", "show", task}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, "http://127.0.0.1:9999/namespaces/") {
		t.Fatalf("audit show: %d %s\n%s", code, stderr, stdout)
	}
}
