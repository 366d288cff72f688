package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/consent"
	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/internal/upstream"
)

// actAsUser makes the call act as its user upstream: with the user's own
// credential when the gateway bound the call to it (server.http.auth.
// user_oauth: the access token stored at their consent, refreshed now if
// it is about to expire), else by token exchange (actAs, subject.go). A
// credential that is gone (never given, revoked, refused by the provider)
// is a non-retryable UserGrant failure: nothing ran, and the user's next
// call is sent to consent again.
func (a *Activities) actAsUser(ctx context.Context, in api.CallToolInput) (context.Context, *api.ActedAs, error) {
	if in.Subject == nil || !consent.IsBinding(in.Subject.KeyID) {
		return a.actAs(ctx, in)
	}
	if a.Consent == nil {
		return ctx, nil, temporal.NewNonRetryableApplicationError(in.Server+" acts as the user with their own authorization (user_oauth), and this worker has no credential store: set AIRLOCK_CREDENTIAL_KEYS on every worker. Nothing ran", api.ErrTypeUserGrant, nil)
	}
	s := in.Subject
	if s.Subject != s.Principal || s.Issuer != consent.Issuer {
		return ctx, nil, classify(in, &exchange.GrantError{Principal: s.Principal, Err: consent.ErrBinding})
	}
	tok, rec, err := a.Consent.Token(ctx, in.TaskID, in.Server, &consent.Binding{Principal: s.Principal, KeyID: s.KeyID, MAC: s.Sealed})
	var ge *exchange.GrantError
	if errors.As(err, &ge) {
		return ctx, nil, classify(in, err)
	}
	if err != nil { // the store or the provider could not be reached: nothing was sent
		return ctx, nil, temporal.NewApplicationErrorWithCause(in.Server+": the user's credential: "+err.Error(), api.ErrTypeNotSent, err)
	}
	return upstream.WithUserBearer(ctx, tok), &api.ActedAs{Subject: rec.Principal, Issuer: in.Subject.Issuer, Scopes: rec.Scopes}, nil
}
