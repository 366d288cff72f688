// Package credstore keeps the users' own credentials for third-party
// upstreams (server.http.auth.user_oauth): the refresh and access tokens a
// provider issued when a user authorized airlock, encrypted with AES-256-GCM
// under a key of the deployment (EnvKeys, with key IDs for rotation),
// bound to the principal and the upstream (both are the additional data:
// a record copied to another user's name does not open), in the blob
// store every gateway and worker of a cluster already shares (file:// or
// s3://, under credentials/). Who, which upstream, scopes and times are
// kept beside the ciphertext in the clear, so that listing needs no key
// and shows no token.
//
// It also keeps the consent flows in progress (consents/), encrypted the
// same way, each taken at most once (Take).
//
// It is a library: no logging, and no error it returns contains a token.
package credstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	gcblob "gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/airlock-run/airlock/internal/blob"
)

// Errors; each is wrapped with what it concerns.
var (
	ErrNotFound = errors.New("no credential")
	ErrKey      = errors.New("credential key missing")
	ErrTampered = errors.New("the stored credential does not open: it was altered, or it belongs to another user or upstream")
	ErrUsed     = errors.New("this consent link was used already")
	ErrExpired  = errors.New("this consent link has expired")
)

// maxRecordBytes bounds a stored object (tokens of real providers are a
// few KB).
const maxRecordBytes = 256 << 10

const (
	credPrefix = "credentials/"
	pendPrefix = "consents/"
	usedPrefix = "consents-used/"
	version    = 1
)

// Record is what is known of a stored credential without its key: who,
// for which upstream, what it grants and when.
type Record struct {
	Principal string
	Upstream  string
	Scopes    []string  `json:",omitempty"`
	Obtained  time.Time // when the user authorized
	Refreshed time.Time `json:",omitzero"` // the last refresh
	// Expiry is the access token's (zero: the provider did not say).
	Expiry time.Time `json:",omitzero"`
	// Refreshable: the provider issued a refresh token.
	Refreshable bool `json:",omitempty"`
	KeyID       string
}

// Secret is the encrypted part.
type Secret struct {
	AccessToken  string `json:"a"`
	RefreshToken string `json:"r,omitempty"`
}

// envelope is a stored object.
type envelope struct {
	V     int
	Rec   *Record  `json:",omitempty"`
	Pend  *pending `json:",omitempty"`
	Nonce []byte
	Data  []byte
}

