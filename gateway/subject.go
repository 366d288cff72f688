package gateway

import (
	"errors"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/internal/identity"
)

// subjectFor is what a call of pr to server carries so that the worker can
// act as pr upstream: nil unless server exchanges tokens
// (server.http.auth.token_exchange); then pr's verified access token
// sealed to the worker's subject key, bound to the task. A caller without
// one (an API key) is refused here, before the call enters the task.
func (g *Gateway) subjectFor(taskID, server string, pr *identity.Principal) (*api.Subject, error) {
	if !g.exchanges(server) {
		return nil, nil
	}
	return g.seal(taskID, server, pr)
}

// exchanges reports whether server acts as the calling user.
func (g *Gateway) exchanges(server string) bool {
	for _, m := range g.cur().Manifests {
		if m.Server.Name == server {
			return m.Server.ExchangesTokens()
		}
	}
	return false
}

// programSubject is what a program carries for its calls to upstreams
// that act as the user: the caller's sealed token when a tool of its table
// is on one. An API-key caller's program runs without it, and its calls
// to such an upstream fail closed, nothing sent (the pool refuses them);
// its other calls run.
func (g *Gateway) programSubject(taskID string, tools []api.ProgramTool, pr *identity.Principal) (*api.Subject, error) {
	for _, tl := range tools {
		if g.exchanges(tl.Server) {
			if pr.Token == nil || pr.SubjectToken() == "" {
				return nil, nil
			}
			return g.seal(taskID, tl.Server, pr)
		}
	}
	return nil, nil
}

// seal seals pr's access token for task taskID; server names the upstream
// that needs it in the refusal of a caller without one.
func (g *Gateway) seal(taskID, server string, pr *identity.Principal) (*api.Subject, error) {
	raw := pr.SubjectToken()
	if pr.Token == nil || raw == "" {
		return nil, errors.New(server + " acts as the calling user, and " + pr.Name + " signed in with an API key, not a token: call with a sign-in token from the identity provider (principals_from_tokens). Nothing ran")
	}
	t := pr.Token
	s, err := exchange.SealSubject(g.opts.SubjectKey, taskID, raw, exchange.Identity{
		Principal: pr.Name, Issuer: t.Issuer, Subject: t.Subject, Scopes: t.Scopes, Expiry: t.Expiry})
	if err != nil {
		return nil, errors.New("cannot act as " + pr.Name + " upstream: " + err.Error() + ". Nothing ran")
	}
	return &api.Subject{Principal: s.Principal, Issuer: s.Issuer, Subject: s.Subject, Scopes: s.Scopes, Expiry: s.Expiry,
		KeyID: s.KeyID, Peer: s.Peer, Sealed: s.Sealed}, nil
}
