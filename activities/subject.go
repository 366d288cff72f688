package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/exchange"
)

// Actor is the part of the pool that makes a call act as its user: it
// exchanges the user's token for one of the upstream (RFC 8693) and returns
// a context that carries it to that call's requests alone. *upstream.Pool
// implements it.
type Actor interface {
	ActAs(ctx context.Context, server string, subject exchange.Grant, principal string) (context.Context, *exchange.Token, error)
}

// actAs opens the user's token sealed in the call's input and exchanges
// it, now, for a token of the upstream: the access token while it is
// valid, else the refresh token of the grant the provider holds
// (offline: true), so a call approved hours later, or a compensation, still
// acts as its user, or fails with UserGrant if the provider refuses. A call without a sealed token goes
// on as it is: the pool refuses it if its upstream acts as the user. A
// grant that cannot be used (expired, revoked, sealed to another key) is
// a non-retryable UserGrant failure: nothing ran.
func (a *Activities) actAs(ctx context.Context, in api.CallToolInput) (context.Context, *api.ActedAs, error) {
	if in.Subject == nil {
		return ctx, nil, nil
	}
	act, ok := a.Tools.(Actor)
	if !ok {
		return ctx, nil, temporal.NewNonRetryableApplicationError("this worker's tool caller cannot act as a user", api.ErrTypeInternal, nil)
	}
	s := in.Subject
	grant, err := exchange.OpenSubject(a.SubjectKey, in.TaskID, &exchange.Sealed{
		Identity: exchange.Identity{Principal: s.Principal, Issuer: s.Issuer, Subject: s.Subject, Scopes: s.Scopes, Expiry: s.Expiry},
		Held:     s.Held, KeyID: s.KeyID, Peer: s.Peer, Sealed: s.Sealed}, time.Now())
	if err != nil {
		return ctx, nil, classify(in, err)
	}
	ctx, t, err := act.ActAs(ctx, in.Server, grant, in.Subject.Principal)
	if err != nil {
		return ctx, nil, classify(in, err)
	}
	if t == nil { // the upstream does not exchange tokens: the seal is unused
		return ctx, nil, nil
	}
	return ctx, &api.ActedAs{Subject: s.Subject, Issuer: s.Issuer, Actor: t.Actor, Audience: t.Audience, Resource: t.Resource, Scopes: t.Scopes,
		Held: grant.Type == exchange.TokenTypeRefresh}, nil
}
