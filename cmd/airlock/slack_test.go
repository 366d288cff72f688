package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSlackManifestCommand(t *testing.T) {
	code, out, errb := runCLI(t, "slack", "manifest", "--url", "https://airlock.example.com", "--config", filepath.Join(t.TempDir(), "none.yaml"))
	if code != 1 || !strings.Contains(errb, "does not exist") {
		t.Errorf("a named config that is missing: %d %q", code, errb)
	}
	code, out, errb = runCLI(t, "slack", "manifest", "--url", "https://airlock.example.com")
	if code != 0 || !strings.Contains(out, "request_url: https://airlock.example.com/slack/interactions") || !strings.Contains(out, "chat:write") {
		t.Errorf("manifest: %d\n%s%s", code, out, errb)
	}
	code, out, _ = runCLI(t, "slack", "manifest", "--socket")
	if code != 0 || !strings.Contains(out, "socket_mode_enabled: true") || strings.Contains(out, "request_url") || !strings.Contains(out, "connections:write") {
		t.Errorf("socket manifest: %d\n%s", code, out)
	}
	if code, _, errb := runCLI(t, "slack", "manifest", "--url", "http://airlock.example.com"); code != 2 || !strings.Contains(errb, "https") {
		t.Errorf("http URL: %d %q", code, errb)
	}
	if code, _, errb := runCLI(t, "slack", "manifest", "--socket", "--url", "https://a.example"); code != 2 || !strings.Contains(errb, "exclude") {
		t.Errorf("--socket with --url: %d %q", code, errb)
	}
}

func TestSlackCheckCommand(t *testing.T) {
	// A Slack Web API that knows the bot and channel but not the user.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		switch strings.TrimPrefix(r.URL.Path, "/") {
		case "auth.test":
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "team": "Example", "user": "airlock", "user_id": "U_AIRLOCK"})
		case "conversations.info":
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": map[string]any{"id": "C_OPS", "name": "ops", "is_member": true}})
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "user_not_found"})
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(filepath.Join(dir, "m.yaml"), []byte("server:\n  name: s\n  stdio:\n    command: \"true\"\ntools:\n  t:\n    side_effects: [read]\n    risk: low\n    data_access_level: public\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(`manifests: [m.yaml]
principals:
  - name: bob
    roles: [agent]
    slack_user_id: U_TYPO
roles:
  agent: {}
approver_groups:
  ops:
    members: [bob]
    slack_channel: C_OPS
slack:
  api_url: `+srv.URL+`/
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLACK_BOT_TOKEN", "xoxb-test")
	t.Setenv("SLACK_SIGNING_SECRET", "secret")
	code, out, errb := runCLI(t, "slack", "check", "--config", cfg)
	if code != 1 || !strings.Contains(out, "ok    bot token") || !strings.Contains(out, "ok    approver_groups.ops.slack_channel C_OPS is #ops") ||
		!strings.Contains(out, "FAIL  bob's slack_user_id U_TYPO: user_not_found") || !strings.Contains(out, "fix: check the member ID") ||
		!strings.Contains(errb, "1 problem(s)") {
		t.Errorf("check: %d\n%s%s", code, out, errb)
	}
}
