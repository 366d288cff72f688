// Package oauth makes airlock's gateway an OAuth 2.1 resource server, as
// the MCP authorization specification (2025-06-18 and later) asks of an MCP
// server: it verifies bearer access tokens (JWTs against the issuer's JWKS,
// or opaque tokens by RFC 7662 introspection), checks that each was issued
// for this gateway (RFC 8707 resource as audience), maps the token's claims
// and scopes to a principal name and roles (CEL over claims), and serves
// the RFC 9728 Protected Resource Metadata with the WWW-Authenticate
// challenges that point clients to it.
//
// Issuer, audience, expiry, not-before and the signature algorithm
// allowlist are go-oidc's (github.com/coreos/go-oidc/v3); this package adds
// what a resource server needs beyond an ID token verifier: discovery (OpenID
// Connect or RFC 8414 metadata), the issuer's key set fetched on a schedule
// and on rotation (jwks.go), and the checks that make a verified JWT an
// access token (accesstoken.go: not an ID token, iat, lifetime).
//
// It is a leaf: it imports the standard library, go-oidc (and go-jose,
// which go-oidc is built on) and cel-go, never
// airlock's packages, and it never logs. Package identity builds a Verifier
// from the configuration and turns a Token into a principal.
package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// DefaultAlgorithms are the JWS algorithms accepted when Options name none:
// asymmetric ones only. "none" and the HMAC family are never accepted: a
// resource server holds no shared secret, and accepting HS256 with a
// public key as the secret is the classic forgery.
var DefaultAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// WellKnownPath is where RFC 9728 metadata is served; the variant for a
// resource with a path appends that path.
const WellKnownPath = "/.well-known/oauth-protected-resource"

// Options configure a Verifier.
type Options struct {
	// Resource is this gateway's MCP endpoint URL as clients reach it; it
	// is the audience tokens must carry unless an issuer names another.
	Resource string
	Issuers  []Issuer
	// Roles grant roles to tokens whose When holds.
	Roles []RoleRule
	// RequiredScopes must all be in every token.
	RequiredScopes []string
	// ToolScopes name the scopes a tool call needs (step-up).
	ToolScopes []ToolScope
	// ScopesSupported are listed in the metadata (default: every scope
	// named in RequiredScopes and ToolScopes).
	ScopesSupported []string
	// Algorithms allowed for JWT signatures (default DefaultAlgorithms).
	Algorithms []string
	// HTTPClient fetches discovery documents, key sets and introspection
	// answers (default: a client with a 10s timeout).
	HTTPClient *http.Client
	// Getenv reads introspection client secrets (default os.Getenv).
	Getenv func(string) string
	// Now is the clock tokens are checked against (default time.Now).
	Now func() time.Time
	// JWKSRefetchCooldown is the least time between two fetches of an
	// issuer's key set: a token whose key ID is unknown makes airlock
	// fetch the set again (a rotation) only when the last fetch is at
	// least this old (default DefaultJWKSRefetchCooldown).
	JWKSRefetchCooldown time.Duration
	// MaxTokenLifetime bounds exp - iat of a JWT access token: a longer
	// lived one is refused (default DefaultMaxTokenLifetime).
	MaxTokenLifetime time.Duration
}

// Issuer is one authorization server whose tokens are accepted.
type Issuer struct {
	// URL is the issuer identifier (the "iss" of its tokens).
	URL string
	// Name is the short name principals of this issuer are known by:
	// "<claim>@<Name>".
	Name string
	// Audience tokens must name (default Options.Resource).
	Audience string
	// PrincipalClaim names the principal (default "sub").
	PrincipalClaim string
	// JWKSURL skips discovery when set.
	JWKSURL string
	// Introspection, when set, verifies tokens that are not JWTs.
	Introspection *Introspection
}

// Introspection is an RFC 7662 endpoint and the client airlock
// authenticates to it as.
type Introspection struct {
	URL             string
	ClientID        string
	ClientSecretEnv string
}

// RoleRule grants Roles to a token for which When (CEL over claims, scopes
// and issuer) is true.
type RoleRule struct {
	Roles []string
	When  string
}

// ToolScope names the scopes calls of the tools matching Tools (a glob over
// exposed tool names) need.
type ToolScope struct {
	Tools  string
	Scopes []string
}

