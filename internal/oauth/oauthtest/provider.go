// Package oauthtest runs a real OpenID provider in the test process
// (github.com/oauth2-proxy/mockoidc: discovery, JWKS, authorization code
// flow, RS256 tokens) for airlock's resource-server tests, and signs the
// variants a test needs with the provider's own key. Test code only.
package oauthtest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"
	"golang.org/x/oauth2"
)

// Provider is a running OpenID provider whose access tokens are for
// Resource (its client ID is the resource URL, so the "aud" of the tokens
// it issues is the resource, as RFC 8707 asks).
type Provider struct {
	M        *mockoidc.MockOIDC
	Resource string
}

// Start runs a provider on 127.0.0.1 until the test ends.
func Start(t testing.TB, resource string) *Provider {
	t.Helper()
	// Each provider gets its own key: mockoidc's default key is the same
	// for every instance (and public).
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mockoidc.NewServer(key)
	if err != nil {
		t.Fatal(err)
	}
	m.ClientID = resource
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ln, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return &Provider{M: m, Resource: resource}
}

// Issuer is the provider's issuer identifier.
func (p *Provider) Issuer() string { return p.M.Issuer() }

// Token signs user in through the authorization code flow (authorize,
// redirect with a code, code exchanged at the token endpoint with the
// client secret) and returns the access token the provider issued.
func (p *Provider) Token(t testing.TB, user *mockoidc.MockUser) string {
	t.Helper()
	return p.exchange(t, user).AccessToken
}

// IDToken signs user in as Token does and returns the ID token the
// provider issued beside the access token (for the client, never to be
// sent as a bearer token).
func (p *Provider) IDToken(t testing.TB, user *mockoidc.MockUser) string {
	t.Helper()
	id, _ := p.exchange(t, user).Extra("id_token").(string)
	if id == "" {
		t.Fatal("the provider issued no ID token")
	}
	return id
}

func (p *Provider) exchange(t testing.TB, user *mockoidc.MockUser) *oauth2.Token {
	t.Helper()
	if user != nil {
		p.M.QueueUser(user)
	}
	cfg := &oauth2.Config{ClientID: p.M.ClientID, ClientSecret: p.M.ClientSecret, RedirectURL: "http://127.0.0.1/callback",
		Scopes: []string{"openid", "email", "profile"}, Endpoint: oauth2.Endpoint{AuthURL: p.M.AuthorizationEndpoint(), TokenURL: p.M.TokenEndpoint()}}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(cfg.AuthCodeURL("state-1", oauth2.SetAuthURLParam("nonce", "n-1")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("authorize answered %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	tok, err := cfg.Exchange(context.Background(), loc.Query().Get("code"))
	if err != nil {
		t.Fatalf("token exchange: %v", err)
	}
	return tok
}

// Claims are the claims of a token the provider would issue for subject
// now: issuer, audience (the resource), iat, nbf, exp in 10 minutes.
func (p *Provider) Claims(subject string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": p.Issuer(), "sub": subject, "aud": []string{p.Resource},
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()}
}

// Sign signs claims with the provider's current key (the one its JWKS
// serves), as the provider signs its own tokens.
func (p *Provider) Sign(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	s, err := p.M.Keypair.SignJWT(claims)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// SignWithHeader signs claims with the provider's current key under its
// key ID, with the header fields of hdr added (e.g. "typ").
func (p *Provider) SignWithHeader(t testing.TB, claims jwt.MapClaims, hdr map[string]any) string {
	t.Helper()
	return SignWith(t, p.M.Keypair, claims, hdr)
}

// SignWith signs claims with kp (a key the provider published, or
// published once) under its key ID, with the header fields of hdr added.
func SignWith(t testing.TB, kp *mockoidc.Keypair, claims jwt.MapClaims, hdr map[string]any) string {
	t.Helper()
	kid, err := kp.KeyID()
	if err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = kid
	for k, v := range hdr {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(kp.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Rotate replaces the provider's signing key: its JWKS serves only the new
// key from now on.
func (p *Provider) Rotate(t testing.TB) {
	t.Helper()
	kp, err := mockoidc.RandomKeypair(2048)
	if err != nil {
		t.Fatal(err)
	}
	p.M.Keypair = kp
}

// unknownKey is the key SignWithUnknownKey signs with: generated once per
// process (an RSA key costs a tenth of a second or more, and tests sign
// dozens of tokens with it), published by no provider.
var unknownKey = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

// SignWithUnknownKey signs claims with an RSA key no provider's JWKS
// holds, under a key ID of its own.
func SignWithUnknownKey(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	key, err := unknownKey()
	if err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = "not-in-the-jwks"
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Unsigned is claims as a JWT with "alg": "none" and an empty signature.
func Unsigned(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	h, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT"})
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc(h) + "." + enc(b) + "."
}

// Tamper changes the token's payload (one claim) and keeps the signature.
func Tamper(t testing.TB, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	c["sub"] = "mallory"
	b, _ = json.Marshal(c)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
