package api

import "time"

// ErrTypeUserGrant: the call was to run as its user (token exchange) and
// the user's grant could not be used: their token had expired or was
// revoked when the call ran, the provider refused the exchange, or the
// worker cannot open the sealed token. Nothing was sent; not retried.
const ErrTypeUserGrant = "UserGrant"

// Subject is who a call acts as upstream, for an upstream configured with
// server.http.auth.token_exchange: the facts of the user's verified access
// token, which the task's history keeps, and the token itself sealed
// (X25519, internal/seal) to the worker's subject key, so that the history
// never holds it in the clear and only a worker with that key can use it.
// The worker exchanges it for an upstream token when the call runs.
type Subject struct {
	// Principal is airlock's name for the user ("sub@issuer-name").
	Principal string
	Issuer    string
	Subject   string
	Scopes    []string  `json:",omitempty"`
	Expiry    time.Time // when the sealed token stops being valid
	// Held: the user's grant is held at the provider (offline: true): a
	// refresh token is sealed with the access token, and the worker
	// exchanges it when the call runs after Expiry.
	Held bool `json:",omitempty"`
	// KeyID names the worker key it is sealed to (its public key's
	// digest), so that a worker with another key says so.
	KeyID  string
	Peer   []byte
	Sealed []byte
}

// ActedAs is the identity a call reached its upstream with, as the token
// exchange issued it: recorded in the history instead of the token.
type ActedAs struct {
	Subject  string
	Issuer   string
	Actor    string   `json:",omitempty"` // airlock's client ID, when the provider was told (actor_token)
	Audience string   `json:",omitempty"`
	Resource string   `json:",omitempty"`
	Scopes   []string `json:",omitempty"`
	// Held: the user's token had expired; the exchange was of the grant
	// the provider held (Subject.Held).
	Held bool `json:",omitempty"`
}
