package config

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

var channelName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// approvalChannels checks approval_channels.
func (v *validator) approvalChannels(c *Config) {
	seen := map[string]bool{}
	for i, ch := range c.ApprovalChannels {
		at := fmt.Sprintf("approval_channels[%d]", i)
		switch {
		case !channelName.MatchString(ch.Name):
			v.add(at+".name", "%q is not a channel name; use lowercase letters, digits, - and _ (e.g. teams-bridge)", ch.Name)
		case seen[ch.Name]:
			v.add(at+".name", "%q is used by another approval channel; names must be unique", ch.Name)
		}
		seen[ch.Name] = true
		if ch.Kind != ApprovalChannelWebhook {
			v.add(at+".kind", "%q is not a channel kind; use webhook (Slack is configured in the slack block)", ch.Kind)
		}
		u, err := url.Parse(ch.URL)
		switch {
		case strings.TrimSpace(ch.URL) == "":
			v.add(at+".url", "is required; give the URL the bridge receives requests on, e.g. https://bridge.example.com/airlock")
		case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
			v.add(at+".url", "%q is not an absolute http(s) URL, e.g. https://bridge.example.com/airlock", ch.URL)
		case u.Scheme == "http" && !loopbackHost(u.Hostname()):
			v.add(at+".url", "%q: requests carry call arguments, so they go over https (http only to a loopback address)", ch.URL)
		case u.User != nil:
			v.add(at+".url", "%q holds credentials; remove them: requests are authenticated by their signature (secret_env)", ch.URL)
		}
		if !envName.MatchString(ch.SecretEnv) {
			v.add(at+".secret_env", "%q is not an environment variable name; name the variable that holds the shared secret, e.g. AIRLOCK_WEBHOOK_SECRET (the secret never goes in this file)", ch.SecretEnv)
		}
		for j, g := range ch.Groups {
			if c.ApproverGroups[g] == nil {
				v.add(fmt.Sprintf("%s.groups[%d]", at, j), "%q is not one of approver_groups (%s)", g, strings.Join(slices.Sorted(maps.Keys(c.ApproverGroups)), ", "))
			}
		}
	}
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
