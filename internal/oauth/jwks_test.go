package oauth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/oauth"
	"github.com/airlock-run/airlock/internal/oauth/oauthtest"
)

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// countJWKS counts the requests that reach the provider's key set.
type countJWKS struct{ n *atomic.Int32 }

func (c countJWKS) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/jwks.json") {
		c.n.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestUnknownKeyIDCooldown: tokens signed with key IDs the provider's key
// set does not hold are refused without asking the provider again more
// than once per cooldown (counted at the provider's JWKS), while a real
// rotation is followed once the cooldown has passed.
func TestUnknownKeyIDCooldown(t *testing.T) {
	p := oauthtest.Start(t, resource)
	var fetches atomic.Int32
	clock := &testClock{t: time.Now()}
	v := newVerifierWith(t, func(o *oauth.Options) {
		o.HTTPClient = &http.Client{Transport: countJWKS{&fetches}, Timeout: 10 * time.Second}
		o.Now = clock.now
		o.JWKSRefetchCooldown = 30 * time.Second
	}, p)
	ctx := context.Background()
	good := p.Claims("alice")
	if _, err := v.Verify(ctx, p.Sign(t, good)); err != nil {
		t.Fatal(err)
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches for the first token, want 1", n)
	}
	refused := func(tok string) {
		t.Helper()
		_, err := v.Verify(ctx, tok)
		var e *oauth.Error
		if !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
			t.Fatalf("err %v, want 401", err)
		}
	}
	for range 20 {
		refused(oauthtest.SignWithUnknownKey(t, good))
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches after 20 unknown key IDs within the cooldown, want 1", n)
	}
	// A rotation within the cooldown is not seen yet; after it, one fetch
	// follows it, and unknown key IDs again cost nothing.
	p.Rotate(t)
	rotated := p.Sign(t, p.Claims("bob"))
	refused(rotated)
	clock.add(29 * time.Second)
	refused(rotated)
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches within the cooldown, want 1", n)
	}
	clock.add(time.Second)
	if _, err := v.Verify(ctx, rotated); err != nil {
		t.Fatalf("the new key after the cooldown: %v", err)
	}
	for range 20 {
		refused(oauthtest.SignWithUnknownKey(t, good))
	}
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d JWKS fetches, want 2 (the first, and the rotation)", n)
	}
	clock.add(30 * time.Second)
	for range 5 {
		refused(oauthtest.SignWithUnknownKey(t, good))
	}
	if n := fetches.Load(); n != 3 {
		t.Fatalf("%d JWKS fetches, want 3 (one more per cooldown)", n)
	}
}

// jwksAs counts the requests that reach the provider's key set and
// answers them with the Cache-Control header cacheControl ("-": none;
// "": the provider's own), or with 503 while down is set.
type jwksAs struct {
	n            *atomic.Int32
	cacheControl string
	down         *atomic.Bool
}

func (j jwksAs) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/jwks.json") {
		return http.DefaultTransport.RoundTrip(r)
	}
	j.n.Add(1)
	if j.down != nil && j.down.Load() {
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Header: http.Header{},
			Body: http.NoBody, Request: r}, nil
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	switch j.cacheControl {
	case "":
	case "-":
		resp.Header.Del("Cache-Control")
	default:
		resp.Header.Set("Cache-Control", j.cacheControl)
	}
	return resp, nil
}

// TestWithdrawnKeyStopsVerifying (issue 25, medium 5): a key the provider
// stops publishing verifies nothing once the key set is due again: after
// the provider's max-age, bounded to between 30s and a minute, a minute
// when it sends none. Neither a token verified before (cached) nor a new
// one signed with the withdrawn key is accepted then, while the new key
// is; and the set is not fetched more often than that.
func TestWithdrawnKeyStopsVerifying(t *testing.T) {
	for _, c := range []struct {
		cacheControl string
		due          time.Duration
	}{
		{"-", time.Minute},
		{"public, max-age=45", 45 * time.Second},
		{"max-age=5", 30 * time.Second},
		{"max-age=86400", time.Minute},
		{"", 30 * time.Second}, // the provider's own: no-cache, no-store, must-revalidate, max-age=0
	} {
		t.Run(c.cacheControl, func(t *testing.T) {
			p := oauthtest.Start(t, resource)
			var fetches atomic.Int32
			clock := &testClock{t: time.Now()}
			v := newVerifierWith(t, func(o *oauth.Options) {
				o.HTTPClient = &http.Client{Transport: jwksAs{n: &fetches, cacheControl: c.cacheControl}, Timeout: 10 * time.Second}
				o.Now = clock.now
			}, p)
			ctx := context.Background()
			verified := p.Sign(t, p.Claims("alice"))
			if _, err := v.Verify(ctx, verified); err != nil {
				t.Fatal(err)
			}
			withdrawn := p.M.Keypair
			p.Rotate(t)
			clock.add(c.due - time.Second)
			// Within max-age the set is not fetched again.
			if _, err := v.Verify(ctx, oauthtest.SignWith(t, withdrawn, p.Claims("bob"), nil)); err != nil {
				t.Fatalf("within the set's max-age: %v", err)
			}
			if n := fetches.Load(); n != 1 {
				t.Fatalf("%d fetches within max-age, want 1", n)
			}
			clock.add(time.Second)
			for name, tok := range map[string]string{
				"the token verified before": verified,
				"a new token":               oauthtest.SignWith(t, withdrawn, p.Claims("carol"), nil),
			} {
				if _, err := v.Verify(ctx, tok); err == nil || !strings.Contains(err.Error(), "bad signature") {
					t.Errorf("%s, signed with the withdrawn key, %s after it was withdrawn: %v, want bad signature", name, c.due, err)
				}
			}
			if _, err := v.Verify(ctx, p.Sign(t, p.Claims("dave"))); err != nil {
				t.Errorf("a token of the new key: %v", err)
			}
			if n := fetches.Load(); n != 2 {
				t.Errorf("%d fetches, want 2", n)
			}
		})
	}
}

// TestKeySetKeptWhileProviderDown: a provider that cannot be reached has
// withdrawn nothing: the keys of the last good fetch keep verifying, and
// the set is asked again once per cooldown, not per token.
func TestKeySetKeptWhileProviderDown(t *testing.T) {
	p := oauthtest.Start(t, resource)
	var fetches atomic.Int32
	var down atomic.Bool
	clock := &testClock{t: time.Now()}
	v := newVerifierWith(t, func(o *oauth.Options) {
		o.HTTPClient = &http.Client{Transport: jwksAs{n: &fetches, cacheControl: "-", down: &down}, Timeout: 10 * time.Second}
		o.Now = clock.now
	}, p)
	ctx := context.Background()
	if _, err := v.Verify(ctx, p.Sign(t, p.Claims("alice"))); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	clock.add(oauth.MaxJWKSRefresh)
	for i := range 5 {
		if _, err := v.Verify(ctx, p.Sign(t, p.Claims(fmt.Sprint("bob", i)))); err != nil {
			t.Fatalf("with the provider down: %v", err)
		}
	}
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (the first, and one failed refresh)", n)
	}
	down.Store(false)
	withdrawn := p.M.Keypair
	p.Rotate(t)
	clock.add(oauth.DefaultJWKSRefetchCooldown)
	if _, err := v.Verify(ctx, oauthtest.SignWith(t, withdrawn, p.Claims("carol"), nil)); err == nil {
		t.Fatal("the withdrawn key verified after the provider came back")
	}
	if n := fetches.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3", n)
	}
}
