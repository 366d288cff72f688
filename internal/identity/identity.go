// Package identity answers "who is calling?": it resolves principals and
// their roles from the configuration, authenticates the credentials of an
// HTTP request, an API key (only key hashes are configured) or an OAuth
// access token (package oauth, when principals_from_tokens is
// configured), and names the local principal of stdio sessions. It knows
// credentials, not MCP: the gateway's HTTP edge (gateway/edge.go) calls it
// once per request, and the gateway binds MCP sessions to principals.
//
// It imports config, oauth, manifests and api (the rate limits it
// resolves); it never logs.
package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/oauth"
	"github.com/airlock-run/airlock/manifests"
)

// HeaderAPIKey is the alternative to "Authorization: Bearer KEY".
const HeaderAPIKey = "X-API-Key"

// Errors of Authenticate.
var (
	ErrNoCredentials = errors.New("no API key: send Authorization: Bearer <key> (or X-API-Key: <key>)")
	ErrUnknownKey    = errors.New("API key not recognised: check the key, or ask an operator to add its hash to principals[].api_key_sha256")
)

// Principal is a resolved caller: its own facts plus the union of its roles.
type Principal struct {
	Name        string
	Roles       []string
	Permissions []string
	DataLevel   manifests.DataLevel
	SlackUserID string
	// AllowTools are globs over exposed tool names.
	AllowTools []string
	// MaxCalls and Deadline are the task limits its roles give (0: the
	// configuration's task defaults).
	MaxCalls int
	Deadline time.Duration
	// RateLimits are its roles' rate limits, their windows resolved to
	// this principal or its role; Budget is the largest budget its roles
	// give a task (0: the task default). Issue 16 §3.
	RateLimits []api.RateLimit
	Budget     int
	// Token is set when the principal was authenticated by an access
	// token: its issuer, subject and scopes (never the token itself).
	Token *oauth.Token
	// bearer is the verified access token itself, kept for the calls that
	// act as the user upstream (SubjectToken): unexported, and behind a
	// pointer, so that neither an encoding nor a %+v of a Principal shows
	// it (fmt prints a nested pointer as its address).
	bearer *bearerToken
}

type bearerToken struct{ raw string }

// SubjectToken is the access token the principal was authenticated by
// ("" for an API key). The gateway seals it to the worker for upstreams
// that act as the user; it is never logged, audited or kept in the clear.
func (p *Principal) SubjectToken() string {
	if p == nil || p.bearer == nil {
		return ""
	}
	return p.bearer.raw
}

// Directory holds the principals of one configuration.
type Directory struct {
	byHash  map[string]*Principal
	byName  map[string]*Principal
	bySlack map[string]*Principal
	local   string
	roles   map[string]*config.Role

	// tokens verifies access tokens (nil: API keys only); tokensErr says
	// why the principals_from_tokens block could not be used (every token
	// is then refused with it).
	tokens    *oauth.Verifier
	tokensErr error

	// next, once set by Replace, is the directory of a reloaded
	// configuration: every method answers from it (reload.go).
	next atomic.Pointer[Directory]
}

var levelRank = map[manifests.DataLevel]int{
	manifests.DataPublic: 1, manifests.DataInternal: 2, manifests.DataConfidential: 3,
	manifests.DataSensitive: 4, manifests.DataRestricted: 5,
}

// New resolves every principal of a validated configuration.
func New(c *config.Config) *Directory {
	d := &Directory{byHash: map[string]*Principal{}, byName: map[string]*Principal{}, bySlack: map[string]*Principal{}, local: c.LocalPrincipal, roles: c.Roles}
	if t := c.PrincipalsFromTokens; t != nil {
		d.tokens, d.tokensErr = oauth.New(t.OAuthOptions())
		if d.tokensErr != nil {
			d.tokensErr = fmt.Errorf("principals_from_tokens: %w", d.tokensErr)
		}
	}
	for _, cp := range c.Principals {
		p := d.resolve(cp.Name, cp.Roles)
		p.SlackUserID = cp.SlackUserID
		d.byName[p.Name] = p
		if p.SlackUserID != "" {
			d.bySlack[p.SlackUserID] = p
		}
		for _, h := range cp.APIKeySHA256 {
			d.byHash[h] = p
		}
	}
	return d
}

// resolve makes the principal name with the union of roles' grants.
func (d *Directory) resolve(name string, roles []string) *Principal {
	p := &Principal{Name: name, Roles: slices.Clone(roles), DataLevel: manifests.DataPublic}
	for _, rn := range roles {
		r := d.roles[rn]
		if r == nil {
			continue
		}
		p.Permissions = appendNew(p.Permissions, r.Permissions...)
		p.AllowTools = appendNew(p.AllowTools, r.Tools...)
		if levelRank[r.DataAccessLevel] > levelRank[p.DataLevel] {
			p.DataLevel = r.DataAccessLevel
		}
		p.MaxCalls = max(p.MaxCalls, r.MaxCalls)
		p.Deadline = max(p.Deadline, r.Deadline.D())
		p.RateLimits = append(p.RateLimits, r.APIRateLimits(rn, name)...)
		p.Budget = max(p.Budget, r.Budget)
	}
	return p
}

func appendNew(s []string, v ...string) []string {
	for _, x := range v {
		if !slices.Contains(s, x) {
			s = append(s, x)
		}
	}
	return s
}

