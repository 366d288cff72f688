package manifests

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// UpstreamAuth says how a tool call authenticates to an HTTP upstream as
// the user who made it (server.http.auth).
type UpstreamAuth struct {
	TokenExchange *TokenExchange `yaml:"token_exchange,omitempty" json:"token_exchange,omitempty"`
	// UserOAuth: each user authorizes airlock at a third-party provider
	// once (useroauth.go).
	UserOAuth *UserOAuth `yaml:"user_oauth,omitempty" json:"user_oauth,omitempty"`
}

// TokenExchange makes the worker, when it runs a call, exchange the calling
// user's verified access token at TokenURL (RFC 8693) for a token issued
// to this upstream, and send that one as the call's bearer. Session
// traffic that belongs to no call (initialize, tools/list) carries the
// token of server.http.oauth when it is set, else none.
//
//	http:
//	  url: https://tickets.example.com/mcp
//	  auth:
//	    token_exchange:
//	      token_url: https://login.example.com/realms/corp/protocol/openid-connect/token
//	      client_id: airlock
//	      client_secret_env: AIRLOCK_EXCHANGE_SECRET
//	      audience: tickets
//	      resource: https://tickets.example.com/mcp
//	      scopes: [tickets.write]
//	      actor: true
//	      offline: true
type TokenExchange struct {
	TokenURL        string `yaml:"token_url" json:"token_url"`
	ClientID        string `yaml:"client_id" json:"client_id"`
	ClientSecretEnv string `yaml:"client_secret_env" json:"client_secret_env"`
	// Audience is the RFC 8693 audience parameter (the upstream's client
	// ID at the provider, Keycloak-style); Resource the RFC 8707 resource
	// (its URL). At least one is required: a token for no audience would
	// be accepted by any service of the provider.
	Audience string   `yaml:"audience,omitempty" json:"audience,omitempty"`
	Resource string   `yaml:"resource,omitempty" json:"resource,omitempty"`
	Scopes   []string `yaml:"scopes,omitempty" json:"scopes,omitempty"`
	// Actor sends airlock's own token (client credentials of ClientID) as
	// the actor_token, so that a provider that supports delegation names
	// airlock in the issued token's act claim.
	Actor bool `yaml:"actor,omitempty" json:"actor,omitempty"`
	// Offline makes the gateway ask the provider, when a call arrives, to
	// hold the user's grant: it exchanges the user's token for a refresh
	// token (requested_token_type refresh_token), sealed with the call. A
	// call that runs after the user's token has expired (a long approval,
	// a rollback) then exchanges that refresh token (subject_token_type
	// refresh_token) instead of failing. For providers that issue refresh
	// tokens by exchange and accept them as subject tokens (zitadel);
	// without it, such a call fails cleanly (UserGrant), nothing run.
	Offline bool `yaml:"offline,omitempty" json:"offline,omitempty"`
}

func (a *UpstreamAuth) expand(lookup func(string) string) *UpstreamAuth {
	if a == nil {
		return nil
	}
	out := *a
	if t := a.TokenExchange; t != nil {
		c := *t
		c.TokenURL = expand(c.TokenURL, lookup)
		c.ClientID = expand(c.ClientID, lookup)
		c.Audience = expand(c.Audience, lookup)
		c.Resource = expand(c.Resource, lookup)
		c.Scopes = slices.Clone(c.Scopes)
		out.TokenExchange = &c
	}
	out.UserOAuth = a.UserOAuth.expand(lookup)
	return &out
}

// ExchangesTokens reports whether calls to the upstream are made as the
// calling user (server.http.auth.token_exchange).
func (s Server) ExchangesTokens() bool {
	return s.HTTP != nil && s.HTTP.Auth != nil && s.HTTP.Auth.TokenExchange != nil
}

func (v *validator) tokenExchange(h *HTTPServer) {
	if h.Auth == nil {
		return
	}
	const at = "server.http.auth.token_exchange"
	c := h.Auth.TokenExchange
	if h.Auth.UserOAuth != nil {
		v.userOAuth(h) // useroauth.go
		if c != nil {
			v.add("server.http.auth", "sets both token_exchange and user_oauth; keep one: token_exchange when the provider can exchange the sign-in token, user_oauth when each user must authorize airlock at a provider of its own")
		}
		return
	}
	if c == nil {
		v.add("server.http.auth", "names no method; write token_exchange: {token_url, client_id, client_secret_env, audience or resource}, or user_oauth: {authorize_url, token_url, client_id, client_secret_env, redirect_url}")
		return
	}
	if c.TokenURL == "" {
		v.add(at+".token_url", `is required; write the provider's token endpoint, e.g. "https://login.example.com/realms/corp/protocol/openid-connect/token"`)
	} else {
		v.absURL(at+".token_url", c.TokenURL, "https://login.example.com/oauth2/token")
	}
	if strings.TrimSpace(c.ClientID) == "" {
		v.add(at+".client_id", "is required; write the client ID airlock is registered with at the provider (a client allowed to exchange tokens)")
	}
	if !envVarName.MatchString(c.ClientSecretEnv) {
		v.add(at+".client_secret_env", "%q is not an environment variable name; name the variable holding the client secret (never the secret itself), e.g. AIRLOCK_EXCHANGE_SECRET", c.ClientSecretEnv)
	}
	if c.Audience == "" && c.Resource == "" {
		v.add(at, "needs audience or resource; name the upstream as the provider knows it (audience: its client ID, resource: its URL), so the issued token is good for this upstream only")
	}
	if strings.ContainsAny(c.Audience, " \t\"") {
		v.add(at+".audience", "%q is not an audience; write one client ID, without spaces", c.Audience)
	}
	if c.Resource != "" {
		v.absURL(at+".resource", c.Resource, "https://tickets.example.com/mcp")
	}
	for i, s := range c.Scopes {
		if s == "" || strings.ContainsAny(s, " \t\"") {
			v.add(fmt.Sprintf("%s.scopes[%d]", at, i), "%q is not a scope; scopes have no spaces or quotes", s)
		}
	}
	for k := range h.Headers {
		if http.CanonicalHeaderKey(k) == "Authorization" {
			v.add("server.http.headers."+k, "sets Authorization, which server.http.auth.token_exchange sets per call; remove the header")
		}
	}
}
