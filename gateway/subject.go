package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/manifests"
)

// subjectFor is what a call of pr to server carries so that the worker can
// act as pr upstream: nil unless server exchanges tokens
// (server.http.auth.token_exchange); then pr's verified access token
// sealed to the worker's subject key, bound to the task. A caller without
// one (an API key) is refused here, before the call enters the task.
func (g *Gateway) subjectFor(ctx context.Context, taskID, server string, pr *identity.Principal) (*api.Subject, error) {
	if !g.exchanges(server) {
		return nil, nil
	}
	return g.seal(ctx, taskID, server, pr)
}

// exchanges reports whether server acts as the calling user.
func (g *Gateway) exchanges(server string) bool {
	return g.exchangeOf(server) != nil
}

// exchangeOf is server's token_exchange block, nil when it has none, with
// its ${VAR}s expanded from the environment (the gateway's manifests are
// not expanded; the worker's pool also knows AIRLOCK_DATA_DIR and
// AIRLOCK_CONFIG_DIR, which a token endpoint has no use for).
func (g *Gateway) exchangeOf(server string) *manifests.TokenExchange {
	for _, m := range g.cur().Manifests {
		if m.Server.Name == server {
			if !m.Server.ExchangesTokens() {
				return nil
			}
			return m.Server.Expand(nil).HTTP.Auth.TokenExchange
		}
	}
	return nil
}

// programSubject is what a program carries for its calls to upstreams
// that act as the user: the caller's sealed token when a tool of its table
// is on one. An API-key caller's program runs without it, and its calls
// to such an upstream fail closed, nothing sent (the pool refuses them);
// its other calls run.
//
// The grant held for an offline upstream is held at the provider of the
// first such upstream of the table by name: the program's other
// exchanging upstreams share it, which is right when they share a
// provider, the usual case.
func (g *Gateway) programSubject(ctx context.Context, taskID string, tools []api.ProgramTool, pr *identity.Principal) (*api.Subject, error) {
	var first string // an offline upstream first, then by name
	var firstOffline bool
	for _, tl := range tools {
		c := g.exchangeOf(tl.Server)
		if c == nil {
			continue
		}
		if first == "" || (c.Offline && !firstOffline) || (c.Offline == firstOffline && tl.Server < first) {
			first, firstOffline = tl.Server, c.Offline
		}
	}
	if first == "" || pr.Token == nil || pr.SubjectToken() == "" {
		return nil, nil
	}
	return g.seal(ctx, taskID, first, pr)
}

