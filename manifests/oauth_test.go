package manifests_test

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/manifests"
)

const ccTool = `tools:
  read:
    side_effects: [read]
    data_access_level: internal
    risk: low
`

// TestClientCredentialsBlock: server.http.oauth loads, expands ${VAR}s,
// and each mistake is reported at its line.
func TestClientCredentialsBlock(t *testing.T) {
	t.Setenv("TICKETS_HOST", "tickets.example.com")
	m, err := manifests.Parse("m.yaml", []byte(`server:
  name: tickets
  http:
    url: https://${TICKETS_HOST}/mcp
    oauth:
      token_url: https://login.example.com/token
      client_id: airlock
      client_secret_env: TICKETS_SECRET
      scopes: [tickets.write]
      resource: https://${TICKETS_HOST}/mcp
`+ccTool))
	if err != nil {
		t.Fatal(err)
	}
	s := m.Server.Expand(nil)
	if o := s.HTTP.OAuth; o == nil || o.Resource != "https://tickets.example.com/mcp" || o.ClientSecretEnv != "TICKETS_SECRET" {
		t.Fatalf("expanded oauth %+v", o)
	}

	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("valid block: %v", ps)
	}
	m, err = manifests.Parse("m.yaml", []byte(`server:
  name: tickets
  http:
    url: https://tickets.example.com/mcp
    headers: {Authorization: "Bearer ${X}"}
    oauth:
      token_url: /token
      client_secret_env: "the secret"
      scopes: ["a b"]
`+ccTool))
	if err != nil {
		t.Fatal(err)
	}
	got := manifests.Problems(m.Validate()).Error()
	for _, want := range []string{
		`m.yaml:7: server.http.oauth.token_url: "/token" is not an http(s) URL`,
		"server.http.oauth.client_id: is required",
		`m.yaml:8: server.http.oauth.client_secret_env: "the secret" is not an environment variable name`,
		`server.http.oauth.scopes[0]: "a b" is not a scope`,
		"server.http.headers.Authorization: sets Authorization, which server.http.oauth sets too",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q; got:\n%s", want, got)
		}
	}
}

// TestTokenExchangeBlock: server.http.auth.token_exchange loads, expands
// ${VAR}s, and each mistake is reported at its line.
func TestTokenExchangeBlock(t *testing.T) {
	t.Setenv("IDP", "login.example.com")
	m, err := manifests.Parse("m.yaml", []byte(`server:
  name: tickets
  http:
    url: https://tickets.example.com/mcp
    auth:
      token_exchange:
        token_url: https://${IDP}/token
        client_id: airlock
        client_secret_env: EXCHANGE_SECRET
        audience: tickets
        scopes: [tickets.write]
        actor: true
        offline: true
`+ccTool))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("valid block: %v", ps)
	}
	s := m.Server.Expand(nil)
	if x := s.HTTP.Auth.TokenExchange; !s.ExchangesTokens() || x.TokenURL != "https://login.example.com/token" || x.Audience != "tickets" || !x.Actor || !x.Offline {
		t.Fatalf("expanded token_exchange %+v", x)
	}
	if m.Server.HTTP.Auth.TokenExchange.TokenURL != "https://${IDP}/token" {
		t.Fatal("Expand changed the manifest it expanded")
	}

	m, err = manifests.Parse("m.yaml", []byte(`server:
  name: tickets
  http:
    url: https://tickets.example.com/mcp
    headers: {Authorization: "Bearer x"}
    auth:
      token_exchange:
        token_url: login.example.com/token
        client_secret_env: "secret value"
        audience: "a b"
        resource: /mcp
        scopes: [""]
`+ccTool))
	if err != nil {
		t.Fatal(err)
	}
	got := manifests.Problems(m.Validate()).Error()
	for _, want := range []string{
		`m.yaml:8: server.http.auth.token_exchange.token_url: "login.example.com/token" is not an http(s) URL`,
		`server.http.auth.token_exchange.client_id: is required`,
		`m.yaml:9: server.http.auth.token_exchange.client_secret_env: "secret value" is not an environment variable name`,
		`m.yaml:10: server.http.auth.token_exchange.audience: "a b" is not an audience`,
		`m.yaml:11: server.http.auth.token_exchange.resource: "/mcp" is not an http(s) URL`,
		`server.http.auth.token_exchange.scopes[0]: "" is not a scope`,
		`server.http.headers.Authorization: sets Authorization, which server.http.auth.token_exchange sets per call`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q; got:\n%s", want, got)
		}
	}

	for _, tc := range []struct{ body, want string }{
		{"    auth: {}\n", "server.http.auth: names no method"},
		{"    auth:\n      token_exchange: {token_url: https://x/t, client_id: a, client_secret_env: S}\n", "server.http.auth.token_exchange: needs audience or resource"},
		{"    auth:\n      token_exchange: {token_url: https://x/t, client_id: a, client_secret_env: S, audience: u, subject_token: x}\n", "subject_token"},
		{"    auth:\n      token_exchange: {token_url: https://x/t, client_id: a, client_secret_env: S, audience: u, offline: maybe}\n", "offline"},
		{"    auth:\n      token_exchange: {token_url: https://x/t, client_id: a, client_secret_env: S, audience: u, offline: true, Offline: false}\n", "Offline"},
	} {
		m, err := manifests.Parse("m.yaml", []byte("server:\n  name: tickets\n  http:\n    url: https://t.example.com/mcp\n"+tc.body+ccTool))
		if err == nil {
			err = manifests.Problems(m.Validate())
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.body, err, tc.want)
		}
	}
}
