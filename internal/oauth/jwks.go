package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// DefaultJWKSRefetchCooldown is the least time between two fetches of an
// issuer's key set for tokens whose key ID it does not hold
// (Options.JWKSRefetchCooldown).
const DefaultJWKSRefetchCooldown = 30 * time.Second

// The key set is fetched again on a schedule, so that a key the provider
// withdrew stops verifying: after the provider's Cache-Control max-age,
// bounded to [MinJWKSRefresh, MaxJWKSRefresh] (MaxJWKSRefresh when it
// sends none). MaxJWKSRefresh is the README's promise: a withdrawn key
// verifies nothing a minute after the provider stopped publishing it.
const (
	MinJWKSRefresh = 30 * time.Second
	MaxJWKSRefresh = time.Minute
)

// keySet is an issuer's JWKS (go-oidc's oidc.KeySet). go-oidc's own
// RemoteKeySet keeps the keys it fetched until a token names a key ID it
// does not hold, so a withdrawn key kept verifying for as long as no such
// token came; and every such token made it fetch again, so a stream of
// made-up key IDs would make airlock hammer the provider. This one fetches
// the set on a schedule (refreshAfter), and for an unknown key ID (a
// rotation) at most once per cooldown; within it such a token is refused
// without a request to the provider. A failed fetch keeps the keys of the
// last good one (a provider that cannot be reached withdrew nothing) and is
// tried again after the cooldown (at most MaxJWKSRefresh).
type keySet struct {
	url      string
	client   *http.Client
	now      func() time.Time
	cooldown time.Duration
	algs     []jose.SignatureAlgorithm

	mu      sync.Mutex // held across a fetch: one fetch at a time
	keys    []jose.JSONWebKey
	have    bool      // a fetch succeeded
	lastTry time.Time // the last fetch, good or not
	lastErr error     // of the last fetch
	next    time.Time // when the set is fetched again
}

func newKeySet(c *http.Client, url string, cooldown time.Duration, now func() time.Time, algs []string) *keySet {
	ks := &keySet{url: url, client: c, now: now, cooldown: cooldown}
	for _, a := range algs {
		ks.algs = append(ks.algs, jose.SignatureAlgorithm(a))
	}
	return ks
}

// VerifySignature implements oidc.KeySet: it returns the payload of jwt
// when a key of the issuer's current set verifies it (the key its kid
// names, or any key when it names none, as go-oidc does).
func (ks *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSigned(jwt, ks.algs)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %v", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("a JWT access token has exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	keys, err := ks.current(ctx, kid)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if kid == "" || k.KeyID == kid {
			if payload, err := jws.Verify(&k); err == nil {
				return payload, nil
			}
		}
	}
	if kid != "" && !hasKeyID(keys, kid) {
		return nil, fmt.Errorf("key ID %q is not in the issuer's key set (%s)", kid, ks.url)
	}
	return nil, errors.New("no key of the issuer's key set verifies the signature")
}

// until is when the keys held now are fetched again: a token verified
// with them is taken on trust no longer than that.
func (ks *keySet) until() time.Time {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.next
}

// current returns the keys to verify a token signed with kid, fetching
// the set first when it is due, or when it lacks kid and the cooldown has
// passed.
func (ks *keySet) current(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	now := ks.now()
	due := ks.lastTry.IsZero() || !now.Before(ks.next)
	rotated := ks.have && kid != "" && !hasKeyID(ks.keys, kid) && now.Sub(ks.lastTry) >= ks.cooldown
	if due || rotated {
		ks.fetch(ctx, now)
	}
	if !ks.have {
		return nil, fmt.Errorf("the key set at %s could not be fetched (%v); it is tried again %s after the last attempt (principals_from_tokens.jwks_refetch_cooldown)",
			ks.url, ks.lastErr, ks.next.Sub(ks.lastTry).Round(time.Second))
	}
	return ks.keys, nil
}

func (ks *keySet) fetch(ctx context.Context, now time.Time) {
	ks.lastTry = now
	keys, maxAge, err := ks.get(ctx)
	if err != nil {
		ks.lastErr = err
		ks.next = now.Add(min(ks.cooldown, MaxJWKSRefresh))
		return
	}
	ks.keys, ks.have, ks.lastErr = keys, true, nil
	ks.next = now.Add(refreshAfter(maxAge))
}

// get fetches the key set. The fetch is the issuer's, not the request's
// that needed it: a client that goes away does not make it fail.
func (ks *keySet) get(ctx context.Context) ([]jose.JSONWebKey, time.Duration, error) {
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, ks.url, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := ks.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := readLimited(resp.Body)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %v", ks.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("%s: %s", ks.url, resp.Status)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, 0, fmt.Errorf("%s: not a JSON Web Key Set: %v", ks.url, err)
	}
	return set.Keys, maxAge(resp.Header), nil
}

// refreshAfter is how long a fetched key set is used before it is fetched
// again: the provider's max-age (-1: none given), within the bounds.
func refreshAfter(maxAge time.Duration) time.Duration {
	if maxAge < 0 {
		return MaxJWKSRefresh
	}
	return min(max(maxAge, MinJWKSRefresh), MaxJWKSRefresh)
}

// maxAge reads Cache-Control: its max-age (no-store and no-cache count as
// 0), or -1 when it says neither.
func maxAge(h http.Header) time.Duration {
	age := time.Duration(-1)
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			d = strings.ToLower(strings.TrimSpace(d))
			switch {
			case d == "no-store", d == "no-cache":
				return 0
			case strings.HasPrefix(d, "max-age="):
				if n, err := strconv.Atoi(strings.Trim(strings.TrimPrefix(d, "max-age="), `"`)); err == nil && n >= 0 {
					age = time.Duration(n) * time.Second
				}
			}
		}
	}
	return age
}

func hasKeyID(keys []jose.JSONWebKey, kid string) bool {
	for _, k := range keys {
		if k.KeyID == kid {
			return true
		}
	}
	return false
}
