package config

import (
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/airlock-run/airlock/internal/oauth"
	"github.com/airlock-run/airlock/manifests"
)

// Tokens makes the gateway an OAuth 2.1 resource server (the MCP
// authorization specification): HTTP callers may present an access token
// issued by one of Issuers for Resource instead of an API key.
//
// The principal of a token is "<principal_claim>@<issuer name>" (e.g.
// "248289761001@corp" or, with principal_claim: email,
// "alice@example.com@corp"): the issuer's short name keeps tokens of two
// issuers with the same subject apart. Its roles are those of every entry
// of Roles whose condition holds; a token that maps to no role is refused.
type Tokens struct {
	// Resource is the URL clients reach the MCP endpoint at
	// (https://airlock.example.com/mcp). Tokens must name it as their
	// audience (RFC 8707), and the Protected Resource Metadata (RFC 9728)
	// is served for it.
	Resource string `yaml:"resource"`
	// Issuers are the authorization servers whose tokens are accepted.
	Issuers []TokenIssuer `yaml:"issuers"`
	// Roles map a token's claims and scopes to roles.
	Roles []TokenRole `yaml:"roles"`
	// RequiredScopes must all be in every token (403 insufficient_scope
	// otherwise).
	RequiredScopes []string `yaml:"required_scopes,omitempty"`
	// ToolScopes name the scopes a tool call needs beyond them: a call
	// without them is refused 403 insufficient_scope with the scopes to
	// ask for (step-up authorization).
	ToolScopes []ToolScope `yaml:"tool_scopes,omitempty"`
	// ScopesSupported are advertised in the metadata (default: every
	// scope named in required_scopes and tool_scopes).
	ScopesSupported []string `yaml:"scopes_supported,omitempty"`
	// Algorithms are the JWS algorithms accepted (default: RS, PS and ES
	// 256/384/512 and EdDSA). none and HS* are refused.
	Algorithms []string `yaml:"algorithms,omitempty"`
	// JWKSRefetchCooldown is the least time between two fetches of an
	// issuer's key set: a token signed with a key ID airlock does not
	// know makes it fetch the set again (a key rotation) only once the
	// last fetch is this old, so tokens with made-up key IDs cannot make
	// airlock hammer the provider (default 30s).
	JWKSRefetchCooldown manifests.Duration `yaml:"jwks_refetch_cooldown,omitempty"`
	// MaxTokenLifetime bounds a JWT access token's lifetime (exp - iat):
	// a token issued for longer is refused, since nothing can revoke it
	// before it expires (default 24h).
	MaxTokenLifetime manifests.Duration `yaml:"max_token_lifetime,omitempty"`
}

// TokenIssuer is one authorization server.
type TokenIssuer struct {
	// Issuer is its issuer identifier, exactly as in its tokens' iss.
	// Its keys are discovered from its metadata (OpenID Connect
	// Discovery, or RFC 8414).
	Issuer string `yaml:"issuer"`
	// Name is the short name in principal names (letters, digits, . _ -).
	// Default: the issuer's host name.
	Name string `yaml:"name,omitempty"`
	// Audience overrides the audience tokens must carry (default:
	// resource). Some providers cannot put a URL there.
	Audience string `yaml:"audience,omitempty"`
	// PrincipalClaim is the claim that names the principal (default sub).
	PrincipalClaim string `yaml:"principal_claim,omitempty"`
	// JWKSURL skips discovery.
	JWKSURL string `yaml:"jwks_url,omitempty"`
	// Introspection verifies opaque (non-JWT) tokens (RFC 7662).
	Introspection *TokenIntrospection `yaml:"introspection,omitempty"`
}

// TokenIntrospection is an RFC 7662 endpoint.
type TokenIntrospection struct {
	URL             string `yaml:"url"`
	ClientID        string `yaml:"client_id"`
	ClientSecretEnv string `yaml:"client_secret_env"`
}

// TokenRole grants Roles to tokens for which When holds: CEL over claims
// (map), scopes (list of strings) and issuer (the issuer URL), e.g.
// `"airlock-admins" in claims.groups` or `"files:write" in scopes`.
type TokenRole struct {
	Roles []string `yaml:"roles"`
	When  string   `yaml:"when"`
}

// ToolScope names the scopes calls of the tools matching Tools (a glob
// over exposed tool names) need.
type ToolScope struct {
	Tools  string   `yaml:"tools"`
	Scopes []string `yaml:"scopes"`
}

// IssuerName is the short name of an issuer: Name, or the host of its URL.
func (t TokenIssuer) IssuerName() string {
	if t.Name != "" {
		return t.Name
	}
	if u, err := url.Parse(t.Issuer); err == nil {
		return u.Hostname()
	}
	return ""
}

