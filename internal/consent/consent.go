// Package consent is the user consent flow of upstreams with
// server.http.auth.user_oauth (issue 31 §3). A call of a user who has not
// authorized airlock at the upstream's provider is not run: the gateway
// answers it with a URL elicitation whose URL is airlock's own start
// endpoint (Begin); that sends the user's browser to the provider
// (authorization code with PKCE, the flow's ID as the state, bound to that
// browser by a cookie); the provider sends it back to the callback, which
// redeems the code and stores the tokens encrypted, bound to the user and
// the upstream (internal/credstore). A later call of that user carries an
// access token made from them (Token: refreshed when needed) as its own
// bearer; the gateway binds each call to its user with a MAC the worker
// checks (Subject), so a call of another principal, or a history edited to
// name one, never opens another user's credential.
package consent

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/oauth2"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/credstore"
	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/manifests"
)

// DefaultTTL is how long a consent link can be used.
const DefaultTTL = 10 * time.Minute

// subjectKeyPrefix marks a Binding (its KeyID is the
// credential key that made the MAC).
const subjectKeyPrefix = "credential:"

// maxTokenBytes bounds each token a provider issues (real ones are a few
// KB); a larger one is refused rather than stored.
const maxTokenBytes = 16 << 10

// checkToken refuses what airlock will not store or send.
func checkToken(tok *oauth2.Token) error {
	switch {
	case tok.AccessToken == "":
		return errors.New("the answer has no access_token")
	case !strings.EqualFold(tok.Type(), "bearer"):
		return fmt.Errorf("token_type is %q; only Bearer tokens can be sent", clip(tok.TokenType))
	case len(tok.AccessToken) > maxTokenBytes || len(tok.RefreshToken) > maxTokenBytes:
		return fmt.Errorf("a token is larger than %d bytes", maxTokenBytes)
	case strings.ContainsFunc(tok.AccessToken, func(r rune) bool { return r <= ' ' || r >= 0x7f }):
		return errors.New("the access token has characters a header cannot carry")
	}
	return nil
}

// refreshMargin: an access token this close to its expiry is refreshed
// before a call uses it.
const refreshMargin = 30 * time.Second

// Options configure a Flow.
type Options struct {
	Store *credstore.Store
	// Upstreams returns the user_oauth block of an upstream in the
	// configuration in force, nil when it has none.
	Upstreams func(server string) *manifests.UserOAuth
	Getenv    func(string) string // default os.Getenv
	// HTTPClient asks the providers (default: 15 s timeout).
	HTTPClient *http.Client
	TTL        time.Duration // default DefaultTTL
	Audit      *auditstream.Log
	Log        *zerolog.Logger
}

// Flow is the consent flow and the use of what it stored.
type Flow struct {
	o   Options
	now func() time.Time

	mu        sync.Mutex
	completed []func(elicitationID string)
}

// OnComplete registers fn to be told, in this process, the elicitation
// ID of each flow whose credential was stored (the gateway sends the
// client notifications/elicitation/complete).
func (f *Flow) OnComplete(fn func(elicitationID string)) {
	f.mu.Lock()
	f.completed = append(f.completed, fn)
	f.mu.Unlock()
}

func (f *Flow) complete(id string) {
	f.mu.Lock()
	fns := slices.Clone(f.completed)
	f.mu.Unlock()
	for _, fn := range fns {
		fn(elicitationID(id))
	}
}

// elicitationID names flow id in elicitations without revealing it.
func elicitationID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "consent-" + hex.EncodeToString(sum[:12])
}

// New makes a flow.
func New(o Options) *Flow {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Log == nil {
		l := zerolog.Nop()
		o.Log = &l
	}
	return &Flow{o: o, now: time.Now}
}

// Store is the credential store.
func (f *Flow) Store() *credstore.Store { return f.o.Store }

func (f *Flow) config(server string) (*manifests.UserOAuth, error) {
	c := f.o.Upstreams(server)
	if c == nil {
		return nil, fmt.Errorf("upstream %q has no server.http.auth.user_oauth in the configuration in force", server)
	}
	return c, nil
}

