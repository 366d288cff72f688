package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// TestHeldGrants: the calls of one sign-in share one held grant, asked for
// once even when they arrive together; another sign-in, or another
// upstream configuration, gets its own; a failure is not remembered; an
// expired sign-in's grant is asked for again; the map stays bounded.
func TestHeldGrants(t *testing.T) {
	var h heldGrants
	var asked atomic.Int32
	release := make(chan struct{})
	hold := func(v string) func() (string, error) {
		return func() (string, error) {
			asked.Add(1)
			<-release
			return v, nil
		}
	}
	c := &manifests.TokenExchange{TokenURL: "https://idp/token", ClientID: "airlock", Audience: "tickets"}
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	got := make([]string, 50)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = h.get(ctx, heldKey("alice-token", c), until, hold("rt-alice"))
		}()
	}
	// Released once the first asks: the others wait for it or find it done.
	testenv.WaitFor(t, "the first request", 10*time.Second, func() bool { return asked.Load() == 1 })
	close(release)
	wg.Wait()
	for i, g := range got {
		if g != "rt-alice" {
			t.Fatalf("call %d got %q", i, g)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("the provider was asked %d times for one sign-in; want 1", n)
	}
	if g, _ := h.get(ctx, heldKey("bob-token", c), until, hold("rt-bob")); g != "rt-bob" || asked.Load() != 2 {
		t.Fatalf("another sign-in got %q (asked %d)", g, asked.Load())
	}
	other := *c
	other.Audience = "wiki"
	if g, _ := h.get(ctx, heldKey("alice-token", &other), until, hold("rt-wiki")); g != "rt-wiki" {
		t.Fatalf("another upstream shared alice's grant: %q", g)
	}

	boom := errors.New("provider down")
	fail := func() (string, error) { asked.Add(1); return "", boom }
	if _, err := h.get(ctx, heldKey("carol-token", c), until, fail); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if g, err := h.get(ctx, heldKey("carol-token", c), until, hold("rt-carol")); err != nil || g != "rt-carol" {
		t.Fatalf("after a failure: %q %v; want a new request", g, err)
	}
	n := asked.Load()
	past := time.Now().Add(-time.Second)
	h.get(ctx, heldKey("dave-token", c), past, hold("rt-dave"))
	h.get(ctx, heldKey("dave-token", c), past, hold("rt-dave"))
	if asked.Load() != n+2 {
		t.Fatal("an expired sign-in's grant was reused")
	}
	for i := range maxHeldGrants + 10 {
		h.get(ctx, heldKey(fmt.Sprint("user-", i), c), until, func() (string, error) { return "x", nil })
	}
	if len(h.m) > maxHeldGrants {
		t.Fatalf("%d held grants remembered; want at most %d", len(h.m), maxHeldGrants)
	}
}
