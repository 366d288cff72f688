package gateway

// MCP sessions over HTTP hold goroutines and memory until they end, and a
// client that crashes never ends its own: 40,000 abandoned sessions held
// 83,000 goroutines and 517 MB. So sessions end on their own: after
// Options.SessionIdle without a request (the go-sdk's SessionTimeout), and,
// when a principal opens more than Options.MaxSessionsPerPrincipal, the
// principal's least recently used idle session is closed to make room.
// Closing frees the session's memory and releases its resource
// subscriptions; its client can go on, served request by request on its
// signed session ID like a session held by another replica (replica.go).

import (
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of the session limits.
const (
	DefaultSessionIdle             = 30 * time.Minute
	DefaultMaxSessionsPerPrincipal = 100
)

// CodeTooManySessions is the JSON-RPC error code of an initialize refused
// because every one of the principal's sessions (at the cap) has a request
// in flight, so none can be closed to make room. Like CodeAccessDenied it
// is in the implementation-defined range, clear of the go-sdk's codes.
const CodeTooManySessions = -32029

// sessionIdle is the idle time after which HTTP sessions are closed.
func (g *Gateway) sessionIdle() time.Duration {
	if g.opts.SessionIdle > 0 {
		return g.opts.SessionIdle
	}
	return DefaultSessionIdle
}

func (g *Gateway) maxSessions() int {
	if g.opts.MaxSessionsPerPrincipal > 0 {
		return g.opts.MaxSessionsPerPrincipal
	}
	return DefaultMaxSessionsPerPrincipal
}

// track marks a session's request in flight until the returned func runs,
// so the cap never closes a session in the middle of a call.
func (g *Gateway) track(req mcp.Request) func() {
	ss, ok := req.GetSession().(*mcp.ServerSession)
	if !ok || ss == nil {
		return func() {}
	}
	g.mu.Lock()
	s := g.sessions[ss]
	if s != nil {
		s.inflight++
		s.last = time.Now()
	}
	g.mu.Unlock()
	if s == nil {
		return func() {}
	}
	return func() {
		g.mu.Lock()
		s.inflight--
		s.last = time.Now()
		g.mu.Unlock()
	}
}

// makeRoomLocked closes, when principal already has the most sessions it
// may, its least recently used session without a request in flight (other
// than ss, the session initializing). It refuses when every session is
// busy.
func (g *Gateway) makeRoomLocked(ss *mcp.ServerSession, principal string) error {
	n := 0
	var oldest *mcp.ServerSession
	var oldestAt time.Time
	for k, s := range g.sessions {
		if k == ss || k == nil || s.principal != principal {
			continue
		}
		n++
		if s.inflight == 0 && (oldest == nil || s.last.Before(oldestAt)) {
			oldest, oldestAt = k, s.last
		}
	}
	max := g.maxSessions()
	if n < max {
		return nil
	}
	if oldest == nil {
		return &jsonrpc.Error{Code: CodeTooManySessions, Message: fmt.Sprintf(
			"too many sessions: principal %q has %d open, the most allowed, and all are busy; end one (HTTP DELETE with its Mcp-Session-Id) or try again when a call finishes", principal, n)}
	}
	g.forgetLocked(oldest) // counted out now; its Wait goroutine forgets it again
	g.log.Info().Str("principal", principal).Int("open", n).Str("session", oldest.ID()).
		Msg("session closed: the principal opened more sessions than allowed; its least recently used one made room")
	go func() { _ = oldest.Close() }()
	return nil
}

// sessionCount is how many sessions principal has open ("" for all).
func (g *Gateway) sessionCount(principal string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, s := range g.sessions {
		if principal == "" || s.principal == principal {
			n++
		}
	}
	return n
}
