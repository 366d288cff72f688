package upstream

import (
	"context"
	"net/http"
	"os"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/manifests"
)

// callBearerKey carries the bearer of one call (an exchanged token) in the
// call's context to headerTransport: every request is given the bearer of
// its own call, so that concurrent calls of two users on one shared session
// never carry each other's token.
type callBearerKey struct{}

func withCallBearer(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, callBearerKey{}, token)
}

func callBearer(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(callBearerKey{}).(string)
	return t, ok && t != ""
}

// ActAs exchanges subjectToken, the verified access token of the user
// principal, for a token of upstream server (server.http.auth.
// token_exchange), and returns ctx carrying it: a CallTool with that
// context reaches the upstream as the user. An upstream without token
// exchange returns ctx as it is and a nil token.
//
// A refusal by the provider is an *exchange.GrantError; the call must not
// be tried again with the same grant. Any other error means the provider
// could not be asked: nothing was sent upstream (ErrNotSent).
func (p *Pool) ActAs(ctx context.Context, server, subjectToken, principal string) (context.Context, *exchange.Token, error) {
	u := p.get(server)
	if u == nil {
		return ctx, nil, newCallError(ErrNotSent, nil, "unknown upstream %q", server)
	}
	if !u.cfg.ExchangesTokens() {
		return ctx, nil, nil
	}
	c := u.cfg.HTTP.Auth.TokenExchange
	secret := os.Getenv(c.ClientSecretEnv)
	if secret == "" {
		return ctx, nil, newCallError(ErrNotSent, nil, "upstream %s: server.http.auth.token_exchange.client_secret_env: the environment variable %s is not set on this worker; set it to the client secret", server, c.ClientSecretEnv)
	}
	req := exchange.Request{Config: c, ClientSecret: secret, SubjectToken: subjectToken, Principal: principal}
	if c.Actor {
		t, err := u.actor.Token()
		if err != nil {
			return ctx, nil, newCallError(ErrNotSent, err, "upstream %s: airlock's own token for actor_token: %v", server, err)
		}
		req.ActorToken = t.AccessToken
	}
	tctx, cancel := context.WithTimeout(ctx, tokenRequestTimeout)
	defer cancel()
	t, err := exchange.Exchange(tctx, tokenClient, req)
	if err != nil {
		if _, ok := err.(*exchange.GrantError); ok {
			return ctx, nil, err
		}
		return ctx, nil, newCallError(ErrNotSent, err, "upstream %s: %v", server, err)
	}
	return withCallBearer(ctx, t.AccessToken), t, nil
}

// tokenClient asks token endpoints: its own client, not the upstreams'
// transport, whose requests the send marker tracks.
var tokenClient = &http.Client{Timeout: tokenRequestTimeout}

// actorSource is airlock's own token (client credentials of the token
// exchange client), sent as actor_token when the manifest asks; nil when
// it does not.
func actorSource(s manifests.Server) oauth2.TokenSource {
	if !s.ExchangesTokens() || !s.HTTP.Auth.TokenExchange.Actor {
		return nil
	}
	c := s.HTTP.Auth.TokenExchange
	cc := &clientcredentials.Config{ClientID: c.ClientID, ClientSecret: os.Getenv(c.ClientSecretEnv), TokenURL: c.TokenURL}
	return cc.TokenSource(context.WithValue(context.Background(), oauth2.HTTPClient, tokenClient))
}

// errNoUserToken refuses a call to an upstream that acts as the user when
// the call carries no exchanged token.
func errNoUserToken() error { return &exchange.GrantError{Err: exchange.ErrNoSubject} }
