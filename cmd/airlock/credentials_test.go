package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/blob"
	"github.com/airlock-run/airlock/internal/consent/consenttest"
	"github.com/airlock-run/airlock/internal/credstore"
)

// TestCredentialsCommands: `airlock credentials list` shows who, which
// upstream, scopes and times without a token (text and JSON, no key
// needed); `revoke` revokes at the provider's revocation endpoint, deletes,
// audits, and a second revoke says there is nothing; bad arguments and a
// missing or malformed key are usage errors or failures with the fix;
// `key` makes keys that parse, `rekey` re-encrypts after a rotation.
func TestCredentialsCommands(t *testing.T) {
	p := consenttest.Start("airlock", "code-secret", "https://airlock.example.com/oauth/consent/callback")
	t.Cleanup(p.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "airlock.yaml")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "code.yaml"), []byte(`server:
  name: code
  http:
    url: https://code.example.com/mcp
    auth:
      user_oauth:
        authorize_url: `+p.URL+`/authorize
        token_url: `+p.URL+`/token
        revocation_url: `+p.URL+`/revoke
        client_id: airlock
        client_secret_env: CODE_CLIENT_SECRET
        redirect_url: https://airlock.example.com/oauth/consent/callback
        scopes: [repo]
tools:
  whoami:
    side_effects: [read]
    risk: low
    data_access_level: public
`), 0o600))
	must(os.WriteFile(cfg, []byte("manifests: [code.yaml]\ndata_dir: "+filepath.Join(dir, "data")+"\n"), 0o600))
	t.Setenv("CODE_CLIENT_SECRET", "code-secret")

	// The key command's output is a valid key list.
	code, out, stderr := runBounded(t, []string{"credentials", "key"})
	if code != 0 {
		t.Fatalf("key: %d %s", code, stderr)
	}
	line, _, _ := strings.Cut(out, "\n")
	val, ok := strings.CutPrefix(line, credstore.EnvKeys+"=")
	if !ok {
		t.Fatalf("key printed %q", line)
	}
	k1, err := credstore.ParseKeys(val)
	must(err)
	_, out2, _ := runBounded(t, []string{"credentials", "key"})
	if out2 == out {
		t.Fatal("the same key twice")
	}

	// Store two credentials as the consent callback does.
	ctx := context.Background()
	s, err := credstore.Open(ctx, blob.FileURL(filepath.Join(dir, "data", "blobs")), k1)
	must(err)
	defer s.Close()
	now := time.Now()
	must(s.Put(ctx, credstore.Record{Principal: "alice", Upstream: "code", Scopes: []string{"repo"}, Obtained: now, Expiry: now.Add(time.Hour)},
		credstore.Secret{AccessToken: "alice-access-0123456789", RefreshToken: "alice-refresh-0123456789"}))
	must(s.Put(ctx, credstore.Record{Principal: "bob", Upstream: "code", Obtained: now}, credstore.Secret{AccessToken: "bob-access-0123456789"}))

	t.Setenv(credstore.EnvKeys, "")
	code, out, stderr = runBounded(t, []string{"credentials", "list", "--config", cfg})
	if code != 0 || !strings.Contains(out, "PRINCIPAL") || !strings.Contains(out, "alice") || !strings.Contains(out, "bob") || !strings.Contains(out, "repo") {
		t.Fatalf("list: %d\n%s%s", code, out, stderr)
	}
	code, js, _ := runBounded(t, []string{"credentials", "list", "--json", "--config", cfg})
	var recs []credstore.Record
	if code != 0 || json.Unmarshal([]byte(js), &recs) != nil || len(recs) != 2 || !recs[0].Refreshable || recs[1].Refreshable {
		t.Fatalf("list --json: %d %s", code, js)
	}
	for _, o := range []string{out, js} {
		if strings.Contains(o, "0123456789") {
			t.Fatalf("list shows a token:\n%s", o)
		}
	}

	// Revoke.
	for _, args := range [][]string{{"credentials", "revoke", "--config", cfg}, {"credentials", "revoke", "--config", cfg, "alice"}, {"credentials", "revoke", "--config", cfg, "alice", ""}} {
		if code, _, stderr := runBounded(t, args); code != 2 || !strings.Contains(stderr, "PRINCIPAL and UPSTREAM") {
			t.Fatalf("%v: %d %s", args, code, stderr)
		}
	}
	t.Setenv(credstore.EnvKeys, "k1")
	if code, _, stderr := runBounded(t, []string{"credentials", "revoke", "--config", cfg, "alice", "code"}); code != 1 || !strings.Contains(stderr, "is not ID:KEY") {
		t.Fatalf("malformed key: %d %s", code, stderr)
	}
	// Without the key: deleted, but the provider cannot be told; a
	// principal with nothing stored is refused.
	t.Setenv(credstore.EnvKeys, "")
	if code, _, stderr := runBounded(t, []string{"credentials", "revoke", "--config", cfg, "--audit-log", "off", "carol", "code"}); code != 1 || !strings.Contains(stderr, "carol has no stored credential for code") {
		t.Fatalf("carol: %d %s", code, stderr)
	}
	must(s.Put(ctx, credstore.Record{Principal: "erin", Upstream: "code", Obtained: now}, credstore.Secret{AccessToken: "erin-access-0123456789"}))
	if code, out, stderr := runBounded(t, []string{"credentials", "revoke", "--config", cfg, "--audit-log", "off", "erin", "code"}); code != 0 || !strings.Contains(out, "not told: the credential cannot be opened here") {
		t.Fatalf("erin without the key: %d %s %s", code, out, stderr)
	}
	t.Setenv(credstore.EnvKeys, val)
	// Give alice's refresh token a life at the provider to revoke: the
	// stored one is made up, so the provider's count is what shows.
	auditPath := filepath.Join(dir, "audit.jsonl")
	code, out, stderr = runBounded(t, []string{"credentials", "revoke", "--config", cfg, "--audit-log", auditPath, "alice", "code"})
	if code != 0 || !strings.Contains(out, "alice: credential for code deleted; revoked at the provider") {
		t.Fatalf("revoke: %d %s %s", code, out, stderr)
	}
	if _, _, revocations, _ := p.Counts(); revocations != 1 {
		t.Fatalf("the provider was asked %d times", revocations)
	}
	if ok, _ := s.Has(ctx, "alice", "code"); ok {
		t.Fatal("alice's credential is still stored")
	}
	a, _ := os.ReadFile(auditPath)
	if !strings.Contains(string(a), `"event":"credential_revoked","principal":"alice","upstream":"code","via":"cli","by":"`) || strings.Contains(string(a), "0123456789") {
		t.Fatalf("audit: %s", a)
	}
	if code, _, stderr := runBounded(t, []string{"credentials", "revoke", "--config", cfg, "--audit-log", "off", "alice", "code"}); code != 1 || !strings.Contains(stderr, "no stored credential") {
		t.Fatalf("second revoke: %d %s", code, stderr)
	}

	// Rotation: a new key first, rekey, the old one dropped.
	k2 := "k2:" + credstore.NewKey()
	t.Setenv(credstore.EnvKeys, k2+","+val)
	if code, out, stderr := runBounded(t, []string{"credentials", "rekey", "--config", cfg}); code != 0 || !strings.Contains(out, "1 credential(s) re-encrypted under key k2") {
		t.Fatalf("rekey: %d %s %s", code, out, stderr)
	}
	k2only, err := credstore.ParseKeys(k2)
	must(err)
	s2, err := credstore.Open(ctx, blob.FileURL(filepath.Join(dir, "data", "blobs")), k2only)
	must(err)
	defer s2.Close()
	if _, sec, err := s2.Get(ctx, "bob", "code"); err != nil || sec.AccessToken != "bob-access-0123456789" {
		t.Fatalf("bob under k2 alone: %v", err)
	}
	t.Setenv(credstore.EnvKeys, "")
	if code, _, stderr := runBounded(t, []string{"credentials", "rekey", "--config", cfg}); code != 1 || !strings.Contains(stderr, credstore.EnvKeys+" is not set") {
		t.Fatalf("rekey without keys: %d %s", code, stderr)
	}
}
