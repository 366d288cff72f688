package config_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/config"
)

func loadExternal(t *testing.T, block string) (*config.Snapshot, error) {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("m"))
	return config.Load(write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\n"+block))
}

func TestExternalPolicyDefaults(t *testing.T) {
	snap, err := loadExternal(t, "external_policy:\n  endpoint: http://127.0.0.1:8181\n  tools:\n    \"m__*\": {on_error: allow}\n    m__delete: {on_error: deny}\n")
	if err != nil {
		t.Fatal(err)
	}
	x := snap.Config.ExternalPolicy
	if x.EffectiveTimeout() != 2*time.Second || x.EffectiveAppliesTo() != "not_denied" || x.EffectiveCacheEntries() != 1024 {
		t.Fatalf("defaults: %s %s %d", x.EffectiveTimeout(), x.EffectiveAppliesTo(), x.EffectiveCacheEntries())
	}
	for tool, want := range map[string]string{"m__read": "allow", "m__delete": "deny", "other__read": "deny"} {
		if got := x.OnErrorFor(tool); got != want {
			t.Errorf("OnErrorFor(%s) = %s, want %s (deny wins where globs overlap; default deny)", tool, got, want)
		}
	}
	snap, err = loadExternal(t, "external_policy:\n  endpoint: https://pdp.example.com/authz/\n  on_error: allow\n  cache_entries: 0\n  timeout: 250ms\n  applies_to: all\n")
	if err != nil {
		t.Fatal(err)
	}
	x = snap.Config.ExternalPolicy
	if x.OnErrorFor("m__read") != "allow" || x.EffectiveCacheEntries() != 0 || x.EffectiveTimeout() != 250*time.Millisecond || x.EffectiveAppliesTo() != "all" {
		t.Fatalf("explicit settings not kept: %+v", x)
	}
}

// TestExternalPolicyProblems: hostile and mistaken settings are refused
// at their line, naming the field and the fix.
func TestExternalPolicyProblems(t *testing.T) {
	for _, tc := range []struct{ name, block, want string }{
		{"no endpoint", "external_policy: {timeout: 1s}\n", "external_policy.endpoint: is required"},
		{"not a URL", "external_policy: {endpoint: \"http://[::1\"}\n", "external_policy.endpoint: is not a URL"},
		{"scheme", "external_policy: {endpoint: \"file:///etc/passwd\"}\n", `must be an http or https URL, got scheme "file"`},
		{"no scheme", "external_policy: {endpoint: \"pdp.example.com\"}\n", `must be an http or https URL, got scheme ""`},
		{"no host", "external_policy: {endpoint: \"http://:8181\"}\n", "names no host"},
		{"credentials", "external_policy: {endpoint: \"https://user:pw@pdp.example.com\"}\n", "holds credentials"},
		{"query", "external_policy: {endpoint: \"https://pdp.example.com/?x=1\"}\n", "has a query or fragment"},
		{"fragment", "external_policy: {endpoint: \"https://pdp.example.com/#x\"}\n", "has a query or fragment"},
		{"huge endpoint", "external_policy: {endpoint: \"https://pdp.example.com/" + strings.Repeat("a", 3000) + "\"}\n", "is 3024 bytes, over 2048"},
		{"timeout too long", "external_policy: {endpoint: \"http://pdp\", timeout: 1h}\n", "external_policy.timeout: must be between 0 (the default, 2s) and 5s, got 1h0m0s"},
		{"timeout negative", "external_policy: {endpoint: \"http://pdp\", timeout: -1s}\n", "external_policy.timeout"},
		{"timeout no unit", "external_policy: {endpoint: \"http://pdp\", timeout: 2}\n", "has no unit"},
		{"env name", "external_policy: {endpoint: \"http://pdp\", authorization_env: \"Bearer abc\"}\n", `external_policy.authorization_env: must name an environment variable (letters, digits, _), got "Bearer abc"`},
		{"applies_to", "external_policy: {endpoint: \"http://pdp\", applies_to: denied}\n", `external_policy.applies_to: must be not_denied`},
		{"on_error", "external_policy: {endpoint: \"http://pdp\", on_error: ALLOW}\n", `external_policy.on_error: must be deny (the default: a PDP that cannot answer denies) or allow, got "ALLOW"`},
		{"tool on_error", "external_policy:\n  endpoint: http://pdp\n  tools:\n    m__read: {on_error: maybe}\n", `external_policy.tools.m__read.on_error: must be deny`},
		{"tool on_error missing", "external_policy:\n  endpoint: http://pdp\n  tools:\n    m__read: {}\n", `external_policy.tools.m__read.on_error: is required`},
		{"tool empty", "external_policy:\n  endpoint: http://pdp\n  tools:\n    m__read:\n", `external_policy.tools.m__read: is empty`},
		{"bad glob", "external_policy:\n  endpoint: http://pdp\n  tools:\n    \"m__[\": {on_error: allow}\n", `external_policy.tools.m__[: is not a tool name or glob`},
		{"cache negative", "external_policy: {endpoint: \"http://pdp\", cache_entries: -1}\n", "external_policy.cache_entries: must be between 0 (no cache) and 100000, got -1"},
		{"cache huge", "external_policy: {endpoint: \"http://pdp\", cache_entries: 99999999999}\n", "external_policy.cache_entries: must be between 0 (no cache) and 100000, got 99999999999"},
		{"cache wrong type", "external_policy: {endpoint: \"http://pdp\", cache_entries: lots}\n", "cache_entries"},
		{"unknown field", "external_policy: {endpoint: \"http://pdp\", fail_open: true}\n", "fail_open"},
		{"duplicate key", "external_policy:\n  endpoint: http://pdp\n  on_error: deny\n  on_error: allow\n", "on_error"},
		{"on_deny", "external_policy: {endpoint: \"http://pdp\", on_deny: approve}\n", `external_policy.on_deny: must be deny (the default) or require_approval, got "approve"`},
		{"on_deny without group", "external_policy: {endpoint: \"http://pdp\", on_deny: require_approval}\n", `external_policy.approval_group: is required with on_deny: require_approval`},
		{"on_deny unknown group", "external_policy: {endpoint: \"http://pdp\", on_deny: require_approval, approval_group: nobody}\n", `external_policy.approval_group: names "nobody", which is not one of approver_groups`},
		{"group without on_deny", "external_policy: {endpoint: \"http://pdp\", approval_group: ops}\n", `external_policy.approval_group: is set but on_deny is not require_approval`},
		{"wrong shape", "external_policy: http://pdp\n", "external_policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadExternal(t, tc.block)
			if err == nil {
				t.Fatalf("Load accepted %q", tc.block)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}
