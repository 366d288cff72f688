package credstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gocloud.dev/gcerrors"
)

// Pending is a consent flow in progress: a user sent to authorize airlock
// for an upstream, not back yet. Its ID is the consent link's secret and
// the OAuth state; only its hash names the stored object.
type Pending struct {
	Principal string
	Upstream  string
	Task      string // whose call asked
	// Verifier is the PKCE code verifier (RFC 7636) of the flow.
	Verifier string
	Created  time.Time
	Expiry   time.Time
}

// pending is the clear part of a stored Pending.
type pending struct {
	Expiry time.Time
	KeyID  string
}

// idLen is the length of a consent ID (32 random bytes, base64url).
const idLen = 43

func pendKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:]) + ".json"
}

func pendAAD(key, kid string) []byte { return []byte("airlock consent v1\x00" + key + "\x00" + kid) }

// ValidID reports whether id has the form of a consent ID (before any
// lookup: a hostile one is refused without touching the store).
func ValidID(id string) bool {
	if len(id) != idLen {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(id)
	return err == nil && len(b) == 32
}

// Begin stores p and returns its ID.
func (s *Store) Begin(ctx context.Context, p Pending) (string, error) {
	if err := s.needKeys(); err != nil {
		return "", err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	plain, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	k := pendKey(id)
	kid, nonce, ct := s.keys.seal(pendAAD(k, s.keys.current), plain)
	if err := s.write(ctx, pendPrefix+k, envelope{V: version, Pend: &pending{Expiry: p.Expiry, KeyID: kid}, Nonce: nonce, Data: ct}, true); err != nil {
		return "", err
	}
	return id, nil
}

// Peek reads the flow id names without using it up: ErrNotFound (never
// begun, or finished), ErrExpired, ErrUsed.
func (s *Store) Peek(ctx context.Context, id string) (Pending, error) {
	if !ValidID(id) {
		return Pending{}, ErrNotFound
	}
	if err := s.needKeys(); err != nil {
		return Pending{}, err
	}
	k := pendKey(id)
	if ok, err := s.b.Exists(ctx, usedPrefix+k); err == nil && ok {
		return Pending{}, ErrUsed
	}
	e, err := s.read(ctx, pendPrefix+k)
	if err != nil {
		return Pending{}, err
	}
	if e.Pend == nil {
		return Pending{}, ErrTampered
	}
	plain, err := s.keys.open(e.Pend.KeyID, pendAAD(k, e.Pend.KeyID), e.Nonce, e.Data)
	if err != nil {
		return Pending{}, err
	}
	var p Pending
	if err := json.Unmarshal(plain, &p); err != nil || !p.Expiry.Equal(e.Pend.Expiry) {
		return Pending{}, ErrTampered
	}
	if !s.now().Before(p.Expiry) {
		return p, ErrExpired
	}
	return p, nil
}

// Take uses up the flow id names and returns it: at most one Take of an
// ID succeeds, across processes (a conditional write of its used marker,
// which S3 and the file store make atomic, then the delete of the flow,
// which only one process can win either). A second one is ErrUsed.
func (s *Store) Take(ctx context.Context, id string) (Pending, error) {
	p, err := s.Peek(ctx, id)
	if err != nil {
		return p, err
	}
	k := pendKey(id)
	// The marker records when, not what.
	if err := s.write(ctx, usedPrefix+k, envelope{V: version, Pend: &pending{Expiry: s.now().UTC()}}, true); err != nil {
		return Pending{}, err
	}
	err = s.b.Delete(ctx, pendPrefix+k)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return Pending{}, ErrUsed
	}
	if err != nil {
		return Pending{}, fmt.Errorf("credential store %s: %w", s.where, err)
	}
	return p, nil
}

// IsGone reports whether err means a consent link can no longer be used.
func IsGone(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrUsed) || errors.Is(err, ErrExpired)
}