// Token is a verified access token, as much of it as airlock keeps. The raw
// token is not kept.
type Token struct {
	Issuer  string // the issuer's URL
	Subject string
	// Principal is "<principal claim>@<issuer name>".
	Principal string
	Scopes    []string
	Roles     []string
	Expiry    time.Time
}

// Error codes of RFC 6750 section 3.1.
const (
	CodeInvalidToken      = "invalid_token"
	CodeInsufficientScope = "insufficient_scope"
)

// Error is a refused token: Status 401 (invalid_token) or 403
// (insufficient_scope, or a token that maps to no role). Reason never
// contains the token.
type Error struct {
	Status int
	Code   string
	Reason string
	// Scope lists the scopes that would be enough, for the challenge.
	Scope []string
}

func (e *Error) Error() string { return e.Reason }

func invalid(format string, args ...any) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: CodeInvalidToken, Reason: fmt.Sprintf(format, args...)}
}

// Verifier verifies access tokens for one resource.
type Verifier struct {
	opts     Options
	issuers  []*issuer
	roles    []compiledRole
	metaURL  string
	getenv   func(string) string
	now      func() time.Time
	scopesOK []string

	mu    sync.Mutex
	cache map[[32]byte]cached
}

type cached struct {
	tok   *Token
	until time.Time
}

// cacheTTL bounds how long a verified token is taken on trust before its
// signature (or its introspection) is checked again.
const cacheTTL = time.Minute

// maxCache bounds the verified-token cache.
const maxCache = 10000

type issuer struct {
	cfg      Issuer
	client   *http.Client
	cooldown time.Duration

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	keys     *keySet
	lastErr  error
	lastTry  time.Time
}

// New checks opts and compiles the role rules. It dials nothing: each
// issuer's metadata is discovered at its first token.
func New(opts Options) (*Verifier, error) {
	if err := CheckResource(opts.Resource); err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	if len(opts.Issuers) == 0 {
		return nil, errors.New("no issuers")
	}
	if len(opts.Algorithms) == 0 {
		opts.Algorithms = DefaultAlgorithms
	}
	for _, a := range opts.Algorithms {
		if err := CheckAlgorithm(a); err != nil {
			return nil, err
		}
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.MaxTokenLifetime <= 0 {
		opts.MaxTokenLifetime = DefaultMaxTokenLifetime
	}
	v := &Verifier{opts: opts, getenv: opts.Getenv, now: opts.Now, cache: map[[32]byte]cached{}}
	if v.now == nil {
		v.now = time.Now
	}
	if v.getenv == nil {
		v.getenv = osGetenv
	}
	for _, is := range opts.Issuers {
		if is.Audience == "" {
			is.Audience = opts.Resource
		}
		if is.PrincipalClaim == "" {
			is.PrincipalClaim = "sub"
		}
		cooldown := opts.JWKSRefetchCooldown
		if cooldown <= 0 {
			cooldown = DefaultJWKSRefetchCooldown
		}
		v.issuers = append(v.issuers, &issuer{cfg: is, client: opts.HTTPClient, cooldown: cooldown})
	}
	for i, r := range opts.Roles {
		p, err := CompileRole(r.When)
		if err != nil {
			return nil, fmt.Errorf("roles[%d].when: %w", i, err)
		}
		v.roles = append(v.roles, compiledRole{roles: r.Roles, prg: p})
	}
	v.metaURL = MetadataURL(opts.Resource)
	v.scopesOK = opts.ScopesSupported
	if len(v.scopesOK) == 0 {
		v.scopesOK = appendNew(nil, opts.RequiredScopes...)
		for _, ts := range opts.ToolScopes {
			v.scopesOK = appendNew(v.scopesOK, ts.Scopes...)
		}
	}
	return v, nil
}

// CheckResource says whether r can be a resource identifier (RFC 8707: an
// absolute URI without a fragment).
func CheckResource(r string) error {
	u, err := url.Parse(r)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return fmt.Errorf("%q is not an absolute URL; write the URL clients reach the MCP endpoint at, e.g. https://airlock.example.com/mcp", r)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%q is not an http(s) URL", r)
	}
	if u.Fragment != "" {
		return fmt.Errorf("%q has a fragment (#…), which a resource identifier must not have", r)
	}
	return nil
}

