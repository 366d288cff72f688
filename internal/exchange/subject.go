// Package exchange lets a tool call reach its upstream as the user who made
// it. The gateway seals the user's verified access token to the worker's
// subject key (SealSubject); what the task's history keeps is ciphertext
// and who the token names (api.Subject). The worker opens it when the call
// runs (OpenSubject) and exchanges it at the provider for a token issued to
// the upstream (Exchange, RFC 8693), which the HTTP transport sends as that
// call's bearer.
//
// For an upstream with offline: true, the gateway also asks the provider,
// at request time, to hold the user's grant (HoldGrant: an exchange for a
// refresh token) and seals that refresh token with the access token
// (SealGrant). A call that runs after the access token expired (a long
// approval, a rollback) exchanges the refresh token instead: a fresh
// exchange, which the provider refuses once the user is disabled or the
// grant revoked.
//
// It is a library: the standard library, manifests and internal/seal
// (callers put what it seals into api.Subject); it does not log, and no
// error it returns contains a token.
package exchange

import (
	"crypto/ecdh"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlock-run/airlock/internal/seal"
)

// Environment variables of the subject key: the worker's private key, or,
// for a gateway that runs without a worker, its public half.
const (
	EnvKey       = "AIRLOCK_SUBJECT_KEY"
	EnvPublicKey = "AIRLOCK_SUBJECT_PUBLIC_KEY"
)

// NewKey makes a subject key.
func NewKey() (*ecdh.PrivateKey, error) { return seal.NewKey() }

// EncodeKey is the text form of a key's 32 bytes (base64url, no padding),
// as EnvKey and EnvPublicKey hold them.
func EncodeKey(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func decode(name, s string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(strings.TrimSpace(s), "="))
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("%s: not 32 bytes of base64url; make a key with `airlock keys subject` and set the variable to what it prints", name)
	}
	return b, nil
}

// ParseKey reads a private subject key (EnvKey's form).
func ParseKey(s string) (*ecdh.PrivateKey, error) {
	b, err := decode(EnvKey, s)
	if err != nil {
		return nil, err
	}
	return ecdh.X25519().NewPrivateKey(b)
}

// ParsePublicKey reads a public subject key (EnvPublicKey's form).
func ParsePublicKey(s string) (*ecdh.PublicKey, error) {
	b, err := decode(EnvPublicKey, s)
	if err != nil {
		return nil, err
	}
	return ecdh.X25519().NewPublicKey(b)
}

// KeysFromEnv reads the subject key from the environment: the private key
// (a worker; its public half serves the gateway in the same process), or
// the public key alone (a gateway). Neither set: both nil, and calls to
// upstreams that exchange tokens fail with a message that says to set one.
func KeysFromEnv(getenv func(string) string) (*ecdh.PrivateKey, *ecdh.PublicKey, error) {
	if s := getenv(EnvKey); s != "" {
		k, err := ParseKey(s)
		if err != nil {
			return nil, nil, err
		}
		return k, k.PublicKey(), nil
	}
	if s := getenv(EnvPublicKey); s != "" {
		p, err := ParsePublicKey(s)
		return nil, p, err
	}
	return nil, nil, nil
}

// KeyID names a public key in api.Subject.KeyID.
func KeyID(pub *ecdh.PublicKey) string {
	sum := sha256.Sum256(pub.Bytes())
	return hex.EncodeToString(sum[:8])
}

// Identity is who a subject token names, as the gateway verified it.
type Identity struct {
	Principal, Issuer, Subject string
	Scopes                     []string
	Expiry                     time.Time
}

// sealed is the plaintext of api.Subject.Sealed: the token (and the
// refresh token of a held grant), and the facts recorded beside it in the
// clear, so that a history edited to name another user or task does not
// open.
type sealed struct {
	Token     string
	Refresh   string `json:",omitempty"`
	Task      string
	Principal string
	Issuer    string
	Subject   string
	Expiry    time.Time
}

// Sealed is a subject token sealed to a worker key, with who it names in
// the clear (api.Subject holds these fields). Held: a refresh token
// (HoldGrant) is sealed with it, so that the call can still act as the
// user once the token has expired.
type Sealed struct {
	Identity
	Held   bool
	KeyID  string
	Peer   []byte
	Sealed []byte
}

// ErrNoSealKey: SealSubject and SealGrant were given no key to seal to.
var ErrNoSealKey = errors.New("no subject key: set " + EnvKey + " (worker and gateway in one process) or " + EnvPublicKey + " (gateway) to the worker's key; `airlock keys subject` makes one")

// SealSubject seals token, which names id, to the worker key pub, for
// calls of task.
func SealSubject(pub *ecdh.PublicKey, task, token string, id Identity) (*Sealed, error) {
	return SealGrant(pub, task, token, "", id)
}

