package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/config"
)

// TestSessionKey: the variable wins, else the configured file, else
// <data_dir>/session.key, made once and then reused; short keys and a
// missing configured file are errors naming where the key came from.
func TestSessionKey(t *testing.T) {
	dir := t.TempDir()
	c := &config.Config{File: filepath.Join(dir, "airlock.yaml"), Gateway: config.Gateway{SessionKeyEnv: "AIRLOCK_TEST_SESSION_KEY"}}
	t.Setenv("AIRLOCK_TEST_SESSION_KEY", "")

	data := filepath.Join(dir, "data")
	k1, src, err := c.SessionKey(data)
	if err != nil || len(k1) != 64 || !strings.HasSuffix(src, "(new)") {
		t.Fatalf("first default key: %q from %q, %v; want 64 hex characters, new", k1, src, err)
	}
	if fi, err := os.Stat(filepath.Join(data, "session.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("session.key: %v %v; want mode 0600", fi, err)
	}
	k2, src, err := c.SessionKey(data)
	if err != nil || string(k2) != string(k1) || strings.HasSuffix(src, "(new)") {
		t.Fatalf("second default key: %q from %q, %v; want the first one again", k2, src, err)
	}

	c.Gateway.SessionKeyFile = "shared.key"
	if _, _, err := c.SessionKey(data); err == nil || !strings.Contains(err.Error(), "gateway.session_key_file") {
		t.Fatalf("missing configured file: %v; want an error naming gateway.session_key_file", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shared.key"), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.SessionKey(data); err == nil || !strings.Contains(err.Error(), "fewer than 32") {
		t.Fatalf("short key file: %v; want an error saying it is too short", err)
	}
	shared := strings.Repeat("ab", 20)
	if err := os.WriteFile(filepath.Join(dir, "shared.key"), []byte(shared+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, _, err := c.SessionKey(data); err != nil || string(k) != shared {
		t.Fatalf("configured file (relative to the configuration): %q, %v", k, err)
	}

	t.Setenv("AIRLOCK_TEST_SESSION_KEY", "too-short")
	if _, _, err := c.SessionKey(data); err == nil || !strings.Contains(err.Error(), "AIRLOCK_TEST_SESSION_KEY") {
		t.Fatalf("short variable: %v; want an error naming the variable", err)
	}
	fromEnv := strings.Repeat("k", 40)
	t.Setenv("AIRLOCK_TEST_SESSION_KEY", fromEnv)
	if k, src, err := c.SessionKey(data); err != nil || string(k) != fromEnv || src != "$AIRLOCK_TEST_SESSION_KEY" {
		t.Fatalf("variable: %q from %q, %v; want the variable's key", k, src, err)
	}
}