// CheckAlgorithm refuses "none" and the HMAC family, and names outside
// DefaultAlgorithms.
func CheckAlgorithm(a string) error {
	switch {
	case strings.EqualFold(a, "none"):
		return errors.New(`algorithm "none" accepts unsigned tokens; remove it`)
	case strings.HasPrefix(strings.ToUpper(a), "HS"):
		return fmt.Errorf("algorithm %q is HMAC: a resource server verifies with the issuer's public keys, never a shared secret; remove it", a)
	case !slices.Contains(DefaultAlgorithms, a):
		return fmt.Errorf("algorithm %q is not supported; use some of %s", a, strings.Join(DefaultAlgorithms, ", "))
	}
	return nil
}

// MetadataURL is where the Protected Resource Metadata of resource is
// served (RFC 9728 section 3.1: the well-known path inserted between the
// host and the resource's path).
func MetadataURL(resource string) string {
	u, err := url.Parse(resource)
	if err != nil {
		return ""
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	return u.Scheme + "://" + u.Host + WellKnownPath + p
}

// MetadataPaths are the paths Metadata is served at on the gateway's
// listener: the well-known path, and the variant suffixed with the
// resource's path.
func (v *Verifier) MetadataPaths() []string {
	out := []string{WellKnownPath}
	if u, err := url.Parse(v.metaURL); err == nil && u.Path != WellKnownPath {
		out = append(out, u.Path)
	}
	return out
}

// Resource is the resource URL tokens must be for.
func (v *Verifier) Resource() string { return v.opts.Resource }

// MetadataURL is where this resource's metadata is served.
func (v *Verifier) MetadataURL() string { return v.metaURL }

// Metadata is the RFC 9728 document.
type Metadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	ScopesSupported        []string `json:"scopes_supported,omitempty"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// Metadata returns this resource's metadata.
func (v *Verifier) Metadata() Metadata {
	m := Metadata{Resource: v.opts.Resource, ScopesSupported: v.scopesOK, BearerMethodsSupported: []string{"header"}, ResourceName: "airlock"}
	for _, is := range v.issuers {
		m.AuthorizationServers = append(m.AuthorizationServers, is.cfg.URL)
	}
	return m
}

// MetadataHandler serves Metadata at WellKnownPath and at the
// path-suffixed variant; mount it on both.
func (v *Verifier) MetadataHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		// Browser-based MCP clients read it across origins.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		_ = json.NewEncoder(w).Encode(v.Metadata())
	})
}

// Challenge is the WWW-Authenticate value of a refusal: err nil for "no
// credentials" (no error code, RFC 6750 section 3.1).
func (v *Verifier) Challenge(err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, `Bearer realm="airlock", resource_metadata=%q`, v.metaURL)
	scope := v.opts.RequiredScopes
	var e *Error
	if errors.As(err, &e) {
		fmt.Fprintf(&b, `, error=%q, error_description=%q`, e.Code, quoteSafe(e.Reason))
		if len(e.Scope) > 0 {
			scope = e.Scope
		}
	}
	if len(scope) > 0 {
		fmt.Fprintf(&b, `, scope=%q`, strings.Join(scope, " "))
	}
	return b.String()
}

func quoteSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '"' || r == '\\' || r < 0x20 || r > 0x7e {
			return '\''
		}
		return r
	}, s)
}

// LooksLikeJWT reports whether tok has the three dot-separated parts of a
// JWS compact serialisation.
func LooksLikeJWT(tok string) bool { return strings.Count(tok, ".") == 2 }

// Introspects reports whether some issuer verifies opaque tokens.
func (v *Verifier) Introspects() bool {
	for _, is := range v.issuers {
		if is.cfg.Introspection != nil {
			return true
		}
	}
	return false
}

// Verify checks a bearer token and maps it to a principal. The error is an
// *Error.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Token, error) {
	key := sha256.Sum256([]byte(raw))
	now := v.now()
	v.mu.Lock()
	if c, ok := v.cache[key]; ok && now.Before(c.until) {
		v.mu.Unlock()
		return c.tok, nil
	}
	v.mu.Unlock()
	tok, keysUntil, err := v.verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	until := now.Add(cacheTTL)
	if tok.Expiry.Before(until) {
		until = tok.Expiry
	}
	// Not beyond the key set that verified it: a key withdrawn at the
	// next fetch verifies no cached token either.
	if !keysUntil.IsZero() && keysUntil.Before(until) {
		until = keysUntil
	}
	v.mu.Lock()
	if len(v.cache) >= maxCache {
		for k, c := range v.cache {
			if !now.Before(c.until) {
				delete(v.cache, k)
			}
		}
		if len(v.cache) >= maxCache {
			clear(v.cache)
		}
	}
	v.cache[key] = cached{tok: tok, until: until}
	v.mu.Unlock()
	return tok, nil
}

// verify checks raw; keysUntil is when the key set that verified it is
// fetched again (zero for an introspected token).
func (v *Verifier) verify(ctx context.Context, raw string) (tok *Token, keysUntil time.Time, err error) {
	var claims map[string]any
	var is *issuer
	if !LooksLikeJWT(raw) {
		for _, i := range v.issuers {
			if i.cfg.Introspection != nil {
				is = i
				break
			}
		}
		if is == nil {
			return nil, time.Time{}, invalid("the bearer token is neither an API key nor a JWT access token (no issuer is configured for introspection of opaque tokens)")
		}
		c, err := v.introspect(ctx, is, raw)
		if err != nil {
			return nil, time.Time{}, err
		}
		claims = c
	} else {
		iss, err := unverifiedIssuer(raw)
		if err != nil {
			return nil, time.Time{}, invalid("malformed JWT: %v", err)
		}
		for _, i := range v.issuers {
			if i.cfg.URL == iss {
				is = i
			}
		}
		if is == nil {
			return nil, time.Time{}, invalid("wrong issuer: tokens of %q are not accepted (accepted: %s)", iss, strings.Join(v.issuerURLs(), ", "))
		}
		vf, keys, err := is.getVerifier(ctx, v.opts.Algorithms, v.now)
		if err != nil {
			return nil, time.Time{}, invalid("cannot verify tokens of %s: %v", is.cfg.URL, err)
		}
		t, err := vf.Verify(ctx, raw)
		if err != nil {
			return nil, time.Time{}, classify(err, is.cfg.Audience)
		}
		keysUntil = keys.until()
		if err := t.Claims(&claims); err != nil {
			return nil, time.Time{}, invalid("claims: %v", err)
		}
		if e := checkAccessToken(raw, claims, v.now(), v.opts.MaxTokenLifetime); e != nil {
			return nil, time.Time{}, e
		}
	}
	tok, err = v.toToken(ctx, is, claims)
	return tok, keysUntil, err
}

func (v *Verifier) issuerURLs() []string {
	var out []string
	for _, is := range v.issuers {
		out = append(out, is.cfg.URL)
	}
	return out
}

// classify turns go-oidc's errors into reasons a person can act on.
func classify(err error, aud string) *Error {
	var exp *oidc.TokenExpiredError
	msg := strings.TrimPrefix(err.Error(), "oidc: ")
	switch {
	case errors.As(err, &exp) && exp.Expiry.IsZero():
		return invalid("the token has no exp (expiry) claim; airlock accepts only access tokens that expire")
	case errors.As(err, &exp):
		return invalid("token expired at %s", exp.Expiry.UTC().Format(time.RFC3339))
	case strings.Contains(msg, "expected audience"):
		return invalid("wrong audience: the token is not for this resource (%s): %s; request it with resource=%s (RFC 8707)", aud, msg, aud)
	case strings.Contains(msg, "different provider"):
		return invalid("wrong issuer: %s", msg)
	case strings.Contains(msg, "nbf"):
		return invalid("token not yet valid: %s", msg)
	case strings.Contains(msg, "unexpected signature algorithm"), strings.Contains(msg, "malformed jwt"):
		return invalid("signature algorithm not allowed or malformed token: %s", msg)
	case strings.Contains(msg, "failed to verify signature"):
		return invalid("bad signature: %s", msg)
	}
	return invalid("%s", msg)
}

func unverifiedIssuer(raw string) (string, error) {
	parts := strings.Split(raw, ".")
	b, err := base64URLDecode(parts[1])
	if err != nil {
		return "", fmt.Errorf("payload: %v", err)
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return "", fmt.Errorf("payload: %v", err)
	}
	return c.Iss, nil
}

// principalValue keeps principal names usable in task IDs, policy rules and
// logs.
var principalValue = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+|=:-]{0,127}$`)

