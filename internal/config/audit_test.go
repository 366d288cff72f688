package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