// OAuthOptions converts the block into the verifier's options.
func (t *Tokens) OAuthOptions() oauth.Options {
	o := oauth.Options{Resource: t.Resource, RequiredScopes: t.RequiredScopes, ScopesSupported: t.ScopesSupported, Algorithms: t.Algorithms,
		JWKSRefetchCooldown: t.JWKSRefetchCooldown.D(), MaxTokenLifetime: t.MaxTokenLifetime.D()}
	for _, is := range t.Issuers {
		oi := oauth.Issuer{URL: is.Issuer, Name: is.IssuerName(), Audience: is.Audience, PrincipalClaim: is.PrincipalClaim, JWKSURL: is.JWKSURL}
		if in := is.Introspection; in != nil {
			oi.Introspection = &oauth.Introspection{URL: in.URL, ClientID: in.ClientID, ClientSecretEnv: in.ClientSecretEnv}
		}
		o.Issuers = append(o.Issuers, oi)
	}
	for _, r := range t.Roles {
		o.Roles = append(o.Roles, oauth.RoleRule{Roles: r.Roles, When: r.When})
	}
	for _, ts := range t.ToolScopes {
		o.ToolScopes = append(o.ToolScopes, oauth.ToolScope{Tools: ts.Tools, Scopes: ts.Scopes})
	}
	return o
}

// tokensAt is the field principals_from_tokens, which its errors name.
const tokensAt = "principals_from_tokens"

func (c *Config) validateTokens(v *validator) {
	t := c.PrincipalsFromTokens
	if t == nil {
		return
	}
	const at = tokensAt
	if err := oauth.CheckResource(t.Resource); err != nil {
		v.add(at+".resource", "%v", err)
	}
	if d := t.JWKSRefetchCooldown; d != 0 && (d < manifests.Duration(time.Second) || d > manifests.Duration(time.Hour)) {
		v.add(at+".jwks_refetch_cooldown", `must be between 1s and 1h, got %s; it is the least time between two fetches of an issuer's keys (default 30s)`, d)
	}
	if d := t.MaxTokenLifetime; d != 0 && (d < manifests.Duration(time.Minute) || d > manifests.Duration(30*24*time.Hour)) {
		v.add(at+".max_token_lifetime", `must be between 1m and 720h, got %s; it is the longest exp - iat of an accepted access token (default 24h)`, d)
	}
	if len(t.Issuers) == 0 {
		v.add(at+".issuers", "is empty; name the authorization server(s) whose tokens are accepted, e.g. - issuer: https://login.example.com")
	}
	names := validateIssuers(v, t)
	c.validateKeyNamesBesideTokens(v, names)
	c.validateTokenRoles(v, t)
	validateTokenScopes(v, t)
}

// validateIssuers checks every issuer of principals_from_tokens and
// returns their names (principal names end in them), each with its index.
func validateIssuers(v *validator, t *Tokens) map[string]int {
	const at = tokensAt
	names := map[string]int{}
	introspecting := 0
	for i, is := range t.Issuers {
		ip := fmt.Sprintf("%s.issuers[%d]", at, i)
		if u, err := url.Parse(is.Issuer); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.RawQuery != "" || u.Fragment != "" {
			v.add(ip+".issuer", "%q is not an issuer identifier; write its https URL without query or fragment, exactly as the iss of its tokens", is.Issuer)
		}
		n := is.IssuerName()
		if !principalName.MatchString(n) || strings.Contains(n, "@") {
			v.add(ip+".name", "%q cannot name an issuer in principal names; use letters, digits and . _ - (it ends them: sub@NAME)", n)
		} else if j, dup := names[n]; dup {
			v.add(ip+".name", "%q is also the name of issuers[%d]; give each issuer its own name, so their principals stay apart", n, j)
		}
		names[n] = i
		if is.Audience != "" && strings.TrimSpace(is.Audience) == "" {
			v.add(ip+".audience", "is blank; omit it to require the resource URL")
		}
		if is.PrincipalClaim != "" && strings.TrimSpace(is.PrincipalClaim) != is.PrincipalClaim {
			v.add(ip+".principal_claim", "%q has spaces; write a claim name such as sub or email", is.PrincipalClaim)
		}
		if is.JWKSURL != "" {
			if u, err := url.Parse(is.JWKSURL); err != nil || !u.IsAbs() || u.Host == "" {
				v.add(ip+".jwks_url", "%q is not an absolute URL; omit it to discover the keys from the issuer's metadata", is.JWKSURL)
			}
		}
		if in := is.Introspection; in != nil {
			introspecting++
			if u, err := url.Parse(in.URL); err != nil || !u.IsAbs() || u.Host == "" {
				v.add(ip+".introspection.url", "%q is not an absolute URL; write the issuer's RFC 7662 introspection endpoint", in.URL)
			}
			if strings.TrimSpace(in.ClientID) == "" {
				v.add(ip+".introspection.client_id", "is required; name the client airlock authenticates to the introspection endpoint as")
			}
			if !envName.MatchString(in.ClientSecretEnv) {
				v.add(ip+".introspection.client_secret_env", "%q is not an environment variable name; name the variable holding the client secret (never the secret itself)", in.ClientSecretEnv)
			}
			if introspecting > 1 {
				v.add(ip+".introspection", "only one issuer may introspect: an opaque token does not say which issuer made it")
			}
		}
	}
	return names
}