func (v *Verifier) toToken(ctx context.Context, is *issuer, claims map[string]any) (*Token, error) {
	t := &Token{Issuer: is.cfg.URL, Scopes: Scopes(claims)}
	t.Subject, _ = claims["sub"].(string)
	if exp, ok := claims["exp"].(float64); ok {
		t.Expiry = time.Unix(int64(exp), 0)
	} else {
		return nil, invalid("the token has no exp (expiry) claim")
	}
	name, _ := claims[is.cfg.PrincipalClaim].(string)
	if name == "" {
		return nil, invalid("the token has no %q claim naming its principal (principals_from_tokens.issuers[].principal_claim)", is.cfg.PrincipalClaim)
	}
	if !principalValue.MatchString(name) {
		return nil, invalid("the %q claim cannot name a principal: use letters, digits and . _ @ + | = : - (at most 128)", is.cfg.PrincipalClaim)
	}
	t.Principal = name + "@" + is.cfg.Name
	if miss := missing(t.Scopes, v.opts.RequiredScopes); len(miss) > 0 {
		return nil, &Error{Status: http.StatusForbidden, Code: CodeInsufficientScope, Scope: v.opts.RequiredScopes,
			Reason: fmt.Sprintf("the token lacks scope %s, which every token must carry", strings.Join(miss, " "))}
	}
	vars := map[string]any{"claims": claims, "scopes": t.Scopes, "issuer": is.cfg.URL}
	for i, r := range v.roles {
		ok, err := r.eval(ctx, vars)
		if err != nil {
			return nil, invalid("roles[%d].when: %v", i, err)
		}
		if ok {
			t.Roles = appendNew(t.Roles, r.roles...)
		}
	}
	if len(t.Roles) == 0 {
		return nil, &Error{Status: http.StatusForbidden, Code: CodeInsufficientScope, Scope: v.scopesOK,
			Reason: fmt.Sprintf("the token of %s maps to no role: no principals_from_tokens.roles[].when holds for its claims and scopes", t.Principal)}
	}
	return t, nil
}