func (f *Flow) oauth(c *manifests.UserOAuth) (*oauth2.Config, error) {
	secret := f.o.Getenv(c.ClientSecretEnv)
	if secret == "" {
		return nil, fmt.Errorf("server.http.auth.user_oauth.client_secret_env: the environment variable %s is not set here; set it to the client secret on every gateway and worker", c.ClientSecretEnv)
	}
	return &oauth2.Config{ClientID: c.ClientID, ClientSecret: secret, RedirectURL: c.RedirectURL, Scopes: c.Scopes,
		// Basic auth, which RFC 6749 §2.3.1 makes every provider accept:
		// auto-detection would send a refused request again the other way.
		Endpoint: oauth2.Endpoint{AuthURL: c.AuthorizeURL, TokenURL: c.TokenURL, AuthStyle: oauth2.AuthStyleInHeader}}, nil
}

func (f *Flow) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, f.o.HTTPClient)
}

// Has reports whether principal has authorized airlock for server.
func (f *Flow) Has(ctx context.Context, principal, server string) (bool, error) {
	return f.o.Store.Has(ctx, principal, server)
}

// Begin starts a consent flow of principal for server, asked by a call
// of task: it returns the URL to send the user to (the start endpoint;
// the link is the flow's secret, valid once, for the TTL) and an
// elicitation ID that names the flow without revealing it.
func (f *Flow) Begin(ctx context.Context, principal, server, task string) (link, eid string, err error) {
	c, err := f.config(server)
	if err != nil {
		return "", "", err
	}
	now := f.now().UTC()
	id, err := f.o.Store.Begin(ctx, credstore.Pending{Principal: principal, Upstream: server, Task: task,
		Verifier: oauth2.GenerateVerifier(), Created: now, Expiry: now.Add(f.o.TTL)})
	if err != nil {
		return "", "", err
	}
	return c.StartURL() + "?id=" + id, elicitationID(id), nil
}

// subjectMessage is what the MAC of a Subject covers: the task and its
// principal. Not the upstream: a program carries one Subject for all its
// calls, and a binding moved from one call of the task to another acts as
// the same principal, whose credentials they all are.
func subjectMessage(task, principal string) []byte {
	return []byte("airlock consent subject v1\x00" + task + "\x00" + principal)
}

// Binding is what a call carries to act as its principal at upstreams
// with user_oauth (the gateway puts it in api.Subject: Principal, KeyID,
// Sealed): their name and a MAC, under the credential key KeyID names,
// over the task and the principal. The history holds it; it opens nothing
// by itself.
type Binding struct {
	Principal string
	KeyID     string
	MAC       []byte
}

// Issuer is what api.Subject.Issuer says of a binding.
const Issuer = "user_oauth"

// Subject is the binding of a call of principal in task.
func (f *Flow) Subject(task, principal string) (*Binding, error) {
	keys := f.o.Store.Keys()
	if keys == nil {
		return nil, errors.New(credstore.EnvKeys + " is not set: set it on every gateway and worker (`airlock credentials key` makes one)")
	}
	kid, mac, err := keys.MAC("", subjectMessage(task, principal))
	if err != nil {
		return nil, err
	}
	return &Binding{Principal: principal, KeyID: subjectKeyPrefix + kid, MAC: mac}, nil
}

// IsBinding reports whether the key ID of an api.Subject is a binding's
// (a consented credential), not a seal for token exchange.
func IsBinding(keyID string) bool { return strings.HasPrefix(keyID, subjectKeyPrefix) }

// Errors of Token, each wrapped in an *exchange.GrantError (nothing was
// sent; the call is not retried).
var (
	ErrNotAuthorized = errors.New("the user has not authorized airlock at this upstream's provider, or the authorization was revoked")
	ErrBinding       = errors.New("the call's binding to its user does not verify: it was altered, or it belongs to another task or user")
	ErrGrantGone     = errors.New("the provider no longer accepts the user's authorization")
)

func grantErr(principal string, err error, detail string) error {
	return &exchange.GrantError{Principal: principal, Err: err, Detail: detail}
}

