package slack

import (
	"context"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/airlock-run/airlock/internal/config"
)

func slackCheckConfig(f *slackFake, mode string, groups map[string]*config.ApproverGroup) *config.Config {
	return &config.Config{
		Slack: &config.Slack{APIURL: f.url(), Mode: mode},
		Principals: []config.Principal{
			{Name: "bob", SlackUserID: "U_BOB"}, {Name: "carol", SlackUserID: "U_CAROL"},
			{Name: "erin"}, {Name: "bot", SlackUserID: "U_BOT"}, {Name: "dave", SlackUserID: "U_LEFT"},
			{Name: "frank", SlackUserID: "U_NOBODY"},
		},
		ApproverGroups: groups,
	}
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestSlackCheckAllGood(t *testing.T) {
	f := newSlackFake(t)
	cfg := slackCheckConfig(f, "", map[string]*config.ApproverGroup{
		"ops":   {Members: []string{"bob", "carol"}, SlackChannel: "C_OPS"},
		"local": {Members: []string{"erin"}},
	})
	app := NewApp(cfg, env("SLACK_BOT_TOKEN", "xoxb-1", "SLACK_SIGNING_SECRET", "s"))
	for _, fd := range app.Check(context.Background(), cfg) {
		if !fd.OK {
			t.Errorf("problem in a good setup: %+v", fd)
		}
	}
}

func TestSlackCheckFindsEveryProblem(t *testing.T) {
	f := newSlackFake(t)
	cfg := slackCheckConfig(f, "socket", map[string]*config.ApproverGroup{
		"ops":      {Members: []string{"bob", "erin", "bot", "dave", "frank"}, SlackChannel: "C_OPS"},
		"security": {Members: []string{"carol"}, SlackChannel: "C_OUT"},
		"old":      {Members: []string{"bob"}, SlackChannel: "C_GONE"},
		"typo":     {Members: []string{"carol"}, SlackChannel: "C_TYPO"},
	})
	// Socket Mode without an app-level token.
	app := NewApp(cfg, env("SLACK_BOT_TOKEN", "xoxb-1"))
	var problems []string
	for _, fd := range app.Check(context.Background(), cfg) {
		if !fd.OK {
			if fd.Fix == "" {
				t.Errorf("problem without a fix: %+v", fd)
			}
			problems = append(problems, fd.What+" | "+fd.Fix)
		}
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{
		"SLACK_APP_TOKEN is not set",
		"approver_groups.security.slack_channel C_OUT (#security): the bot is not a member",
		"/invite @airlock in #security",
		"approver_groups.old.slack_channel C_GONE (#old-ops) is archived",
		"approver_groups.typo.slack_channel C_TYPO: channel_not_found",
		"erin is in approver_groups.ops but has no slack_user_id",
		"bot's slack_user_id U_BOT (@somebot) is a bot",
		"dave's slack_user_id U_LEFT (@dave) is deactivated",
		"frank's slack_user_id U_NOBODY: user_not_found",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("check did not report %q; it reported:\n%s", want, all)
		}
	}
	if len(problems) != 8 {
		t.Errorf("%d problems, want 8:\n%s", len(problems), all)
	}
}

func TestSlackCheckBadToken(t *testing.T) {
	f := newSlackFake(t)
	f.fail("auth.test", slackFault{slackErr: "invalid_auth"})
	cfg := slackCheckConfig(f, "", nil)
	got := NewApp(cfg, env("SLACK_BOT_TOKEN", "xoxb-revoked")).Check(context.Background(), cfg)
	if len(got) != 1 || got[0].OK || !strings.Contains(got[0].What, "invalid_auth") || !strings.Contains(got[0].Fix, "SLACK_BOT_TOKEN") {
		t.Fatalf("findings %+v", got)
	}
	got = NewApp(cfg, env()).Check(context.Background(), cfg)
	if len(got) != 1 || got[0].OK || !strings.Contains(got[0].What, "SLACK_BOT_TOKEN is not set") {
		t.Fatalf("no token: %+v", got)
	}
}

func TestSlackManifest(t *testing.T) {
	type manifest struct {
		OAuth struct {
			Scopes struct{ Bot []string } `yaml:"scopes"`
		} `yaml:"oauth_config"`
		Settings struct {
			Interactivity struct {
				Enabled    bool   `yaml:"is_enabled"`
				RequestURL string `yaml:"request_url"`
			} `yaml:"interactivity"`
			Socket bool `yaml:"socket_mode_enabled"`
		} `yaml:"settings"`
		Display struct{ Name string } `yaml:"display_information"`
	}
	parse := func(b []byte) manifest {
		var m manifest
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	b, err := Manifest("https://airlock.example.com/", config.Slack{InteractionsPath: "/hooks/slack"}, "")
	if err != nil {
		t.Fatal(err)
	}
	m := parse(b)
	if m.Settings.Interactivity.RequestURL != "https://airlock.example.com/hooks/slack" || !m.Settings.Interactivity.Enabled || m.Settings.Socket {
		t.Errorf("http manifest: %+v", m.Settings)
	}
	if strings.Join(m.OAuth.Scopes.Bot, " ") != "chat:write channels:read groups:read users:read" || m.Display.Name != "airlock approvals" {
		t.Errorf("scopes %v name %q", m.OAuth.Scopes.Bot, m.Display.Name)
	}
	b, err = Manifest("", config.Slack{Mode: "socket"}, "ops approvals")
	if err != nil {
		t.Fatal(err)
	}
	if m := parse(b); !m.Settings.Socket || m.Settings.Interactivity.RequestURL != "" || !m.Settings.Interactivity.Enabled {
		t.Errorf("socket manifest: %+v", m.Settings)
	}
	for in, want := range map[string]string{
		"":                           "--url is required",
		"http://airlock.example.com": "only to https",
		"airlock.example.com":        "not an absolute URL",
		"https://a.example/?x=1":     "without a query",
	} {
		if _, err := Manifest(in, config.Slack{}, ""); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--url %q: %v, want %q", in, err, want)
		}
	}
}