// Store is a credential store. It is safe for concurrent use.
type Store struct {
	b     *gcblob.Bucket
	keys  *Keyring
	where string
	now   func() time.Time

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// Open opens the store in the blob store raw names (blob.Open's URLs).
// keys may be nil for a store that only lists and deletes.
func Open(ctx context.Context, raw string, keys *Keyring) (*Store, error) {
	b, err := blob.OpenBucket(ctx, raw, "")
	if err != nil {
		return nil, fmt.Errorf("credential store: %w", err)
	}
	return &Store{b: b, keys: keys, where: raw, now: time.Now, locks: map[string]*sync.Mutex{}}, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.b.Close() }

// String is where it is.
func (s *Store) String() string { return s.where }

// Keys is the keyring (nil when opened without).
func (s *Store) Keys() *Keyring { return s.keys }

// SetClock replaces time.Now (tests).
func (s *Store) SetClock(now func() time.Time) { s.now = now }

func credKey(principal, upstream string) string {
	sum := sha256.Sum256([]byte(principal + "\x00" + upstream))
	return credPrefix + hex.EncodeToString(sum[:]) + ".json"
}

func credAAD(principal, upstream, kid string) []byte {
	return []byte("airlock credential v1\x00" + principal + "\x00" + upstream + "\x00" + kid)
}

// Lock serialises the refreshes of one credential in this process; the
// returned function unlocks.
func (s *Store) Lock(principal, upstream string) func() {
	k := credKey(principal, upstream)
	s.mu.Lock()
	l := s.locks[k]
	if l == nil {
		l = &sync.Mutex{}
		s.locks[k] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (s *Store) needKeys() error {
	if s.keys == nil {
		return fmt.Errorf("%w: %s is not set; set it on every gateway and worker (`airlock credentials key` makes one)", ErrKey, EnvKeys)
	}
	return nil
}

// Put stores (replaces) the credential of rec.Principal for rec.Upstream.
func (s *Store) Put(ctx context.Context, rec Record, sec Secret) error {
	if err := s.needKeys(); err != nil {
		return err
	}
	if rec.Principal == "" || rec.Upstream == "" {
		return errors.New("credential store: a credential names a principal and an upstream")
	}
	plain, err := json.Marshal(sec)
	if err != nil {
		return err
	}
	rec.Scopes = slices.Clone(rec.Scopes)
	rec.Refreshable = sec.RefreshToken != ""
	rec.KeyID = s.keys.current
	kid, nonce, ct := s.keys.seal(credAAD(rec.Principal, rec.Upstream, s.keys.current), plain)
	rec.KeyID = kid
	return s.write(ctx, credKey(rec.Principal, rec.Upstream), envelope{V: version, Rec: &rec, Nonce: nonce, Data: ct}, false)
}

func (s *Store) write(ctx context.Context, key string, e envelope, ifNotExist bool) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := s.b.WriteAll(ctx, key, b, &gcblob.WriterOptions{ContentType: "application/json", IfNotExist: ifNotExist}); err != nil {
		if gcerrors.Code(err) == gcerrors.FailedPrecondition {
			return ErrUsed
		}
		return fmt.Errorf("credential store %s: writing: %w", s.where, err)
	}
	return nil
}

func (s *Store) read(ctx context.Context, key string) (*envelope, error) {
	r, err := s.b.NewReader(ctx, key, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("credential store %s: reading: %w", s.where, err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxRecordBytes+1))
	if err != nil {
		return nil, fmt.Errorf("credential store %s: reading: %w", s.where, err)
	}
	if len(b) > maxRecordBytes {
		return nil, fmt.Errorf("%w: a stored object is larger than %d bytes", ErrTampered, maxRecordBytes)
	}
	var e envelope
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || dec.More() || e.V != version {
		return nil, ErrTampered
	}
	return &e, nil
}

// Get returns the credential of principal for upstream: ErrNotFound
// (wrapped) when they have not authorized airlock (or it was revoked).
func (s *Store) Get(ctx context.Context, principal, upstream string) (Record, Secret, error) {
	if err := s.needKeys(); err != nil {
		return Record{}, Secret{}, err
	}
	e, err := s.read(ctx, credKey(principal, upstream))
	if err != nil {
		return Record{}, Secret{}, err
	}
	if e.Rec == nil || e.Rec.Principal != principal || e.Rec.Upstream != upstream {
		return Record{}, Secret{}, ErrTampered
	}
	plain, err := s.keys.open(e.Rec.KeyID, credAAD(principal, upstream, e.Rec.KeyID), e.Nonce, e.Data)
	if err != nil {
		return Record{}, Secret{}, err
	}
	var sec Secret
	if err := json.Unmarshal(plain, &sec); err != nil || sec.AccessToken == "" {
		return Record{}, Secret{}, ErrTampered
	}
	return *e.Rec, sec, nil
}

// Has reports whether principal has a credential for upstream (without
// opening it).
func (s *Store) Has(ctx context.Context, principal, upstream string) (bool, error) {
	ok, err := s.b.Exists(ctx, credKey(principal, upstream))
	if err != nil {
		return false, fmt.Errorf("credential store %s: %w", s.where, err)
	}
	return ok, nil
}

// Delete removes the credential; false when there was none.
func (s *Store) Delete(ctx context.Context, principal, upstream string) (bool, error) {
	err := s.b.Delete(ctx, credKey(principal, upstream))
	switch {
	case gcerrors.Code(err) == gcerrors.NotFound:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("credential store %s: deleting: %w", s.where, err)
	}
	return true, nil
}

// List returns every stored credential's record (no key needed), by
// principal then upstream. An object that cannot be read is reported in
// bad, not hidden.
func (s *Store) List(ctx context.Context) (recs []Record, bad []string, err error) {
	it := s.b.List(&gcblob.ListOptions{Prefix: credPrefix})
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("credential store %s: listing: %w", s.where, err)
		}
		if o.IsDir || !strings.HasSuffix(o.Key, ".json") {
			continue
		}
		e, err := s.read(ctx, o.Key)
		if err != nil || e.Rec == nil || credKey(e.Rec.Principal, e.Rec.Upstream) != o.Key {
			if !errors.Is(err, ErrNotFound) { // deleted meanwhile
				bad = append(bad, o.Key)
			}
			continue
		}
		recs = append(recs, *e.Rec)
	}
	slices.SortFunc(recs, func(a, b Record) int {
		if c := strings.Compare(a.Principal, b.Principal); c != 0 {
			return c
		}
		return strings.Compare(a.Upstream, b.Upstream)
	})
	return recs, bad, nil
}

// Rekey re-encrypts every credential not under the current key; it
// returns how many it rewrote.
func (s *Store) Rekey(ctx context.Context) (int, error) {
	recs, bad, err := s.List(ctx)
	if err != nil {
		return 0, err
	}
	if len(bad) > 0 {
		return 0, fmt.Errorf("%w: %s cannot be read; delete it or restore it, then rekey", ErrTampered, bad[0])
	}
	n := 0
	for _, r := range recs {
		if r.KeyID == s.keys.current {
			continue
		}
		unlock := s.Lock(r.Principal, r.Upstream)
		rec, sec, err := s.Get(ctx, r.Principal, r.Upstream)
		if err == nil {
			err = s.Put(ctx, rec, sec)
		}
		unlock()
		if errors.Is(err, ErrNotFound) {
			continue // revoked meanwhile
		}
		if err != nil {
			return n, fmt.Errorf("%s at %s: %w", r.Principal, r.Upstream, err)
		}
		n++
	}
	return n, nil
}
