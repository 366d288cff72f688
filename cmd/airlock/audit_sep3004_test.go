package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAuditExportSEP3004 runs `airlock dev` in-process: bob approves one of
// alice's calls and denies another; airlock audit export --format sep-3004
// with audit.signing_key_file writes signed SEP-3004 records
// that airlock audit verify --public-key accepts, and refuses once a byte
// is changed, two records are swapped, the last record or the seal is cut,
// or the public key is another.
func TestAuditExportSEP3004(t *testing.T) {
	upstream := buildTestupstream(t)
	cfg, _ := approvalsConfig(t, upstream)
	dir := filepath.Dir(cfg)
	key := filepath.Join(dir, "audit.key")
	if code, stdout, stderr := runCLI(t, "audit", "keygen", "--out", key); code != 0 || !strings.Contains(stdout, "key id sha256:") {
		t.Fatalf("keygen: %d %s %s", code, stdout, stderr)
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the private key %s: %v, mode %v; want 0600", key, err, st.Mode().Perm())
	}
	other := filepath.Join(t.TempDir(), "other.key")
	if code, _, stderr := runCLI(t, "audit", "keygen", "--out", other); code != 0 {
		t.Fatal(stderr)
	}
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("audit:\n  signing_key_file: audit.key\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()

	ctx, s := approvalsDev(t, cfg, filepath.Join(t.TempDir(), "data"))
	temporal := []string{"--config", cfg, "--temporal-address", s.srv.HostPort()}
	cs := approvalsSession(t, ctx, s, "alice-key")
	t.Setenv(envAPIKey, "bob-key")
	for _, tc := range []struct{ key, verb string }{{"secret-approved", "approve"}, {"secret-denied", "deny"}} {
		done := appendInBackground(t, ctx, cs, tc.key)
		id := listedRequest(t, temporal, regexp.MustCompile(`(?m)^(\S+~\S+)\s+\S+\s+counter__append\s+alice\s`))
		if code, stdout, stderr := runCLI(t, append([]string{"approvals", tc.verb, id}, temporal...)...); code != 0 {
			t.Fatalf("%s %s: %d %s %s", tc.verb, id, code, stdout, stderr)
		}
		select {
		case r := <-done:
			if r.IsError != (tc.verb == "deny") {
				t.Fatalf("the %s call: %s", tc.verb, textOf(r))
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("the %s call did not finish", tc.verb)
		}
	}

	out := filepath.Join(t.TempDir(), "audit.sep3004.jsonl")
	code, _, stderr := runCLI(t, append([]string{"audit", "export", "--format", "sep-3004", "--since", "1h", "--out", out}, temporal...)...)
	if code != 0 || !strings.Contains(stderr, "task(s) in SEP-3004 records with a seal, each signed by key sha256:") {
		t.Fatalf("export: %d %s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	ls := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	// Decisions and outcomes in the draft's terms; the redacted key stays
	// masked.
	for _, re := range []string{
		`"event_type":"policy_decision","extensions":\{"airlock":\{[^\n]*"effect":"require_approval"[^\n]*"outcome":"deferred"[^\n]*"principal_id":"alice"[^\n]*"tool_name":"counter__append"`,
		`"event_type":"approval_decided","extensions":\{"airlock":\{"approve":true,"approver":"bob"[^\n]*"outcome":"allowed"`,
		`"event_type":"approval_decided","extensions":\{"airlock":\{"approve":false,"approver":"bob"[^\n]*"outcome":"denied"`,
		`"event_type":"call_finished","extensions":\{"airlock":\{[^\n]*"outcome":"ok"[^\n]*"outcome":"allowed"`,
		`"event_type":"export_sealed"[^\n]*"records":"` + regexp.QuoteMeta(strconv.Itoa(len(ls)-1)) + `"`,
		`"receipt":\{"alg":"Ed25519","key_id":"sha256:[0-9a-f]{64}","signature":"`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("the export has no record matching %s", re)
		}
	}
	if strings.Contains(text, "secret-approved") || strings.Contains(text, "secret-denied") {
		t.Error("the export holds an argument at a redact path")
	}

	code, stdout, stderr := runCLI(t, "audit", "verify", "--public-key", key+".pub", out)
	if code != 0 || !strings.Contains(stdout, "the chain is intact; every record signed by key sha256:") || !strings.Contains(stdout, "the signatures verify") {
		t.Fatalf("verify --public-key: %d %s %s", code, stdout, stderr)
	}
	if code, stdout, _ := runCLI(t, "audit", "verify", out); code != 0 || !strings.Contains(stdout, "signatures NOT checked: give --public-key") {
		t.Errorf("verify without a key: %d %s", code, stdout)
	}

	write := func(ls []string) string {
		p := filepath.Join(t.TempDir(), "tampered.jsonl")
		if err := os.WriteFile(p, []byte(strings.Join(ls, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	n := len(ls)
	changed := append([]string{}, ls...)
	changed[3] = strings.Replace(changed[3], `"principal_id":"alice"`, `"principal_id":"alicf"`, 1)
	swapped := append([]string{}, ls...)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	lastCut := append(append([]string{}, ls[:n-2]...), ls[n-1])
	for _, tc := range []struct {
		name, file, key, stderr string
	}{
		{"a changed byte", write(changed), key + ".pub", "BROKEN at record 4 (event_id "},
		{"a changed byte, unsigned check", write(changed), "", "event_hash mismatch: the record was changed"},
		{"two records swapped", write(swapped), key + ".pub", "BROKEN at record 2 (event_id "},
		{"the last record cut", write(lastCut), key + ".pub", "BROKEN at record " + strconv.Itoa(n-1) + " (event_id export#"},
		{"the seal cut", write(ls[:n-1]), key + ".pub", "BROKEN at record " + strconv.Itoa(n-1) + ": the file ends after record " + strconv.Itoa(n-1) + " without the seal"},
		{"the wrong public key", out, other + ".pub", "BROKEN at record 1 (event_id "},
		{"a private key as the public key", out, key, `--public-key: ` + key + `: a PEM "PRIVATE KEY" block; want "PUBLIC KEY"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"audit", "verify", tc.file}
			if tc.key != "" {
				args = append(args, "--public-key", tc.key)
			}
			code, stdout, stderr := runCLI(t, args...)
			if code != 1 || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d\nstdout: %s\nstderr: %s\nwant exit 1 and %q", code, stdout, stderr, tc.stderr)
			}
		})
	}
	if _, _, stderr := runCLI(t, "audit", "verify", write(swapped), "--public-key", key+".pub"); !strings.Contains(stderr, "previous_hash is not the event_hash of record 1") {
		t.Errorf("swapped: %s", stderr)
	}
	if _, _, stderr := runCLI(t, "audit", "verify", out, "--public-key", other+".pub"); !strings.Contains(stderr, "not by the public key given") {
		t.Errorf("the wrong key: %s", stderr)
	}
	if _, _, stderr := runCLI(t, "audit", "verify", write(changed), "--public-key", key+".pub"); !strings.Contains(stderr, "event_hash mismatch") {
		t.Errorf("changed: %s", stderr)
	}
}
