package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/airlock-run/airlock/internal/oauth"
	"github.com/airlock-run/airlock/internal/oauth/oauthtest"
)

const resource = "https://airlock.test/mcp"

func newVerifier(t *testing.T, issuers ...*oauthtest.Provider) *oauth.Verifier {
	t.Helper()
	return newVerifierWith(t, nil, issuers...)
}

// newVerifierWith is newVerifier with options changed by edit (nil: none).
func newVerifierWith(t *testing.T, edit func(*oauth.Options), issuers ...*oauthtest.Provider) *oauth.Verifier {
	t.Helper()
	o := oauth.Options{Resource: resource,
		Roles:      []oauth.RoleRule{{Roles: []string{"dev"}, When: `true`}, {Roles: []string{"ops"}, When: `"ops" in claims.?groups.orValue([])`}},
		ToolScopes: []oauth.ToolScope{{Tools: "fs__write_*", Scopes: []string{"files:write"}}}}
	for i, p := range issuers {
		o.Issuers = append(o.Issuers, oauth.Issuer{URL: p.Issuer(), Name: []string{"corp", "other"}[i]})
	}
	if edit != nil {
		edit(&o)
	}
	v, err := oauth.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestProviderTokenAccepted: an access token the provider issued through
// the authorization code flow is accepted, named sub@issuer-name, with its
// roles.
func TestProviderTokenAccepted(t *testing.T) {
	p := oauthtest.Start(t, resource)
	v := newVerifier(t, p)
	user := &mockoidc.MockUser{Subject: "alice", Email: "alice@example.com", Groups: []string{"ops"}}
	tok, err := v.Verify(context.Background(), p.Token(t, user))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Principal != "alice@corp" || tok.Issuer != p.Issuer() || tok.Subject != "alice" || !slices.Equal(tok.Roles, []string{"dev"}) {
		t.Fatalf("token %+v", tok)
	}
	// Roles from claims: a signed token of the provider with groups.
	c := p.Claims("bob")
	c["groups"] = []string{"ops"}
	tok, err = v.Verify(context.Background(), p.Sign(t, c))
	if err != nil || !slices.Equal(tok.Roles, []string{"dev", "ops"}) {
		t.Fatalf("bob: %+v %v", tok, err)
	}
}

// TestRefusals: each way a token can be wrong is refused with 401
// invalid_token and a reason that names it, never containing the token.
func TestRefusals(t *testing.T) {
	p := oauthtest.Start(t, resource)
	other := oauthtest.Start(t, resource)
	v := newVerifier(t, p)
	good := p.Claims("alice")
	with := func(k string, val any) map[string]any {
		c := p.Claims("alice")
		c[k] = val
		return c
	}
	cases := []struct {
		name, token, reason string
	}{
		{"expired", p.Sign(t, with("exp", time.Now().Add(-time.Minute).Unix())), "token expired"},
		{"not yet valid", p.Sign(t, with("nbf", time.Now().Add(time.Hour).Unix())), "not yet valid"},
		{"wrong audience", p.Sign(t, with("aud", []string{"https://elsewhere.test/mcp"})), "wrong audience"},
		{"wrong issuer (unknown)", other.Token(t, nil), "wrong issuer"},
		{"wrong issuer (another provider's key, our iss)", other.Sign(t, good), "bad signature"},
		{"alg none", oauthtest.Unsigned(t, good), "algorithm not allowed"},
		{"key not in the JWKS", oauthtest.SignWithUnknownKey(t, good), "bad signature"},
		{"tampered signature", oauthtest.Tamper(t, p.Sign(t, good)), "bad signature"},
		{"no exp", p.Sign(t, func() map[string]any { c := p.Claims("alice"); delete(c, "exp"); return c }()), "has no exp (expiry) claim"},
		// Issue 25: iat in the future, ID tokens, and lifetimes beyond
		// max_token_lifetime (default a day).
		{"iat in the future", p.Sign(t, with("iat", time.Now().Add(time.Hour).Unix())), "issued in the future"},
		{"the provider's ID token", p.IDToken(t, nil), "is an ID token (it carries nonce"},
		{"at_hash", p.Sign(t, with("at_hash", "x3YtCHbbhNDKc4b2YA7RzQ")), "is an ID token (it carries at_hash"},
		{"typ claim ID (Keycloak)", p.Sign(t, with("typ", "ID")), `is an ID token (its typ claim is "ID")`},
		{"typ id_token+jwt", p.SignWithHeader(t, good, map[string]any{"typ": "id_token+jwt"}), `typ "id_token+jwt" is not an access token's`},
		{"typ logout+jwt", p.SignWithHeader(t, good, map[string]any{"typ": "logout+jwt"}), `typ "logout+jwt" is not an access token's`},
		{"typ not a string", p.SignWithHeader(t, good, map[string]any{"typ": 7}), "malformed JWT header"},
		{"lifetime of two days", p.Sign(t, with("exp", time.Now().Add(48*time.Hour).Unix())), "longer than principals_from_tokens.max_token_lifetime (24h0m0s)"},
		{"two days left, no iat", p.Sign(t, func() map[string]any {
			c := with("exp", time.Now().Add(48*time.Hour).Unix())
			delete(c, "iat")
			return c
		}()), "without iat"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), tc.token)
			var e *oauth.Error
			if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Code != oauth.CodeInvalidToken {
				t.Fatalf("err %v, want a 401 invalid_token", err)
			}
			if !strings.Contains(e.Reason, tc.reason) {
				t.Errorf("reason %q, want it to say %q", e.Reason, tc.reason)
			}
			if strings.Contains(e.Reason, tc.token) || strings.Contains(v.Challenge(e), tc.token) {
				t.Error("the refusal contains the token")
			}
		})
	}
	// The good token is accepted by the same verifier.
	if _, err := v.Verify(context.Background(), p.Sign(t, good)); err != nil {
		t.Fatalf("good token: %v", err)
	}
}

