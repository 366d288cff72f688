package upstream

import (
	"context"
	"errors"

	"github.com/airlock-run/airlock/internal/exchange"
)

// WithUserBearer returns ctx carrying token as the bearer of the call made
// with it: a user's own access token (server.http.auth.user_oauth,
// internal/consent), sent on that call's requests alone as an exchanged
// token is.
func WithUserBearer(ctx context.Context, token string) context.Context {
	return withCallBearer(ctx, token)
}

// errNoCredential: a call to an upstream with user_oauth that carries no
// user's token (a compensation, or a program whose table also has an
// upstream that exchanges tokens).
var errNoCredential = errors.New("the call carries no binding to its user's own authorization at this upstream (server.http.auth.user_oauth); compensations of such upstreams, and program calls of them beside an upstream with token_exchange, do not act as the user yet")

func errNoUserCredential() error { return &exchange.GrantError{Err: errNoCredential} }
