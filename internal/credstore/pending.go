package credstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
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
// the OAuth state. A principal has at most one flow per upstream: a new
// one replaces the one before (whose link then no longer works), so that
// calls repeated without consenting cannot fill the store.
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
	IDHash string `json:",omitempty"` // sha256 of the ID: which flow holds the slot
}

// An ID is a slot (16 bytes of the hash of principal and upstream, which
// names the stored object) and a secret (32 random bytes), base64url.
const (
	slotLen = 16
	idLen   = 64 // base64url of slotLen+32 bytes
)

func slotOf(principal, upstream string) []byte {
	sum := sha256.Sum256([]byte("consent slot\x00" + principal + "\x00" + upstream))
	return sum[:slotLen]
}

func idHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

func pendAAD(key, kid string) []byte { return []byte("airlock consent v1\x00" + key + "\x00" + kid) }

// parseID returns the object key of the flow id names ("" when id does
// not have the form of an ID: a hostile one is refused without touching
// the store).
func parseID(id string) string {
	if len(id) != idLen {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || len(b) != slotLen+32 {
		return ""
	}
	return pendPrefix + hex.EncodeToString(b[:slotLen]) + ".json"
}

// ValidID reports whether id has the form of a consent ID.
func ValidID(id string) bool { return parseID(id) != "" }

// Begin stores p, replacing the flow of the same principal and upstream
// if one is in progress, and returns its ID.
func (s *Store) Begin(ctx context.Context, p Pending) (string, error) {
	if err := s.needKeys(); err != nil {
		return "", err
	}
	b := make([]byte, slotLen+32)
	copy(b, slotOf(p.Principal, p.Upstream))
	if _, err := rand.Read(b[slotLen:]); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	plain, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	k := parseID(id)
	kid, nonce, ct := s.keys.seal(pendAAD(k+idHash(id), s.keys.current), plain)
	if err := s.write(ctx, k, envelope{V: version, Pend: &pending{Expiry: p.Expiry, KeyID: kid, IDHash: idHash(id)}, Nonce: nonce, Data: ct}, false); err != nil {
		return "", err
	}
	return id, nil
}

// Peek reads the flow id names without using it up: ErrNotFound (never
// begun, replaced by a newer one, or finished), ErrExpired, ErrUsed.
func (s *Store) Peek(ctx context.Context, id string) (Pending, error) {
	k := parseID(id)
	if k == "" {
		return Pending{}, ErrNotFound
	}
	if err := s.needKeys(); err != nil {
		return Pending{}, err
	}
	h := idHash(id)
	if ok, err := s.b.Exists(ctx, usedPrefix+h); err == nil && ok {
		return Pending{}, ErrUsed
	}
	e, err := s.read(ctx, k)
	if err != nil {
		return Pending{}, err
	}
	if e.Pend == nil {
		return Pending{}, ErrTampered
	}
	if subtle.ConstantTimeCompare([]byte(e.Pend.IDHash), []byte(h)) != 1 {
		return Pending{}, ErrNotFound // the slot holds a newer flow
	}
	plain, err := s.keys.open(e.Pend.KeyID, pendAAD(k+h, e.Pend.KeyID), e.Nonce, e.Data)
	if err != nil {
		return Pending{}, err
	}
	var p Pending
	if err := json.Unmarshal(plain, &p); err != nil || !p.Expiry.Equal(e.Pend.Expiry) || parseID(id) != pendPrefix+hex.EncodeToString(slotOf(p.Principal, p.Upstream))+".json" {
		return Pending{}, ErrTampered
	}
	if !s.now().Before(p.Expiry) {
		return p, ErrExpired
	}
	return p, nil
}

// Take uses up the flow id names and returns it: at most one Take of an
// ID succeeds, across processes (a conditional write of its used marker,
// which S3 makes atomic, then the delete of the flow, which only one
// process can win on a file store either). A second one is ErrUsed.
func (s *Store) Take(ctx context.Context, id string) (Pending, error) {
	p, err := s.Peek(ctx, id)
	if err != nil {
		return p, err
	}
	// The marker records when, not what.
	if err := s.write(ctx, usedPrefix+idHash(id), envelope{V: version, Pend: &pending{Expiry: s.now().UTC()}}, true); err != nil {
		return Pending{}, err
	}
	err = s.b.Delete(ctx, parseID(id))
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
