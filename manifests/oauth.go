package manifests

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// ClientCredentials is an OAuth 2.1 client airlock is to an HTTP upstream
// that wants a bearer token: airlock asks TokenURL for a token with the
// client credentials grant, sends it as "Authorization: Bearer …" on every
// request to the upstream, and asks again before it expires. The secret
// is named by the environment variable that holds it, never written here.
//
//	http:
//	  url: https://tickets.example.com/mcp
//	  oauth:
//	    token_url: https://login.example.com/oauth2/token
//	    client_id: airlock
//	    client_secret_env: TICKETS_CLIENT_SECRET
//	    scopes: [tickets.write]
//	    resource: https://tickets.example.com/mcp
type ClientCredentials struct {
	TokenURL        string `yaml:"token_url" json:"token_url"`
	ClientID        string `yaml:"client_id" json:"client_id"`
	ClientSecretEnv string `yaml:"client_secret_env" json:"client_secret_env"`
	// Scopes are requested with the token.
	Scopes []string `yaml:"scopes,omitempty" json:"scopes,omitempty"`
	// Resource is sent as the RFC 8707 resource parameter (the upstream's
	// URL, for authorization servers that bind tokens to their audience).
	Resource string `yaml:"resource,omitempty" json:"resource,omitempty"`
}

func (c *ClientCredentials) expand(lookup func(string) string) *ClientCredentials {
	if c == nil {
		return nil
	}
	out := *c
	out.TokenURL = expand(out.TokenURL, lookup)
	out.ClientID = expand(out.ClientID, lookup)
	out.Resource = expand(out.Resource, lookup)
	out.Scopes = slices.Clone(out.Scopes)
	return &out
}

var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (v *validator) clientCredentials(h *HTTPServer) {
	c := h.OAuth
	if c == nil {
		return
	}
	const at = "server.http.oauth"
	absURL := func(field, raw, example string) { v.absURL(at+"."+field, raw, example) }
	if c.TokenURL == "" {
		v.add(at+".token_url", `is required; write the authorization server's token endpoint, e.g. "https://login.example.com/oauth2/token"`)
	} else {
		absURL("token_url", c.TokenURL, "https://login.example.com/oauth2/token")
	}
	if strings.TrimSpace(c.ClientID) == "" {
		v.add(at+".client_id", "is required; write the client ID airlock was registered with at the authorization server")
	}
	if !envVarName.MatchString(c.ClientSecretEnv) {
		v.add(at+".client_secret_env", "%q is not an environment variable name; name the variable holding the client secret (never the secret itself), e.g. TICKETS_CLIENT_SECRET", c.ClientSecretEnv)
	}
	for i, s := range c.Scopes {
		if s == "" || strings.ContainsAny(s, " \t\"") {
			v.add(fmt.Sprintf("%s.scopes[%d]", at, i), "%q is not a scope; scopes have no spaces or quotes", s)
		}
	}
	if c.Resource != "" {
		absURL("resource", c.Resource, "https://tickets.example.com/mcp")
	}
	for k := range h.Headers {
		if http.CanonicalHeaderKey(k) == "Authorization" {
			v.add("server.http.headers."+k, "sets Authorization, which server.http.oauth sets too; remove one of them")
		}
	}
}

// absURL reports raw at path unless it is an absolute http(s) URL (or one
// variable, known only at connect time).
func (v *validator) absURL(path, raw, example string) {
	if strings.HasPrefix(raw, "${") {
		return
	}
	u, err := url.Parse(varRefRE.ReplaceAllString(raw, "1"))
	if err != nil || !u.IsAbs() || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		v.add(path, "%q is not an http(s) URL; write e.g. %q", raw, example)
	}
}
