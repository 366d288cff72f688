package slack

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/airlock-run/airlock/internal/config"
)

// BotScopes are the bot token scopes airlock uses: chat:write to post,
// update and send ephemeral replies; channels:read, groups:read and
// users:read for `airlock slack check`.
var BotScopes = []string{"chat:write", "channels:read", "groups:read", "users:read"}

// Manifest returns a Slack app manifest (YAML, for "Create an app →
// From a manifest") that makes the app airlock needs. In http mode Slack
// posts clicks to base + the interactions path, which must be https; in
// socket mode there is no request URL, and the app-level token
// (connections:write) must still be made by hand: manifests cannot.
func Manifest(base string, s config.Slack, name string) ([]byte, error) {
	if name == "" {
		name = "airlock approvals"
	}
	if len(name) > 35 {
		return nil, fmt.Errorf("--name %q: Slack app names are at most 35 characters", name)
	}
	path := s.InteractionsPath
	if path == "" {
		path = config.DefaultSlackInteractionsPath
	}
	socket := s.Mode == "socket"
	interactivity := map[string]any{"is_enabled": true}
	if !socket {
		if base == "" {
			return nil, errors.New("--url is required in http mode: the gateway's public https URL, e.g. --url https://airlock.example.com (or use --socket)")
		}
		u, err := url.Parse(base)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("--url %q is not an absolute URL: give the gateway's public URL, e.g. https://airlock.example.com", base)
		}
		if u.Scheme != "https" {
			return nil, fmt.Errorf("--url %q: Slack posts interactions only to https URLs; put the gateway behind TLS, or use --socket (Socket Mode needs no public URL)", base)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("--url %q: give the base URL without a query or fragment", base)
		}
		interactivity["request_url"] = strings.TrimSuffix(u.String(), "/") + path
	}
	m := map[string]any{
		"_metadata":           map[string]any{"major_version": 1, "minor_version": 1},
		"display_information": map[string]any{"name": name, "description": "Approve or deny AI agent tool calls that airlock holds for a person."},
		"features": map[string]any{
			"bot_user": map[string]any{"display_name": "airlock", "always_online": true},
		},
		"oauth_config": map[string]any{"scopes": map[string]any{"bot": BotScopes}},
		"settings": map[string]any{
			"interactivity":          interactivity,
			"org_deploy_enabled":     false,
			"socket_mode_enabled":    socket,
			"token_rotation_enabled": false,
		},
	}
	return yaml.Marshal(m)
}
