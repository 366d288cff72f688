package config

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Defaults of the slack block.
const (
	DefaultSlackBotTokenEnv      = "SLACK_BOT_TOKEN"
	DefaultSlackSigningSecretEnv = "SLACK_SIGNING_SECRET"
	DefaultSlackAppTokenEnv      = "SLACK_APP_TOKEN"
	DefaultSlackMode             = "http"
	DefaultSlackInteractionsPath = "/slack/interactions"
)

// Slack modes.
const (
	SlackModeHTTP   = "http"
	SlackModeSocket = "socket"
)

// Approval notification channels (approvals.notify).
const (
	NotifySlack = "slack"
	NotifyLocal = "local"
)

// NotifiesSlack reports whether approval requests are posted to Slack: a
// slack block is present and approvals.notify, when given, names slack.
func (c *Config) NotifiesSlack() bool {
	if c.Slack == nil {
		return false
	}
	return len(c.Approvals.Notify) == 0 || slices.Contains(c.Approvals.Notify, NotifySlack)
}

// applySlackDefaults fills the slack block's omitted fields.
func applySlackDefaults(c *Config) {
	s := c.Slack
	if s == nil {
		return
	}
	def := func(f *string, v string) {
		if strings.TrimSpace(*f) == "" {
			*f = v
		}
	}
	def(&s.BotTokenEnv, DefaultSlackBotTokenEnv)
	def(&s.SigningSecretEnv, DefaultSlackSigningSecretEnv)
	def(&s.AppTokenEnv, DefaultSlackAppTokenEnv)
	def(&s.Mode, DefaultSlackMode)
	def(&s.InteractionsPath, DefaultSlackInteractionsPath)
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// secretPrefixes are how Slack secrets begin: a value like this in a *_env
// field is the secret itself, pasted where its variable's name belongs.
var secretPrefixes = []string{"xoxb-", "xoxp-", "xapp-", "xoxa-", "xoxe"}

func (c *Config) validateSlack(v *validator) {
	for i, n := range c.Approvals.Notify {
		at := fmt.Sprintf("approvals.notify[%d]", i)
		switch n {
		case NotifySlack:
			if c.Slack == nil {
				v.add(at, "is slack, but there is no slack block; add one (slack: {mode: http}) or notify only local")
			}
		case NotifyLocal:
		default:
			v.add(at, "%q is not a notification channel; use slack or local", n)
		}
	}
	if c.Approvals.InlineWait < 0 {
		v.add("approvals.inline_wait", "must not be negative; omit it for the default")
	}
	seen := map[string]string{}
	for i, p := range c.Principals {
		if p.SlackUserID == "" {
			continue
		}
		if other, dup := seen[p.SlackUserID]; dup {
			v.add(fmt.Sprintf("principals[%d].slack_user_id", i), "%s is also the Slack user of %s; a Slack user must map to one principal", p.SlackUserID, other)
		}
		seen[p.SlackUserID] = p.Name
	}
	s := c.Slack
	if s == nil {
		return
	}
	for _, f := range []struct{ path, val string }{
		{"slack.bot_token_env", s.BotTokenEnv},
		{"slack.signing_secret_env", s.SigningSecretEnv},
		{"slack.app_token_env", s.AppTokenEnv},
	} {
		switch {
		case hasSecretPrefix(f.val):
			v.add(f.path, "looks like a Slack token itself; write the NAME of the environment variable that holds it (e.g. %s), never the secret", defaultEnvFor(f.path))
		case !envName.MatchString(f.val):
			v.add(f.path, "%q is not an environment variable name; use letters, digits and _ (e.g. %s)", f.val, defaultEnvFor(f.path))
		}
	}
	if s.Mode != SlackModeHTTP && s.Mode != SlackModeSocket {
		v.add("slack.mode", "%q is not a mode; use http (Slack posts clicks to interactions_path; needs a public URL) or socket (Socket Mode; needs an app-level token)", s.Mode)
	}
	if !strings.HasPrefix(s.InteractionsPath, "/") || strings.ContainsAny(s.InteractionsPath, " ?#") {
		v.add("slack.interactions_path", "%q is not an absolute URL path; write e.g. %s", s.InteractionsPath, DefaultSlackInteractionsPath)
	} else if s.InteractionsPath == "/mcp" || s.InteractionsPath == "/metrics" || s.InteractionsPath == "/healthz" {
		v.add("slack.interactions_path", "%s is already served by the gateway; use e.g. %s", s.InteractionsPath, DefaultSlackInteractionsPath)
	}
	if s.APIURL != "" {
		u, err := url.Parse(s.APIURL)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			v.add("slack.api_url", "%q is not an http(s) URL; omit it for Slack's own (https://slack.com/api/)", s.APIURL)
		case !strings.HasSuffix(s.APIURL, "/"):
			v.add("slack.api_url", "must end with \"/\" (e.g. %s/)", s.APIURL)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.ApproverGroups)) {
		g := c.ApproverGroups[name]
		if g != nil && g.SlackChannel != "" && strings.TrimSpace(g.SlackChannel) != g.SlackChannel {
			v.add("approver_groups."+name+".slack_channel", "%q has surrounding spaces; write the channel ID, e.g. C0123ABCD", g.SlackChannel)
		}
	}
}

func hasSecretPrefix(s string) bool {
	for _, p := range secretPrefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func defaultEnvFor(path string) string {
	switch path {
	case "slack.signing_secret_env":
		return DefaultSlackSigningSecretEnv
	case "slack.app_token_env":
		return DefaultSlackAppTokenEnv
	}
	return DefaultSlackBotTokenEnv
}
