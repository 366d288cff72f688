package manifests

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// ConsentCallbackPath and ConsentStartPath are where airlock serves the
// user consent flow of server.http.auth.user_oauth (internal/consent): the
// provider sends the user back to the callback (the redirect URL
// registered there), and a user who has not authorized airlock is sent to
// the start, on the same origin.
const (
	ConsentStartPath    = "/oauth/consent/start"
	ConsentCallbackPath = "/oauth/consent/callback"
)

// UserOAuth makes each user authorize airlock, once, at an OAuth provider
// airlock is a client of (a code host, a SaaS API): a call of a user who
// has not is answered with a URL elicitation that sends them to
// AuthorizeURL (authorization code with PKCE); the refresh token the
// provider returns is kept encrypted in the credential store, bound to the
// user and this upstream, and each later call of that user carries an
// access token made from it.
//
//	http:
//	  url: https://code.example.com/mcp
//	  auth:
//	    user_oauth:
//	      authorize_url: https://code.example.com/login/oauth/authorize
//	      token_url: https://code.example.com/login/oauth/access_token
//	      revocation_url: https://code.example.com/oauth/revoke   # optional (RFC 7009)
//	      client_id: airlock
//	      client_secret_env: CODE_CLIENT_SECRET
//	      redirect_url: https://airlock.example.com/oauth/consent/callback
//	      scopes: [repo]
type UserOAuth struct {
	AuthorizeURL  string `yaml:"authorize_url" json:"authorize_url"`
	TokenURL      string `yaml:"token_url" json:"token_url"`
	RevocationURL string `yaml:"revocation_url,omitempty" json:"revocation_url,omitempty"`
	ClientID      string `yaml:"client_id" json:"client_id"`
	// ClientSecretEnv names the environment variable holding the client
	// secret, on every gateway (which redeems the code) and worker (which
	// refreshes).
	ClientSecretEnv string `yaml:"client_secret_env" json:"client_secret_env"`
	// RedirectURL is airlock's callback as registered at the provider:
	// airlock's public origin followed by ConsentCallbackPath.
	RedirectURL string   `yaml:"redirect_url" json:"redirect_url"`
	Scopes      []string `yaml:"scopes,omitempty" json:"scopes,omitempty"`
}

func (c *UserOAuth) expand(lookup func(string) string) *UserOAuth {
	if c == nil {
		return nil
	}
	out := *c
	out.AuthorizeURL = expand(c.AuthorizeURL, lookup)
	out.TokenURL = expand(c.TokenURL, lookup)
	out.RevocationURL = expand(c.RevocationURL, lookup)
	out.ClientID = expand(c.ClientID, lookup)
	out.RedirectURL = expand(c.RedirectURL, lookup)
	out.Scopes = slices.Clone(c.Scopes)
	return &out
}

// UsesUserOAuth reports whether each user of the upstream must authorize
// airlock at its provider (server.http.auth.user_oauth).
func (s Server) UsesUserOAuth() bool {
	return s.HTTP != nil && s.HTTP.Auth != nil && s.HTTP.Auth.UserOAuth != nil
}

// ActsAsUser reports whether calls to the upstream carry a token of the
// calling user (token exchange or user consent), never airlock's own.
func (s Server) ActsAsUser() bool { return s.ExchangesTokens() || s.UsesUserOAuth() }

// StartURL is the consent start endpoint on the origin of the redirect URL.
func (c *UserOAuth) StartURL() string {
	u, err := url.Parse(c.RedirectURL)
	if err != nil {
		return ""
	}
	u.Path, u.RawPath, u.RawQuery, u.Fragment = ConsentStartPath, "", "", ""
	return u.String()
}

func (v *validator) userOAuth(h *HTTPServer) {
	const at = "server.http.auth.user_oauth"
	c := h.Auth.UserOAuth
	req := func(field, val, example string) {
		if val == "" {
			v.add(at+"."+field, "is required; write e.g. %q", example)
			return
		}
		v.absURL(at+"."+field, val, example)
		if u, err := url.Parse(val); err == nil && u.Fragment != "" {
			v.add(at+"."+field, "%q has a fragment (#…), which OAuth endpoints never take; remove it", val)
		}
	}
	req("authorize_url", c.AuthorizeURL, "https://code.example.com/login/oauth/authorize")
	req("token_url", c.TokenURL, "https://code.example.com/login/oauth/access_token")
	if c.RevocationURL != "" {
		req("revocation_url", c.RevocationURL, "https://code.example.com/oauth/revoke")
	}
	if strings.TrimSpace(c.ClientID) == "" || strings.ContainsFunc(c.ClientID, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		v.add(at+".client_id", "%q is not a client ID; write the client ID airlock is registered with at the provider (no spaces)", c.ClientID)
	}
	if !envVarName.MatchString(c.ClientSecretEnv) {
		v.add(at+".client_secret_env", "%q is not an environment variable name; name the variable holding the client secret (never the secret itself), e.g. CODE_CLIENT_SECRET", c.ClientSecretEnv)
	}
	v.redirectURL(at+".redirect_url", c.RedirectURL)
	seen := map[string]bool{}
	for i, s := range c.Scopes {
		switch {
		case s == "" || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == '"' || r == '\\' || r == 0x7f }):
			v.add(fmt.Sprintf("%s.scopes[%d]", at, i), "%q is not a scope; scopes have no spaces, quotes or backslashes", s)
		case seen[s]:
			v.add(fmt.Sprintf("%s.scopes[%d]", at, i), "%q is listed twice; remove one", s)
		}
		seen[s] = true
	}
	for k := range h.Headers {
		if http.CanonicalHeaderKey(k) == "Authorization" {
			v.add("server.http.headers."+k, "sets Authorization, which server.http.auth.user_oauth sets per call (the user's token); remove the header")
		}
	}
}

// redirectURL checks airlock's consent callback as registered at the
// provider: https (http only on a loopback host, for a laptop), the
// callback path, no query or fragment.
func (v *validator) redirectURL(at, raw string) {
	const example = "https://airlock.example.com" + ConsentCallbackPath
	if raw == "" {
		v.add(at, "is required; write airlock's public origin followed by %s, as registered at the provider, e.g. %q", ConsentCallbackPath, example)
		return
	}
	if strings.HasPrefix(raw, "${") {
		return
	}
	u, err := url.Parse(varRefRE.ReplaceAllString(raw, "1"))
	if err != nil || !u.IsAbs() || u.Host == "" {
		v.add(at, "%q is not an absolute URL; write e.g. %q", raw, example)
		return
	}
	host := u.Hostname()
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	switch {
	case u.Scheme != "https" && !(u.Scheme == "http" && loopback):
		v.add(at, "%q is not https; the provider sends the authorization code there, so it must be https (http only on localhost), e.g. %q", raw, example)
	case u.Path != ConsentCallbackPath:
		v.add(at, "%q: the path must be %s, where airlock serves the callback; write e.g. %q", raw, ConsentCallbackPath, example)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		v.add(at, "%q has a query, fragment or user info; write the origin and %s only, e.g. %q", raw, ConsentCallbackPath, example)
	}
}
