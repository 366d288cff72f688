package web

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxLoginAddrs bounds the addresses the login limiter remembers; past it,
// addresses whose bucket has refilled are forgotten first.
const maxLoginAddrs = 10000

// loginLimiter counts failed logins per client address in a token bucket:
// a burst of n, one token back every `every`. Successful logins cost
// nothing, so a person who mistypes once is never locked out by it.
type loginLimiter struct {
	n     int
	every time.Duration
	mu    sync.Mutex
	addrs map[string]*rate.Limiter
}

func newLoginLimiter(n int, every time.Duration) *loginLimiter {
	return &loginLimiter{n: n, every: every, addrs: map[string]*rate.Limiter{}}
}

// locked says how long addr must wait before its next login attempt, or 0.
func (l *loginLimiter) locked(addr string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.addrs[addr]
	if !ok || lim.TokensAt(now) >= 1 {
		return 0
	}
	r := lim.ReserveN(now, 1)
	defer r.CancelAt(now)
	return r.DelayFrom(now)
}

// failed takes a token from addr's bucket.
func (l *loginLimiter) failed(addr string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.addrs[addr]
	if !ok {
		if len(l.addrs) >= maxLoginAddrs {
			l.pruneLocked(now)
		}
		lim = rate.NewLimiter(rate.Every(l.every), l.n)
		l.addrs[addr] = lim
	}
	lim.AllowN(now, 1)
}

// pruneLocked forgets the addresses whose bucket is full again (they would
// start afresh anyway), and if none is, an arbitrary half.
func (l *loginLimiter) pruneLocked(now time.Time) {
	for a, lim := range l.addrs {
		if lim.TokensAt(now) >= float64(l.n) {
			delete(l.addrs, a)
		}
	}
	for a := range l.addrs {
		if len(l.addrs) < maxLoginAddrs/2 {
			break
		}
		delete(l.addrs, a)
	}
}

// clientAddr is the host of the request's remote address (no port: each
// connection has its own). Behind a proxy this is the proxy's address; the
// page does not trust X-Forwarded-For, which any client can set.
func clientAddr(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}
