package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestApproverCommandAndSlackSecrets: airlock approver's usage and errors,
// and every role refusing to start, naming the variable, when a Slack
// secret it needs is not in the environment.
func TestApproverCommandAndSlackSecrets(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "")
	t.Setenv("TEMPORAL_NAMESPACE", "")
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
	base := `manifests: [m.yaml]
principals:
  - {name: alice, roles: [r], api_key_sha256: [` + strings.Repeat("a", 64) + `], slack_user_id: U1}
roles:
  r: {tools: ["*"]}
approver_groups:
  ops: {members: [alice], slack_channel: C1}
`
	noSlack := write("no-slack.yaml", base)
	httpMode := write("http.yaml", base+"slack: {mode: http, api_url: \"http://127.0.0.1:9/\"}\n")
	socketMode := write("socket.yaml", base+"slack: {mode: socket, app_token_env: MY_APP_TOKEN}\n")
	data := filepath.Join(dir, "data")

	t.Setenv("SLACK_BOT_TOKEN", "")
	t.Setenv("SLACK_SIGNING_SECRET", "")
	t.Setenv("MY_APP_TOKEN", "")
	cases := []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{name: "usage", args: []string{"approver", "-h"}, stderr: []string{"Usage: airlock approver", "Socket Mode", "127.0.0.1:7401"}},
		{name: "listed", args: []string{"help"}, stdout: []string{"airlock approver   [flags]"}},
		{name: "argument", args: []string{"approver", "extra"}, code: 2, stderr: []string{`unexpected argument "extra"`}},
		{name: "no slack block", args: []string{"approver", "--config", noSlack, "--temporal-address", "127.0.0.1:1"}, code: 1,
			stderr: []string{"has no slack block"}},
		{name: "no temporal", args: []string{"approver", "--config", httpMode}, code: 1, stderr: []string{"no Temporal address"}},
		{name: "approver without bot token", args: []string{"approver", "--config", httpMode, "--temporal-address", "127.0.0.1:1"}, code: 1,
			stderr: []string{"environment variable SLACK_BOT_TOKEN is not set", "slack.bot_token_env"}},
		{name: "approver without signing secret", env: map[string]string{"SLACK_BOT_TOKEN": "xoxb-1"},
			args: []string{"approver", "--config", httpMode, "--temporal-address", "127.0.0.1:1"}, code: 1,
			stderr: []string{"environment variable SLACK_SIGNING_SECRET is not set"}},
		{name: "socket mode without app token", env: map[string]string{"SLACK_BOT_TOKEN": "xoxb-1"},
			args: []string{"approver", "--config", socketMode, "--temporal-address", "127.0.0.1:1"}, code: 1,
			stderr: []string{"environment variable MY_APP_TOKEN is not set", "slack.app_token_env"}},
		{name: "dev without bot token", args: []string{"dev", "--config", httpMode, "--data-dir", data}, code: 1,
			stderr: []string{"environment variable SLACK_BOT_TOKEN is not set"}},
		{name: "worker without bot token", args: []string{"worker", "--config", httpMode, "--data-dir", data, "--temporal-address", "127.0.0.1:1"}, code: 1,
			stderr: []string{"environment variable SLACK_BOT_TOKEN is not set"}},
		{name: "gateway without signing secret", env: map[string]string{"SLACK_BOT_TOKEN": "xoxb-1"},
			args: []string{"gateway", "--config", httpMode, "--data-dir", data, "--temporal-address", "127.0.0.1:1"}, code: 1,
			stderr: []string{"environment variable SLACK_SIGNING_SECRET is not set"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			code, stdout, stderr := runBounded(t, c.args)
			if code != c.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, stdout, stderr)
			}
			for _, w := range c.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range c.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stdout+stderr, "xoxb-1") {
				t.Error("a secret was printed")
			}
		})
	}
	if _, err := os.Stat(filepath.Join(data, "temporal.db")); !os.IsNotExist(err) {
		t.Errorf("dev started Temporal before finding the secret missing: %v", err)
	}
}
