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
	exchanges := false
	for _, m := range g.cur().Manifests {
		if m.Server.Name == server {
			exchanges = m.Server.ExchangesTokens()
			break
		}
	}
	if !exchanges {
		return nil, nil
	}
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
	return s, nil
}