// TestAccessTokenShapes: what an access token of RFC 9068 or of the
// common providers looks like is accepted: typ at+jwt (either spelling),
// typ JWT or none without an ID token's claims, Keycloak's typ claim
// "Bearer" even beside a nonce (Keycloak before 24 put one in access
// tokens), iat within the leeway; and max_token_lifetime is the bound.
func TestAccessTokenShapes(t *testing.T) {
	p := oauthtest.Start(t, resource)
	v := newVerifier(t, p)
	ctx := context.Background()
	with := func(kv ...any) map[string]any {
		c := p.Claims("alice")
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		return c
	}
	for name, tok := range map[string]string{
		"typ at+jwt":             p.SignWithHeader(t, with(), map[string]any{"typ": "at+jwt"}),
		"typ application/at+jwt": p.SignWithHeader(t, with(), map[string]any{"typ": "application/at+jwt"}),
		"typ JWT":                p.Sign(t, with()),
		"no typ":                 oauthtest.SignWith(t, p.M.Keypair, with(), map[string]any{"typ": nil}),
		"Keycloak Bearer":        p.Sign(t, with("typ", "Bearer", "nonce", "n-1")),
		"at+jwt with a nonce":    p.SignWithHeader(t, with("nonce", "n-1"), map[string]any{"typ": "at+jwt"}),
		"iat a minute ahead":     p.Sign(t, with("iat", time.Now().Add(time.Minute).Unix())),
		"lifetime of a day":      p.Sign(t, with("exp", time.Now().Add(23*time.Hour).Unix())),
		"the provider's token":   p.Token(t, nil),
	} {
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	short := newVerifierWith(t, func(o *oauth.Options) { o.MaxTokenLifetime = time.Hour }, p)
	if _, err := short.Verify(ctx, p.Sign(t, with("exp", time.Now().Add(2*time.Hour).Unix()))); err == nil ||
		!strings.Contains(err.Error(), "valid for 2h0m0s (iat to exp), longer than principals_from_tokens.max_token_lifetime (1h0m0s)") {
		t.Errorf("a two-hour token with max_token_lifetime 1h: %v", err)
	}
	if _, err := short.Verify(ctx, p.Sign(t, with())); err != nil {
		t.Errorf("a ten-minute token with max_token_lifetime 1h: %v", err)
	}
}

// TestKeyRotationFollowed: after the provider rotates its key, tokens
// signed with the new key are accepted (the JWKS is fetched again for the
// unknown key ID) and tokens signed with the retired key are refused.
func TestKeyRotationFollowed(t *testing.T) {
	p := oauthtest.Start(t, resource)
	clock := &testClock{t: time.Now()}
	v := newVerifierWith(t, func(o *oauth.Options) { o.Now = clock.now }, p)
	if _, err := v.Verify(context.Background(), p.Sign(t, p.Claims("alice"))); err != nil {
		t.Fatal(err)
	}
	oldSigned := p.Sign(t, p.Claims("bob"))
	p.Rotate(t)
	clock.add(oauth.DefaultJWKSRefetchCooldown) // see TestUnknownKeyIDCooldown
	if _, err := v.Verify(context.Background(), p.Sign(t, p.Claims("alice2"))); err != nil {
		t.Fatalf("token with the new key: %v", err)
	}
	if _, err := v.Verify(context.Background(), oldSigned); err == nil || !strings.Contains(err.Error(), "bad signature") {
		t.Fatalf("token with the retired key: %v, want bad signature", err)
	}
}

// TestStepUpScopes: a tool that needs a scope reports it lacking, and the
// challenge names the scopes to ask for.
func TestStepUpScopes(t *testing.T) {
	p := oauthtest.Start(t, resource)
	v := newVerifier(t, p)
	c := p.Claims("alice")
	c["scope"] = "openid files:read"
	tok, err := v.Verify(context.Background(), p.Sign(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if lacking, want := v.ScopesFor(tok, "fs__write_file"); !slices.Equal(lacking, []string{"files:write"}) || !slices.Equal(want, []string{"files:write"}) {
		t.Fatalf("fs__write_file: lacking %v want %v", lacking, want)
	}
	if lacking, _ := v.ScopesFor(tok, "fs__read_file"); len(lacking) != 0 {
		t.Fatalf("fs__read_file lacks %v", lacking)
	}
	ch := v.Challenge(&oauth.Error{Status: 403, Code: oauth.CodeInsufficientScope, Reason: "x", Scope: []string{"files:write"}})
	for _, want := range []string{`resource_metadata="https://airlock.test/.well-known/oauth-protected-resource/mcp"`, `error="insufficient_scope"`, `scope="files:write"`} {
		if !strings.Contains(ch, want) {
			t.Errorf("challenge %s lacks %s", ch, want)
		}
	}
	c = p.Claims("carol")
	c["scp"] = []string{"files:write"}
	tok, err = v.Verify(context.Background(), p.Sign(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if lacking, _ := v.ScopesFor(tok, "fs__write_file"); len(lacking) != 0 {
		t.Fatalf("scp list: lacking %v", lacking)
	}
}

// TestRequiredScopesAndNoRole: a token without a required scope, or that
// maps to no role, is refused 403.
func TestRequiredScopesAndNoRole(t *testing.T) {
	p := oauthtest.Start(t, resource)
	v, err := oauth.New(oauth.Options{Resource: resource, RequiredScopes: []string{"mcp"},
		Issuers: []oauth.Issuer{{URL: p.Issuer(), Name: "corp"}},
		Roles:   []oauth.RoleRule{{Roles: []string{"dev"}, When: `"dev" in scopes`}}})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Claims("alice")
	c["scope"] = "dev"
	var e *oauth.Error
	if _, err := v.Verify(context.Background(), p.Sign(t, c)); !errors.As(err, &e) || e.Status != 403 || e.Code != oauth.CodeInsufficientScope || !strings.Contains(e.Reason, "lacks scope mcp") {
		t.Fatalf("without mcp: %v", err)
	}
	c["scope"] = "mcp"
	if _, err := v.Verify(context.Background(), p.Sign(t, c)); !errors.As(err, &e) || e.Status != 403 || !strings.Contains(e.Reason, "maps to no role") {
		t.Fatalf("no role: %v", err)
	}
	c["scope"] = "mcp dev"
	if tok, err := v.Verify(context.Background(), p.Sign(t, c)); err != nil || tok.Principal != "alice@corp" {
		t.Fatalf("mcp dev: %v %v", tok, err)
	}
}

// TestMetadata: the RFC 9728 document names the resource, its issuers,
// scopes and the header bearer method, at both well-known paths.
func TestMetadata(t *testing.T) {
	p := oauthtest.Start(t, resource)
	v := newVerifier(t, p)
	if got := v.MetadataPaths(); !slices.Equal(got, []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"}) {
		t.Fatalf("paths %v", got)
	}
	mux := http.NewServeMux()
	for _, path := range v.MetadataPaths() {
		mux.Handle(path, v.MetadataHandler())
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, path := range v.MetadataPaths() {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var m oauth.Metadata
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || m.Resource != resource || !slices.Equal(m.AuthorizationServers, []string{p.Issuer()}) ||
			!slices.Equal(m.ScopesSupported, []string{"files:write"}) || !slices.Equal(m.BearerMethodsSupported, []string{"header"}) {
			t.Fatalf("%s: %d %+v %v", path, resp.StatusCode, m, err)
		}
	}
}

// TestIntrospection: an opaque token is verified at an RFC 7662 endpoint
// that authenticates airlock; inactive and wrong-audience answers are
// refused.
func TestIntrospection(t *testing.T) {
	p := oauthtest.Start(t, resource)
	answers := map[string]map[string]any{
		"opaque-good":     {"active": true, "sub": "svc", "aud": resource, "iss": p.Issuer(), "exp": float64(time.Now().Add(time.Hour).Unix()), "scope": "files:write"},
		"opaque-inactive": {"active": false},
		"opaque-elsewhere": {"active": true, "sub": "svc", "aud": "https://elsewhere.test", "iss": p.Issuer(),
			"exp": float64(time.Now().Add(time.Hour).Unix())},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if !ok || id != "airlock" || secret != "s3cret" {
			http.Error(w, "unauthorized", 401)
			return
		}
		a, ok := answers[r.PostFormValue("token")]
		if !ok {
			a = map[string]any{"active": false}
		}
		_ = json.NewEncoder(w).Encode(a)
	}))
	defer srv.Close()
	v, err := oauth.New(oauth.Options{Resource: resource, Getenv: func(k string) string { return map[string]string{"INTROSPECT_SECRET": "s3cret"}[k] },
		Issuers: []oauth.Issuer{{URL: p.Issuer(), Name: "corp", Introspection: &oauth.Introspection{URL: srv.URL, ClientID: "airlock", ClientSecretEnv: "INTROSPECT_SECRET"}}},
		Roles:   []oauth.RoleRule{{Roles: []string{"dev"}, When: "true"}}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := v.Verify(context.Background(), "opaque-good")
	if err != nil || tok.Principal != "svc@corp" || !slices.Equal(tok.Scopes, []string{"files:write"}) {
		t.Fatalf("good: %+v %v", tok, err)
	}
	for raw, want := range map[string]string{"opaque-inactive": "not active", "opaque-elsewhere": "wrong audience"} {
		if _, err := v.Verify(context.Background(), raw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
	// JWTs still go to the key set.
	if _, err := v.Verify(context.Background(), p.Sign(t, p.Claims("alice"))); err != nil {
		t.Fatalf("jwt beside introspection: %v", err)
	}
}

// TestBadOptions: none and HMAC algorithms and a relative resource are
// refused when the verifier is made.
func TestBadOptions(t *testing.T) {
	for _, o := range []oauth.Options{
		{Resource: "/mcp", Issuers: []oauth.Issuer{{URL: "https://x"}}},
		{Resource: resource, Issuers: []oauth.Issuer{{URL: "https://x"}}, Algorithms: []string{"none"}},
		{Resource: resource, Issuers: []oauth.Issuer{{URL: "https://x"}}, Algorithms: []string{"HS256"}},
		{Resource: resource},
		{Resource: resource, Issuers: []oauth.Issuer{{URL: "https://x"}}, Roles: []oauth.RoleRule{{When: "claims.sub"}}},
	} {
		if _, err := oauth.New(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
