package config

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/signkey"
)

func TestAuditLog(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("m.yaml", "server:\n  name: echo\n  stdio:\n    command: echo-server\ntools:\n  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")

	tests := []struct {
		name, audit, want string
	}{
		{"default", "", filepath.Join("/var/lib/airlock", "audit.jsonl")},
		{"stdout", "audit: {log: stdout}\n", "stdout"},
		{"stderr", "audit: {log: stderr}\n", "stderr"},
		{"off", "audit: {log: \"off\"}\n", "off"},
		{"relative to the configuration file", "audit: {log: logs/audit.jsonl}\n", filepath.Join(dir, "logs", "audit.jsonl")},
		{"absolute", "audit: {log: /var/log/airlock/audit.jsonl}\n", "/var/log/airlock/audit.jsonl"},
	}
	for i, tc := range tests {
		snap, err := Load(write(filepath.Base(tc.name)+".yaml", "manifests: [m.yaml]\n"+tc.audit))
		if err != nil {
			t.Fatalf("%d %s: %v", i, tc.name, err)
		}
		if got := snap.Config.AuditLog("/var/lib/airlock"); got != tc.want {
			t.Errorf("%s: AuditLog = %s, want %s", tc.name, got, tc.want)
		}
	}
	_, err := Load(write("empty.yaml", "manifests: [m.yaml]\naudit:\n  log: \"\"\n"))
	if err == nil || !strings.Contains(err.Error(), "empty.yaml:3: audit.log: is empty") {
		t.Errorf("empty audit.log: %v, want a problem at empty.yaml:3", err)
	}
	_, err = Load(write("typo.yaml", "manifests: [m.yaml]\naudit:\n  file: x.jsonl\n"))
	if err == nil || !strings.Contains(err.Error(), "typo.yaml:3: audit.file: unknown field") {
		t.Errorf("unknown audit field: %v", err)
	}
}

func TestAuditSigningKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("m.yaml", "server:\n  name: echo\n  stdio:\n    command: echo-server\ntools:\n  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n", 0o600)
	if err := os.Mkdir(filepath.Join(dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	pub, err := signkey.Generate(filepath.Join(dir, "keys", "audit.key"), filepath.Join(dir, "keys", "audit.pub"))
	if err != nil {
		t.Fatal(err)
	}

	snap, err := Load(write("signed.yaml", "manifests: [m.yaml]\naudit:\n  signing_key_file: keys/audit.key\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if k, err := snap.Config.AuditSigningKey(); err != nil || !k.Public().(ed25519.PublicKey).Equal(pub) {
		t.Errorf("AuditSigningKey: %v; want the key in keys/audit.key, relative to the configuration", err)
	}
	snap, err = Load(write("unsigned.yaml", "manifests: [m.yaml]\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if k, err := snap.Config.AuditSigningKey(); k != nil || err != nil {
		t.Errorf("unset: %v %v, want no key", k, err)
	}

	key, _ := os.ReadFile(filepath.Join(dir, "keys", "audit.key"))
	write("open.key", string(key), 0o644)
	write("junk.key", "not a key", 0o600)
	pubPEM, _ := os.ReadFile(filepath.Join(dir, "keys", "audit.pub"))
	write("pub-as.key", string(pubPEM), 0o600)
	for _, tc := range []struct{ name, value, want string }{
		{"empty", `""`, "bad-empty.yaml:3: audit.signing_key_file: is empty"},
		{"missing", "missing.key", "bad-missing.yaml:3: audit.signing_key_file: " + filepath.Join(dir, "missing.key") + " does not exist"},
		{"readable by others", "open.key", "bad-readable.yaml:3: audit.signing_key_file: " + filepath.Join(dir, "open.key") + " is readable by others (mode 0644); a signing key must be private: chmod 600"},
		{"not a key", "junk.key", "audit.signing_key_file: " + filepath.Join(dir, "junk.key") + ": no PEM block"},
		{"public key", "pub-as.key", `want "PRIVATE KEY"`},
	} {
		name := "bad-" + strings.Fields(tc.name)[0] + ".yaml"
		_, err := Load(write(name, "manifests: [m.yaml]\naudit:\n  signing_key_file: "+tc.value+"\n", 0o600))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %q", tc.name, err, tc.want)
		}
	}
}
