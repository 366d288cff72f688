package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/config"
)

const slackBase = `manifests: [m.yaml]
principals:
  - {name: alice, roles: [r], slack_user_id: U1}
  - {name: bob, roles: [r], slack_user_id: U2}
roles:
  r: {tools: ["*"]}
approver_groups:
  ops: {members: [alice, bob], slack_channel: C1}
`

func loadSlack(t *testing.T, extra string) (*config.Config, error) {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("fs"))
	snap, err := config.Load(write(t, filepath.Join(dir, "airlock.yaml"), slackBase+extra))
	if err != nil {
		return nil, err
	}
	return snap.Config, nil
}

func TestSlackDefaults(t *testing.T) {
	c, err := loadSlack(t, "slack: {}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := config.Slack{BotTokenEnv: "SLACK_BOT_TOKEN", SigningSecretEnv: "SLACK_SIGNING_SECRET", AppTokenEnv: "SLACK_APP_TOKEN",
		Mode: "http", InteractionsPath: "/slack/interactions"}
	if c.Slack == nil || *c.Slack != want {
		t.Fatalf("slack = %+v, want %+v", c.Slack, want)
	}
	if !c.NotifiesSlack() {
		t.Error("a slack block without approvals.notify should notify Slack")
	}

	c, err = loadSlack(t, "slack: {mode: socket, app_token_env: MY_APP_TOKEN}\napprovals: {notify: [local]}\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Slack.Mode != "socket" || c.Slack.AppTokenEnv != "MY_APP_TOKEN" || c.Slack.BotTokenEnv != "SLACK_BOT_TOKEN" {
		t.Errorf("slack = %+v", c.Slack)
	}
	if c.NotifiesSlack() {
		t.Error("approvals.notify [local] should not notify Slack")
	}

	c, err = loadSlack(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Slack != nil || c.NotifiesSlack() {
		t.Errorf("no slack block: %+v", c.Slack)
	}
}

func TestSlackProblems(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"bad mode", "slack: {mode: websocket}\n", `slack.mode: "websocket" is not a mode`},
		{"token pasted", "slack: {bot_token_env: xoxb-123-456}\n", "slack.bot_token_env: looks like a Slack token itself"},
		{"app token pasted", "slack: {app_token_env: xapp-1-A1}\n", "slack.app_token_env: looks like a Slack token itself"},
		{"bad env name", "slack: {signing_secret_env: \"MY SECRET\"}\n", `slack.signing_secret_env: "MY SECRET" is not an environment variable name`},
		{"relative path", "slack: {interactions_path: slack}\n", `slack.interactions_path: "slack" is not an absolute URL path`},
		{"taken path", "slack: {interactions_path: /mcp}\n", "slack.interactions_path: /mcp is already served"},
		{"api url slash", "slack: {api_url: \"http://127.0.0.1:1/api\"}\n", `slack.api_url: must end with "/"`},
		{"api url scheme", "slack: {api_url: \"ftp://x/\"}\n", `slack.api_url: "ftp://x/" is not an http(s) URL`},
		{"notify slack without block", "approvals: {notify: [slack]}\n", "approvals.notify[0]: is slack, but there is no slack block"},
		{"notify unknown", "slack: {}\napprovals: {notify: [email]}\n", `approvals.notify[0]: "email" is not a notification channel`},
		{"negative inline wait", "approvals: {inline_wait: -1s}\n", "approvals.inline_wait: must not be negative"},
		{"rollback group unknown", "task: {rollback_notify: opz}\n", `task.rollback_notify: "opz" is not one of approver_groups`},
		{"arguments beyond the history", "policy: {max_arg_bytes: 5000000}\n", "policy.max_arg_bytes: 5000000 is more than 1048576"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadSlack(t, c.yaml)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestSlackUserMapsToOnePrincipal(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("fs"))
	_, err := config.Load(write(t, filepath.Join(dir, "airlock.yaml"), `manifests: [m.yaml]
principals:
  - {name: alice, roles: [r], slack_user_id: U1}
  - {name: bob, roles: [r], slack_user_id: U1}
roles:
  r: {tools: ["*"]}
`))
	if err == nil || !strings.Contains(err.Error(), "principals[1].slack_user_id: U1 is also the Slack user of alice") {
		t.Fatalf("error %v", err)
	}
}