// seal seals pr's access token for task taskID; server names the upstream
// that needs it in the refusal of a caller without one.
//
// For an upstream with offline: true it first has the provider hold pr's
// grant (exchange.HoldGrant) and seals the refresh token with the access
// token, so that the call can act as pr after the access token expired.
// A provider that refuses refuses the call (the user's token is not
// exchangeable now either); one that cannot be asked refuses it too, with
// the reason: a call that may wait must not be accepted on a grant that
// is not held.
func (g *Gateway) seal(ctx context.Context, taskID, server string, pr *identity.Principal) (*api.Subject, error) {
	raw := pr.SubjectToken()
	if pr.Token == nil || raw == "" {
		return nil, errors.New(server + " acts as the calling user, and " + pr.Name + " signed in with an API key, not a token: call with a sign-in token from the identity provider (principals_from_tokens). Nothing ran")
	}
	if g.opts.SubjectKey == nil { // before asking the provider for anything
		return nil, errors.New("cannot act as " + pr.Name + " upstream: " + exchange.ErrNoSealKey.Error() + ". Nothing ran")
	}
	var refresh string
	if c := g.exchangeOf(server); c != nil && c.Offline {
		secret := os.Getenv(c.ClientSecretEnv)
		if secret == "" {
			return nil, errors.New("cannot hold " + pr.Name + "'s grant for " + server + ": server.http.auth.token_exchange.client_secret_env: the environment variable " + c.ClientSecretEnv + " is not set on this gateway (offline: true exchanges at request time); set it to the client secret. Nothing ran")
		}
		hctx, cancel := context.WithTimeout(ctx, holdTimeout)
		defer cancel()
		var err error
		refresh, err = g.held.get(hctx, heldKey(raw, c), pr.Token.Expiry, func() (string, error) {
			return exchange.HoldGrant(hctx, holdClient, exchange.Request{Config: c, ClientSecret: secret, SubjectToken: raw, Principal: pr.Name})
		})
		if err != nil {
			return nil, errors.New("cannot hold " + pr.Name + "'s grant for " + server + " (offline: true): " + err.Error() + ". Nothing ran; call again")
		}
	}
	t := pr.Token
	s, err := exchange.SealGrant(g.opts.SubjectKey, taskID, raw, refresh, exchange.Identity{
		Principal: pr.Name, Issuer: t.Issuer, Subject: t.Subject, Scopes: t.Scopes, Expiry: t.Expiry})
	if err != nil {
		return nil, errors.New("cannot act as " + pr.Name + " upstream: " + err.Error() + ". Nothing ran")
	}
	return &api.Subject{Principal: s.Principal, Issuer: s.Issuer, Subject: s.Subject, Scopes: s.Scopes, Expiry: s.Expiry,
		Held: s.Held, KeyID: s.KeyID, Peer: s.Peer, Sealed: s.Sealed}, nil
}

// heldGrants remembers, in memory, the grant the provider holds for each
// sign-in (access token) and upstream configuration, until the access
// token expires: the calls of one sign-in share one held grant, rather
// than each asking the provider for another refresh token. Concurrent
// first calls wait for one request. A failure is not remembered: the next
// call asks again. It holds what the gateway already holds (the access
// tokens of its callers, in memory), and nothing outlives the process.
type heldGrants struct {
	mu sync.Mutex
	m  map[string]*heldGrant
}

type heldGrant struct {
	done    chan struct{}
	refresh string
	err     error
	until   time.Time
}

// maxHeldGrants bounds heldGrants; past it, entries are dropped, the
// expired first.
const maxHeldGrants = 4096

func heldKey(token string, c *manifests.TokenExchange) string {
	h := sha256.New()
	for _, s := range []string{token, c.TokenURL, c.ClientID, c.Audience, c.Resource, strings.Join(c.Scopes, " ")} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return string(h.Sum(nil))
}

// get is the grant held for key, asking hold for one unless a request
// made before (or in flight) for the same sign-in, valid until until,
// has it.
func (h *heldGrants) get(ctx context.Context, key string, until time.Time, hold func() (string, error)) (string, error) {
	now := time.Now()
	h.mu.Lock()
	if e := h.m[key]; e != nil && now.Before(e.until) {
		h.mu.Unlock()
		select {
		case <-e.done:
			return e.refresh, e.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if h.m == nil {
		h.m = map[string]*heldGrant{}
	}
	if len(h.m) >= maxHeldGrants {
		for k, e := range h.m {
			if !now.Before(e.until) {
				delete(h.m, k)
			}
		}
		for k := range h.m {
			if len(h.m) < maxHeldGrants {
				break
			}
			delete(h.m, k)
		}
	}
	e := &heldGrant{done: make(chan struct{}), until: until}
	h.m[key] = e
	h.mu.Unlock()
	e.refresh, e.err = hold()
	if e.err != nil {
		h.mu.Lock()
		if h.m[key] == e {
			delete(h.m, key)
		}
		h.mu.Unlock()
	}
	close(e.done)
	return e.refresh, e.err
}

// holdTimeout bounds the provider's answer to a HoldGrant.
const holdTimeout = 10 * time.Second

// holdClient asks token endpoints for held grants.
var holdClient = &http.Client{Timeout: holdTimeout}