// Scopes reads the "scope" claim (space-separated, RFC 9068) or "scp" (a
// list, as some providers send).
func Scopes(claims map[string]any) []string {
	var out []string
	switch s := claims["scope"].(type) {
	case string:
		out = strings.Fields(s)
	case []any:
		for _, x := range s {
			if str, ok := x.(string); ok {
				out = append(out, str)
			}
		}
	}
	if l, ok := claims["scp"].([]any); ok {
		for _, x := range l {
			if str, ok := x.(string); ok {
				out = appendNew(out, str)
			}
		}
	} else if s, ok := claims["scp"].(string); ok {
		out = appendNew(out, strings.Fields(s)...)
	}
	return out
}

func missing(have, need []string) []string {
	var out []string
	for _, n := range need {
		if !slices.Contains(have, n) {
			out = append(out, n)
		}
	}
	return out
}

// ScopesFor returns the scopes a call of tool needs that t lacks (nil: none
// missing), and every scope the matching entries name (for the challenge).
func (v *Verifier) ScopesFor(t *Token, tool string) (lacking, want []string) {
	for _, ts := range v.opts.ToolScopes {
		if ok, _ := path.Match(ts.Tools, tool); !ok {
			continue
		}
		want = appendNew(want, ts.Scopes...)
	}
	return missing(t.Scopes, want), want
}

// HasToolScopes reports whether any tool needs scopes.
func (v *Verifier) HasToolScopes() bool { return len(v.opts.ToolScopes) > 0 }

func appendNew(s []string, v ...string) []string {
	for _, x := range v {
		if !slices.Contains(s, x) {
			s = append(s, x)
		}
	}
	return s
}

func readLimited(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20+1))
	if err == nil && len(b) > 1<<20 {
		err = errors.New("answer larger than 1MiB")
	}
	return b, err
}