// Token returns the access token of s's user for server, for a call of
// task, refreshing it first when it expires within refreshMargin. A
// credential that is missing, or that the provider refuses to refresh,
// is a *exchange.GrantError (a refused one is deleted, so that the user's
// next call asks for consent again); any other error means the provider
// or the store could not be reached.
func (f *Flow) Token(ctx context.Context, task, server string, s *Binding) (string, credstore.Record, error) {
	if s == nil || !IsBinding(s.KeyID) {
		return "", credstore.Record{}, grantErr("", exchange.ErrNoSubject, "")
	}
	keys := f.o.Store.Keys()
	if keys == nil {
		return "", credstore.Record{}, grantErr(s.Principal, credstore.ErrKey, credstore.EnvKeys+" is not set on this worker")
	}
	_, mac, err := keys.MAC(strings.TrimPrefix(s.KeyID, subjectKeyPrefix), subjectMessage(task, s.Principal))
	if err != nil {
		return "", credstore.Record{}, grantErr(s.Principal, credstore.ErrKey, err.Error())
	}
	if !hmac.Equal(mac, s.MAC) {
		return "", credstore.Record{}, grantErr(s.Principal, ErrBinding, "")
	}
	unlock := f.o.Store.Lock(s.Principal, server)
	defer unlock()
	rec, sec, err := f.o.Store.Get(ctx, s.Principal, server)
	if errors.Is(err, credstore.ErrNotFound) {
		return "", rec, grantErr(s.Principal, ErrNotAuthorized, "call a tool of "+server+" again, directly (not from a program), to be sent to authorize")
	}
	if errors.Is(err, credstore.ErrTampered) || errors.Is(err, credstore.ErrKey) {
		return "", rec, grantErr(s.Principal, err, "")
	}
	if err != nil {
		return "", rec, err
	}
	if rec.Expiry.IsZero() || f.now().Add(refreshMargin).Before(rec.Expiry) {
		return sec.AccessToken, rec, nil
	}
	return f.refresh(ctx, server, rec, sec)
}

func (f *Flow) refresh(ctx context.Context, server string, rec credstore.Record, sec credstore.Secret) (string, credstore.Record, error) {
	if sec.RefreshToken == "" {
		_, _ = f.o.Store.Delete(ctx, rec.Principal, server)
		return "", rec, grantErr(rec.Principal, ErrGrantGone, "the access token expired at "+rec.Expiry.Format(time.RFC3339)+" and the provider issued no refresh token; call again to authorize")
	}
	c, err := f.config(server)
	if err != nil {
		return "", rec, err
	}
	oc, err := f.oauth(c)
	if err != nil {
		return "", rec, err
	}
	tok, err := oc.TokenSource(f.ctx(ctx), &oauth2.Token{RefreshToken: sec.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && (re.ErrorCode == "invalid_grant" || re.ErrorCode == "unauthorized_client" && re.Response != nil && re.Response.StatusCode < 500) {
			// Another replica may have refreshed (and rotated) it meanwhile.
			if cur, csec, gerr := f.o.Store.Get(ctx, rec.Principal, server); gerr == nil && csec.RefreshToken != sec.RefreshToken {
				return csec.AccessToken, cur, nil
			}
			_, _ = f.o.Store.Delete(ctx, rec.Principal, server)
			f.o.Audit.Credential(auditstream.Credential{Event: auditstream.EventCredentialRevoked, Principal: rec.Principal, Upstream: server, Via: "refresh", Detail: "the provider refused the refresh: " + re.ErrorCode})
			return "", rec, grantErr(rec.Principal, ErrGrantGone, "refresh refused: "+re.ErrorCode+"; call again to authorize")
		}
		return "", rec, fmt.Errorf("refreshing the user's token at %s: %s", c.TokenURL, providerError(err))
	}
	if err := checkToken(tok); err != nil {
		return "", rec, fmt.Errorf("refreshing the user's token at %s: %v", c.TokenURL, err)
	}
	next := credstore.Secret{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken}
	if next.RefreshToken == "" {
		next.RefreshToken = sec.RefreshToken // not rotated
	}
	rec.Refreshed, rec.Expiry = f.now().UTC(), tok.Expiry.UTC()
	if sc := grantedScopes(tok); sc != nil {
		rec.Scopes = sc
	}
	if err := f.o.Store.Put(ctx, rec, next); err != nil {
		return "", rec, err
	}
	return next.AccessToken, rec, nil
}

func grantedScopes(tok *oauth2.Token) []string {
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		return strings.Fields(s)
	}
	return nil
}

// providerError is what an error of the oauth2 package says, without the
// response body it may quote (which a provider could fill with anything).
func providerError(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		s := "the provider answered"
		if re.Response != nil {
			s += " " + re.Response.Status
		}
		if re.ErrorCode != "" {
			s += ": " + clip(re.ErrorCode)
			if re.ErrorDescription != "" {
				s += ": " + clip(re.ErrorDescription)
			}
		}
		return s
	}
	return clip(err.Error())
}

func clip(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
