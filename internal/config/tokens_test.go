package config_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/config"
)

// TestTokensBlock: a valid principals_from_tokens block loads with its
// defaults; each mistake is reported at its line with the field and a fix.
func TestTokensBlock(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("fs"))
	good := `manifests: [m.yaml]
roles:
  dev: {permissions: ["*"], data_access_level: internal, tools: ["*"]}
principals_from_tokens:
  resource: https://airlock.example.com/mcp
  issuers:
    - issuer: https://login.example.com/realms/corp
  roles:
    - {roles: [dev], when: '"dev" in claims.groups'}
  tool_scopes:
    - {tools: "fs__write_*", scopes: [files:write]}
  jwks_refetch_cooldown: 2m
  max_token_lifetime: 8h
`
	snap, err := config.Load(write(t, filepath.Join(dir, "good.yaml"), good))
	if err != nil {
		t.Fatal(err)
	}
	tk := snap.Config.PrincipalsFromTokens
	if tk == nil || tk.Issuers[0].IssuerName() != "login.example.com" {
		t.Fatalf("tokens block %+v", tk)
	}
	o := tk.OAuthOptions()
	if o.Resource != "https://airlock.example.com/mcp" || o.Issuers[0].Name != "login.example.com" || len(o.Roles) != 1 || o.ToolScopes[0].Scopes[0] != "files:write" || o.JWKSRefetchCooldown != 2*time.Minute || o.MaxTokenLifetime != 8*time.Hour {
		t.Fatalf("options %+v", o)
	}

	bad := `manifests: [m.yaml]
roles:
  dev: {permissions: ["*"], data_access_level: internal, tools: ["*"]}
principals:
  - {name: bob@corp, roles: [dev]}
  - {name: alice@example.com, roles: [dev]}
principals_from_tokens:
  resource: /mcp
  issuers:
    - issuer: login.example.com
      name: corp
    - issuer: https://b.example.com
      name: corp
      introspection: {url: https://b.example.com/introspect, client_id: airlock, client_secret_env: "not a var"}
  roles:
    - {roles: [admin], when: 'claims.groups'}
    - {roles: [dev], when: ''}
  tool_scopes:
    - {tools: "[", scopes: []}
  algorithms: [HS256, none]
  jwks_refetch_cooldown: 10ms
  max_token_lifetime: 10s
`
	_, err = config.Load(write(t, filepath.Join(dir, "bad.yaml"), bad))
	got := strings.Join(problems(t, err), "\n")
	for _, want := range []string{
		"bad.yaml:5: principals[0].name: \"bob@corp\" ends in the name of an issuer",
		// issue 25 (low): beside token principals, @ is theirs.
		"bad.yaml:6: principals[1].name: \"alice@example.com\" has an @, which with principals_from_tokens names a token's principal (sub@issuer); rename the key principal without @, e.g. \"alice.example.com\"",
		"bad.yaml:8: principals_from_tokens.resource: \"/mcp\" is not an absolute URL",
		"bad.yaml:10: principals_from_tokens.issuers[0].issuer: \"login.example.com\" is not an issuer identifier",
		"principals_from_tokens.issuers[1].name: \"corp\" is also the name of issuers[0]",
		"principals_from_tokens.issuers[1].introspection.client_secret_env: \"not a var\" is not an environment variable name",
		"principals_from_tokens.roles[0].roles[0]: role \"admin\" is not defined",
		"principals_from_tokens.roles[0].when:",
		"fix the CEL expression (variables: claims, scopes, issuer)",
		"principals_from_tokens.roles[1].when: is required",
		"principals_from_tokens.tool_scopes[0].tools: \"[\" is not a valid glob",
		"principals_from_tokens.tool_scopes[0].scopes: is empty",
		"principals_from_tokens.algorithms[0]: algorithm \"HS256\" is HMAC",
		"principals_from_tokens.algorithms[1]: algorithm \"none\" accepts unsigned tokens",
		"bad.yaml:21: principals_from_tokens.jwks_refetch_cooldown: must be between 1s and 1h, got 10ms",
		"bad.yaml:22: principals_from_tokens.max_token_lifetime: must be between 1m and 720h, got 10s",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q; got:\n%s", want, got)
		}
	}
}
