package oauth_test

import (
	"context"
	"errors"
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