// validateKeyNamesBesideTokens refuses an @ in a key principal's name
// beside token principals (sub@issuer): it would make two principals read
// alike (alice@corp, a key, and alice@corp@ext, a token), in policy rules,
// approvals and audit, and an issuer added later could make them one: with
// tokens, @ is theirs (RATIONALE.md, "Why may key principals not have an @
// beside token principals?").
func (c *Config) validateKeyNamesBesideTokens(v *validator, names map[string]int) {
	for i, p := range c.Principals {
		if _, iss, ok := strings.Cut(p.Name, "@"); ok {
			if _, clash := names[iss[strings.LastIndex(iss, "@")+1:]]; clash {
				v.add(fmt.Sprintf("principals[%d].name", i), "%q ends in the name of an issuer of principals_from_tokens, so a token could be taken for it; rename the principal or the issuer", p.Name)
			} else {
				v.add(fmt.Sprintf("principals[%d].name", i), "%q has an @, which with principals_from_tokens names a token's principal (sub@issuer); rename the key principal without @, e.g. %q", p.Name, strings.ReplaceAll(p.Name, "@", "."))
			}
		}
	}
}

// validateTokenRoles checks the conditions that map tokens to roles.
func (c *Config) validateTokenRoles(v *validator, t *Tokens) {
	const at = tokensAt
	if len(t.Roles) == 0 {
		v.add(at+".roles", `is empty; map tokens to roles, e.g. - {roles: [dev], when: "\"dev\" in claims.groups"} (when: "true" gives every token the roles)`)
	}
	for i, r := range t.Roles {
		rp := fmt.Sprintf("%s.roles[%d]", at, i)
		if len(r.Roles) == 0 {
			v.add(rp+".roles", "is empty; list the roles this condition grants")
		}
		for j, rn := range r.Roles {
			if _, ok := c.Roles[rn]; !ok {
				v.add(fmt.Sprintf("%s.roles[%d]", rp, j), "role %q is not defined; add it under roles or fix the name (defined: %s)", rn, strings.Join(slices.Sorted(maps.Keys(c.Roles)), ", "))
			}
		}
		if strings.TrimSpace(r.When) == "" {
			v.add(rp+".when", `is required; write a CEL condition over claims, scopes and issuer, e.g. "\"dev\" in claims.groups"`)
		} else if _, err := oauth.CompileRole(r.When); err != nil {
			v.add(rp+".when", "%v; fix the CEL expression (variables: claims, scopes, issuer)", err)
		}
	}
}

// validateTokenScopes checks the scopes a token must or may carry, those
// tools need (step-up), and the accepted signing algorithms.
func validateTokenScopes(v *validator, t *Tokens) {
	const at = tokensAt
	scope := func(p, s string) {
		if s == "" || strings.ContainsAny(s, " \t\"\\") {
			v.add(p, "%q is not a scope; scopes have no spaces or quotes", s)
		}
	}
	for i, s := range t.RequiredScopes {
		scope(fmt.Sprintf("%s.required_scopes[%d]", at, i), s)
	}
	for i, s := range t.ScopesSupported {
		scope(fmt.Sprintf("%s.scopes_supported[%d]", at, i), s)
	}
	for i, ts := range t.ToolScopes {
		tp := fmt.Sprintf("%s.tool_scopes[%d]", at, i)
		if _, err := path.Match(ts.Tools, ""); err != nil || strings.TrimSpace(ts.Tools) == "" {
			v.add(tp+".tools", "%q is not a valid glob; write e.g. \"filesystem__write_*\"", ts.Tools)
		}
		if len(ts.Scopes) == 0 {
			v.add(tp+".scopes", "is empty; list the scopes a call of these tools needs")
		}
		for j, s := range ts.Scopes {
			scope(fmt.Sprintf("%s.scopes[%d]", tp, j), s)
		}
	}
	for i, a := range t.Algorithms {
		if err := oauth.CheckAlgorithm(a); err != nil {
			v.add(fmt.Sprintf("%s.algorithms[%d]", at, i), "%v", err)
		}
	}
}