// SealGrant is SealSubject with the refresh token of the user's held grant
// (HoldGrant) sealed beside the token; refresh "" holds none.
func SealGrant(pub *ecdh.PublicKey, task, token, refresh string, id Identity) (*Sealed, error) {
	if pub == nil {
		return nil, ErrNoSealKey
	}
	id.Expiry = id.Expiry.UTC()
	id.Scopes = slices.Clone(id.Scopes)
	msg, err := json.Marshal(sealed{Token: token, Refresh: refresh, Task: task, Principal: id.Principal, Issuer: id.Issuer, Subject: id.Subject, Expiry: id.Expiry})
	if err != nil {
		return nil, err
	}
	peer, ct, err := seal.Seal(pub.Bytes(), msg)
	if err != nil {
		return nil, err
	}
	return &Sealed{Identity: id, Held: refresh != "", KeyID: KeyID(pub), Peer: peer, Sealed: ct}, nil
}

// Errors of OpenSubject and Exchange that mean the user's grant cannot be
// used; every one is wrapped in a *GrantError.
var (
	ErrNoKey     = errors.New("this worker has no subject key")
	ErrWrongKey  = errors.New("the user's token is sealed to another subject key")
	ErrTampered  = errors.New("the user's sealed token does not open: it was altered, or it belongs to another task or user")
	ErrExpired   = errors.New("the user's token has expired")
	ErrRefused   = errors.New("the provider refused to exchange the user's token")
	ErrNoSubject = errors.New("the call carries no user token")
)

// GrantError says why a call could not act as its user. Nothing was sent
// upstream.
type GrantError struct {
	Principal string
	Err       error  // one of the Err… above
	Detail    string // the provider's error and description, or the expiry
}

func (e *GrantError) Error() string {
	who := e.Principal
	if who == "" {
		who = "the caller"
	}
	s := fmt.Sprintf("cannot act as %s: %v", who, e.Err)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	switch {
	case errors.Is(e.Err, ErrExpired), errors.Is(e.Err, ErrRefused):
		s += "; nothing ran. The user must call again with a current sign-in"
	case errors.Is(e.Err, ErrNoKey), errors.Is(e.Err, ErrWrongKey):
		s += "; nothing ran. Give every worker the subject key the gateway seals to (" + EnvKey + ")"
	case errors.Is(e.Err, ErrNoSubject):
		s += "; nothing ran. This upstream acts as the calling user: call with a sign-in token (principals_from_tokens), not an API key"
	default:
		s += "; nothing ran"
	}
	return s
}

func (e *GrantError) Unwrap() error { return e.Err }

// Grant is what a seal opens to: the subject token to exchange, and its
// RFC 8693 type (TokenTypeAccess, or TokenTypeRefresh for a held grant
// once the access token has expired).
type Grant struct {
	Token string
	Type  string
}

// OpenSubject opens the token sealed in s for task, with the worker key
// key: the user's access token while it is valid at now; after that, the
// refresh token of the held grant, if one is sealed with it; else
// ErrExpired.
func OpenSubject(key *ecdh.PrivateKey, task string, s *Sealed, now time.Time) (Grant, error) {
	if s == nil {
		return Grant{}, &GrantError{Err: ErrNoSubject}
	}
	fail := func(err error, detail string) (Grant, error) {
		return Grant{}, &GrantError{Principal: s.Principal, Err: err, Detail: detail}
	}
	if key == nil {
		return fail(ErrNoKey, "")
	}
	if s.KeyID != KeyID(key.PublicKey()) {
		return fail(ErrWrongKey, "sealed to key "+s.KeyID+", this worker has "+KeyID(key.PublicKey()))
	}
	msg, err := seal.Open(key, s.Peer, s.Sealed)
	if err != nil {
		return fail(ErrTampered, "")
	}
	var in sealed
	if err := json.Unmarshal(msg, &in); err != nil || in.Token == "" {
		return fail(ErrTampered, "")
	}
	if in.Task != task || in.Principal != s.Principal || in.Issuer != s.Issuer || in.Subject != s.Subject || !in.Expiry.Equal(s.Expiry) || (in.Refresh != "") != s.Held {
		return fail(ErrTampered, "")
	}
	if in.Expiry.IsZero() || now.Before(in.Expiry) {
		return Grant{Token: in.Token, Type: TokenTypeAccess}, nil
	}
	if in.Refresh != "" {
		return Grant{Token: in.Refresh, Type: TokenTypeRefresh}, nil
	}
	return fail(ErrExpired, "it expired at "+in.Expiry.Format(time.RFC3339)+", before the call ran")
}