// Empty reports whether no principal is configured, by name or by token.
func (d *Directory) Empty() bool {
	d = d.now()
	return len(d.byName) == 0 && d.tokens == nil && d.tokensErr == nil
}

// MountMetadata serves the RFC 9728 Protected Resource Metadata on mux,
// at /.well-known/oauth-protected-resource and at the variant suffixed
// with the resource's path (/.well-known/oauth-protected-resource/mcp),
// when principals_from_tokens is configured; otherwise it does nothing.
func (d *Directory) MountMetadata(mux *http.ServeMux) {
	d = d.now()
	if d.tokens == nil {
		return
	}
	h := d.tokens.MetadataHandler()
	for _, p := range d.tokens.MetadataPaths() {
		mux.Handle(p, h)
	}
}

// Tokens is the access token verifier (nil when principals_from_tokens is
// not configured).
func (d *Directory) Tokens() *oauth.Verifier { return d.now().tokens }

// Lookup returns the principal with this name.
func (d *Directory) Lookup(name string) (*Principal, bool) {
	d = d.now()
	p, ok := d.byName[name]
	return p, ok
}

// BySlackUser returns the principal whose slack_user_id is id (a Slack
// user ID such as U0123ABCD), for mapping an approver's click to who they
// are in airlock.
func (d *Directory) BySlackUser(id string) (*Principal, bool) {
	d = d.now()
	if id == "" {
		return nil, false
	}
	p, ok := d.bySlack[id]
	return p, ok
}

// Local returns the principal of stdio sessions.
func (d *Directory) Local() (*Principal, error) {
	d = d.now()
	if d.local == "" {
		return nil, errors.New("no local_principal in the configuration: name the principal stdio sessions run as (local_principal: NAME)")
	}
	p, ok := d.byName[d.local]
	if !ok {
		return nil, fmt.Errorf("local_principal %q is not one of principals", d.local)
	}
	return p, nil
}

// Authenticate finds the principal of an HTTP request's API key or access
// token (see AuthenticateContext).
func (d *Directory) Authenticate(h http.Header) (*Principal, error) {
	return d.AuthenticateContext(context.Background(), h)
}

// AuthenticateContext finds the principal of an HTTP request's API key or,
// when principals_from_tokens is configured, its access token: a bearer
// value that is not a known API key is verified as a token. A refused
// token's error is an *oauth.Error.
func (d *Directory) AuthenticateContext(ctx context.Context, h http.Header) (*Principal, error) {
	d = d.now()
	bearer := false
	key := ""
	if auth := h.Get("Authorization"); auth != "" {
		scheme, rest, ok := strings.Cut(auth, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, errors.New("Authorization header is not \"Bearer <key>\"")
		}
		key = strings.TrimSpace(rest)
		bearer = true
	} else {
		key = strings.TrimSpace(h.Get(HeaderAPIKey))
	}
	if key == "" {
		return nil, ErrNoCredentials
	}
	p, ok := d.byHash[HashKey(key)]
	if ok {
		return p, nil
	}
	if !bearer || (d.tokens == nil && d.tokensErr == nil) {
		return nil, ErrUnknownKey
	}
	return d.fromToken(ctx, key)
}

// fromToken verifies an access token and makes its principal.
func (d *Directory) fromToken(ctx context.Context, raw string) (*Principal, error) {
	if d.tokensErr != nil {
		return nil, &oauth.Error{Status: http.StatusUnauthorized, Code: oauth.CodeInvalidToken, Reason: "tokens cannot be verified: " + d.tokensErr.Error()}
	}
	if !oauth.LooksLikeJWT(raw) && !d.tokens.Introspects() {
		// Neither a key nor a token: say so as for keys.
		return nil, ErrUnknownKey
	}
	ctx, cancel := context.WithTimeout(ctx, tokenTimeout)
	defer cancel()
	t, err := d.tokens.Verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	p := d.resolve(t.Principal, t.Roles)
	p.Token = t
	p.bearer = &bearerToken{raw: raw}
	return p, nil
}

// tokenTimeout bounds verifying one token, discovery and key fetches
// included.
const tokenTimeout = 15 * time.Second

// HashKey is the hash stored in principals[].api_key_sha256.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewKey makes a random API key and returns it with its hash.
func NewKey() (key, hash string, err error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	key = "ak_" + hex.EncodeToString(b[:])
	return key, HashKey(key), nil
}

// ScopeError is the one step-up check of tool_scopes, made wherever a
// tool is about to be called (at the gateway's HTTP edge for the tools a
// request body names, and in the gateway for the tool it dispatches, the
// inner tool of airlock_call_tool included): an *oauth.Error (403
// insufficient_scope, naming the scopes to ask for) when the principal's
// token lacks a scope a call of tool needs, nil otherwise (and for
// principals authenticated without a token).
func (d *Directory) ScopeError(p *Principal, tool string) error {
	d = d.now()
	if p == nil || p.Token == nil || d.tokens == nil || !d.tokens.HasToolScopes() {
		return nil
	}
	lacking, want := d.tokens.ScopesFor(p.Token, tool)
	if len(lacking) == 0 {
		return nil
	}
	return &oauth.Error{Status: http.StatusForbidden, Code: oauth.CodeInsufficientScope, Scope: want,
		Reason: fmt.Sprintf("calling %s needs scope %s, which the token of %s lacks; ask the authorization server for a token with scope %q", tool, strings.Join(lacking, " "), p.Name, strings.Join(want, " "))}
}
