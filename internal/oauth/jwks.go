package oauth

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// DefaultJWKSRefetchCooldown is the least time between two fetches of an
// issuer's key set (Options.JWKSRefetchCooldown).
const DefaultJWKSRefetchCooldown = 30 * time.Second

// jwksLimiter is the transport of an issuer's key set: go-oidc fetches
// the set again for every token whose key ID it does not know (that is how
// it follows a rotation), so a stream of tokens with made-up key IDs would
// make airlock hammer the provider. Within every of the last fetch, the
// limiter answers the key set's URL with the set it fetched last (the
// token's key is then unknown and it is refused) instead of asking the
// provider again; other URLs pass through.
type jwksLimiter struct {
	base  http.RoundTripper
	url   string
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex // held across a fetch: one fetch at a time
	last   time.Time
	status int
	header http.Header
	body   []byte // nil: the last fetch failed
}

func (l *jwksLimiter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.URL.String() != l.url {
		return l.base.RoundTrip(req)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); !l.last.IsZero() && now.Sub(l.last) < l.every {
		if l.body == nil {
			return nil, fmt.Errorf("the key set at %s could not be fetched %s ago and is not asked again within %s (principals_from_tokens.jwks_refetch_cooldown)",
				l.url, now.Sub(l.last).Round(time.Second), l.every)
		}
		return l.replay(req), nil
	}
	l.last, l.body = l.now(), nil
	resp, err := l.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b, err := readLimited(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", l.url, err)
	}
	l.status, l.header = resp.StatusCode, resp.Header.Clone()
	if resp.StatusCode == http.StatusOK {
		l.body = b
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

// replay answers req with the key set fetched last.
func (l *jwksLimiter) replay(req *http.Request) *http.Response {
	return &http.Response{Status: http.StatusText(l.status), StatusCode: l.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: l.header.Clone(), Body: io.NopCloser(bytes.NewReader(l.body)), ContentLength: int64(len(l.body)), Request: req}
}

// keySetClient is c with its key-set fetches limited to one per every.
func keySetClient(c *http.Client, jwksURL string, every time.Duration, now func() time.Time) *http.Client {
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	kc := *c
	kc.Transport = &jwksLimiter{base: base, url: jwksURL, every: every, now: now}
	return &kc
}
