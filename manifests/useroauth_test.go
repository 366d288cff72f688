package manifests_test

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/manifests"
)

const userOAuthHead = `server:
  name: code
  http:
    url: https://code.example.com/mcp
`

// TestUserOAuthBlock: server.http.auth.user_oauth loads and expands
// ${VAR}s; each mistake, and each hostile entry (duplicate or
// case-folded keys, an http callback off loopback, a callback on another
// path or with a query, a fragment, control characters, both methods at
// once), is reported at its line with the fix.
func TestUserOAuthBlock(t *testing.T) {
	t.Setenv("PUBLIC", "airlock.example.com")
	m, err := manifests.Parse("m.yaml", []byte(userOAuthHead+`    auth:
      user_oauth:
        authorize_url: https://code.example.com/login/oauth/authorize
        token_url: https://code.example.com/login/oauth/access_token
        revocation_url: https://code.example.com/oauth/revoke
        client_id: airlock
        client_secret_env: CODE_SECRET
        redirect_url: https://${PUBLIC}/oauth/consent/callback
        scopes: [repo, read:user]
`+ccTool))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("valid block: %v", ps)
	}
	s := m.Server.Expand(nil)
	c := s.HTTP.Auth.UserOAuth
	if !s.UsesUserOAuth() || !s.ActsAsUser() || s.ExchangesTokens() || c.RedirectURL != "https://airlock.example.com/oauth/consent/callback" {
		t.Fatalf("expanded %+v", c)
	}
	if c.StartURL() != "https://airlock.example.com/oauth/consent/start" {
		t.Fatalf("start URL %s", c.StartURL())
	}
	if m.Server.HTTP.Auth.UserOAuth.RedirectURL != "https://${PUBLIC}/oauth/consent/callback" {
		t.Fatal("Expand changed the manifest")
	}

	m, err = manifests.Parse("m.yaml", []byte(userOAuthHead+`    headers: {authorization: "Bearer x"}
    auth:
      user_oauth:
        authorize_url: code.example.com/authorize
        token_url: https://code.example.com/token#frag
        client_id: "air lock"
        client_secret_env: "the secret"
        redirect_url: http://airlock.example.com/oauth/consent/callback
        scopes: [repo, "a b", repo]
`+ccTool))
	if err != nil {
		t.Fatal(err)
	}
	got := manifests.Problems(m.Validate()).Error()
	for _, want := range []string{
		`m.yaml:8: server.http.auth.user_oauth.authorize_url: "code.example.com/authorize" is not an http(s) URL`,
		`m.yaml:9: server.http.auth.user_oauth.token_url: "https://code.example.com/token#frag" has a fragment`,
		`m.yaml:10: server.http.auth.user_oauth.client_id: "air lock" is not a client ID`,
		`m.yaml:11: server.http.auth.user_oauth.client_secret_env: "the secret" is not an environment variable name`,
		`m.yaml:12: server.http.auth.user_oauth.redirect_url: "http://airlock.example.com/oauth/consent/callback" is not https`,
		`server.http.auth.user_oauth.scopes[1]: "a b" is not a scope`,
		`server.http.auth.user_oauth.scopes[2]: "repo" is listed twice`,
		`server.http.headers.authorization: sets Authorization, which server.http.auth.user_oauth sets per call`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q; got:\n%s", want, got)
		}
	}

	base := "        authorize_url: https://c.example.com/a\n        token_url: https://c.example.com/t\n        client_id: a\n        client_secret_env: S\n"
	for _, tc := range []struct{ body, want string }{
		{"      user_oauth: {}\n", "server.http.auth.user_oauth.authorize_url: is required"},
		{"      user_oauth:\n" + base, "server.http.auth.user_oauth.redirect_url: is required"},
		{"      user_oauth:\n" + base + "        redirect_url: https://a.example.com/callback\n", "the path must be /oauth/consent/callback"},
		{"      user_oauth:\n" + base + "        redirect_url: https://a.example.com/oauth/consent/callback?x=1\n", "has a query, fragment or user info"},
		{"      user_oauth:\n" + base + "        redirect_url: https://u:p@a.example.com/oauth/consent/callback\n", "has a query, fragment or user info"},
		{"      user_oauth:\n" + base + "        redirect_url: /oauth/consent/callback\n", "is not an absolute URL"},
		{"      user_oauth:\n" + base + "        client_id: b\n        redirect_url: https://a.example.com/oauth/consent/callback\n", "client_id"},
		{"      user_oauth:\n" + base + "        Client_ID: b\n        redirect_url: https://a.example.com/oauth/consent/callback\n", "Client_ID"},
		{"      user_oauth:\n" + base + "        redirect_url: https://a.example.com/oauth/consent/callback\n        refresh_token: x\n", "refresh_token"},
		{"      user_oauth:\n" + base + "        redirect_url: https://a.example.com/oauth/consent/callback\n      token_exchange: {token_url: https://x/t, client_id: a, client_secret_env: S, audience: u}\n", "sets both token_exchange and user_oauth"},
	} {
		m, err := manifests.Parse("m.yaml", []byte(userOAuthHead+"    auth:\n"+tc.body+ccTool))
		if err == nil {
			err = manifests.Problems(m.Validate())
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.body, err, tc.want)
		}
	}
	// http on loopback is allowed (a laptop).
	m, err = manifests.Parse("m.yaml", []byte(userOAuthHead+"    auth:\n      user_oauth:\n"+base+"        redirect_url: http://127.0.0.1:7400/oauth/consent/callback\n"+ccTool))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("loopback http: %v", ps)
	}
}
