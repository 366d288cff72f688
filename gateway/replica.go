package gateway

// Any replica serves any request. A client's successive HTTP requests may
// land on different gateway replicas (a round-robin load balancer, a
// restart), so nothing that binds an MCP session to its task and principal
// may live only in one process's memory. It lives in the session ID:
//
//	Mcp-Session-Id: <random>.<base64url task>.<base64url principal>.<base64url HMAC-SHA256>
//
// signed with Options.SessionKey, which every replica shares. The replica
// that answered initialize keeps the go-sdk's in-memory session (client
// capabilities, log level, the standalone GET stream, subscriptions) under
// <random>; any other replica, or the same one after a restart or after the
// session went idle, verifies the signature and serves the request with a
// request-scoped session (the go-sdk's stateless mode), taking the task and
// principal from the token. The principal must match the request's API key
// (403 otherwise), so a leaked session ID is useless to another principal.
//
// Protocol 2026-07-28 has no sessions at all: its requests (MCP-Protocol-
// Version header 2026-07-28 or later) go to the stateless handler, which
// serves server/discover, per-request _meta and the Mcp-Method / Mcp-Name
// headers; they name their task with the Airlock-Task header or get the
// principal's default task (see taskFor).

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/identity"
)

// Header names of the streamable HTTP transport.
const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
)

// StatelessProtocol is the first protocol revision without sessions
// (SEP-2575): its clients are served by the stateless handler.
const StatelessProtocol = "2026-07-28"

// MinSessionKeyBytes is the shortest Options.SessionKey accepted.
const MinSessionKeyBytes = 32

// NewSessionKey returns a random session key (64 hex characters).
func NewSessionKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sessionToken is what an Mcp-Session-Id carries.
type sessionToken struct {
	raw       string // the go-sdk's session ID on the replica that made it
	task      string
	principal string
}

var b64 = base64.RawURLEncoding

func (g *Gateway) sessionMAC(raw, task, principal string) []byte {
	m := hmac.New(sha256.New, g.sessionKey)
	m.Write([]byte("airlock-session-v1\x00" + raw + "\x00" + task + "\x00" + principal))
	return m.Sum(nil)
}

// issueSession makes the Mcp-Session-Id of a new session.
func (g *Gateway) issueSession(t sessionToken) string {
	return t.raw + "." + b64.EncodeToString([]byte(t.task)) + "." + b64.EncodeToString([]byte(t.principal)) + "." +
		b64.EncodeToString(g.sessionMAC(t.raw, t.task, t.principal))
}

var errBadSession = errors.New("session not found: the Mcp-Session-Id was not issued by a gateway with this session key; initialize again without it")

// verifySession checks an Mcp-Session-Id's signature and returns its token.
func (g *Gateway) verifySession(sid string) (sessionToken, error) {
	parts := strings.Split(sid, ".")
	if len(parts) != 4 || parts[0] == "" {
		return sessionToken{}, errBadSession
	}
	task, err1 := canonicalB64(parts[1])
	principal, err2 := canonicalB64(parts[2])
	mac, err3 := canonicalB64(parts[3])
	if err1 != nil || err2 != nil || err3 != nil {
		return sessionToken{}, errBadSession
	}
	t := sessionToken{raw: parts[0], task: string(task), principal: string(principal)}
	if !hmac.Equal(mac, g.sessionMAC(t.raw, t.task, t.principal)) {
		return sessionToken{}, errBadSession
	}
	return t, nil
}

// canonicalB64 decodes s, which must be exactly what issueSession
// writes: the decoder alone would also take other spellings of the same
// bytes (non-zero trailing bits, line breaks), so that one session would
// have many IDs.
func canonicalB64(s string) ([]byte, error) {
	// Strict refuses set trailing bits; the length, skipped line breaks.
	b, err := b64Strict.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(s) != b64.EncodedLen(len(b)) {
		return nil, errBadSession
	}
	return b, nil
}

var b64Strict = b64.Strict()

// newRawSessionID is the go-sdk session ID of a new HTTP session; the task
// of a session opened without the Airlock-Task header is "task-" + it, so
// every replica can tell the task from the token alone.
func newRawSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sessionTaskID is the task of a new HTTP session whose client named none.
func sessionTaskID(raw string) string { return "task-" + raw }

// sessionRouter sends each HTTP request to the go-sdk handler that can
// serve it on this replica.
type sessionRouter struct {
	g         *Gateway
	stateful  http.Handler // sessions made here (2024-11-05 … 2025-11-25)
	stateless http.Handler // 2026-07-28, and sessions made elsewhere
}

func (g *Gateway) mcpHandler() http.Handler {
	logger := slog.New(zerolog.NewSlogHandler(g.log))
	getServer := func(*http.Request) *mcp.Server { return g.server }
	return &sessionRouter{
		g: g,
		stateful: mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
			Logger:         logger,
			SessionTimeout: g.sessionIdle(),
		}),
		stateless: mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
			Logger:    logger,
			Stateless: true,
			// The POST is the whole request at 2026-07-28: a client that
			// goes away cancels its call's wait.
			PropagateRequestCancellation: true,
		}),
	}
}

// httpPrincipal is the principal of an HTTP request: the one Directory.Guard
// authenticated, or the open gateway's.
func (g *Gateway) httpPrincipal(r *http.Request) string {
	if p, ok := identity.FromContext(r.Context()); ok {
		return p.Name
	}
	return g.open.Name
}

func (s *sessionRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g := s.g
	// The go-sdk's DNS-rebinding protection, for the answers given here
	// before a go-sdk handler sees the request (session checks, tasks/*).
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil && loopback(la.String()) && !loopback(r.Host) {
		http.Error(w, fmt.Sprintf("Forbidden: invalid Host header %q", r.Host), http.StatusForbidden)
		return
	}
	principal := g.httpPrincipal(r)
	sid := r.Header.Get(headerSessionID)
	if sid == "" {
		if m := r.Header.Get("Mcp-Method"); r.Method == http.MethodPost && r.Header.Get(headerProtocolVersion) >= StatelessProtocol &&
			(m == methodTasksGet || m == methodTasksUpdate || m == methodTasksCancel) {
			g.serveTasks(w, r, principal) // the Tasks extension (tasks.go)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get(headerProtocolVersion) >= StatelessProtocol {
			s.stateless.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodPost {
			s.stateful.ServeHTTP(w, r) // its own 400 for GET/DELETE without a session
			return
		}
		// A new session (initialize): its ID is signed on its way out.
		task := strings.TrimSpace(r.Header.Get(HeaderTask))
		s.stateful.ServeHTTP(&tokenWriter{ResponseWriter: w, rewrite: func(raw string) string {
			if _, no := g.refused.LoadAndDelete(raw); no {
				return "" // a refused initialize opens no session
			}
			t := task
			if t == "" {
				t = sessionTaskID(raw)
			}
			return g.issueSession(sessionToken{raw: raw, task: t, principal: principal})
		}}, r)
		return
	}
	tok, err := g.verifySession(sid)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if tok.principal != principal {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": "this MCP session belongs to another principal; open your own session (initialize without Mcp-Session-Id)"})
		return
	}
	if g.liveSession(tok.raw) {
		r2 := r.Clone(r.Context())
		r2.Header.Set(headerSessionID, tok.raw)
		s.stateful.ServeHTTP(&tokenWriter{ResponseWriter: w, rewrite: func(raw string) string {
			if raw == tok.raw {
				return sid
			}
			return raw
		}}, r2)
		return
	}
	switch r.Method {
	case http.MethodPost:
		s.stateless.ServeHTTP(w, r)
	case http.MethodDelete:
		// Nothing of the session is held here; the replica that holds it
		// frees it when it goes idle.
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		// The standalone stream lives on the replica that made the session;
		// 405 tells the client that this one offers none (MCP §2.2.3).
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "this gateway replica does not hold the session's standalone stream", http.StatusMethodNotAllowed)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	}
}

// loopback reports whether a host[:port] is a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// liveSession reports whether the go-sdk session raw is open on this
// replica.
func (g *Gateway) liveSession(raw string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.live[raw]
	return ok
}

// tokenWriter replaces the go-sdk's Mcp-Session-Id on a response with the
// signed one, just before the status line is written.
type tokenWriter struct {
	http.ResponseWriter
	rewrite func(raw string) string
	done    bool
}

func (t *tokenWriter) header() {
	if t.done {
		return
	}
	t.done = true
	if raw := t.Header().Get(headerSessionID); raw != "" {
		if sid := t.rewrite(raw); sid != "" {
			t.Header().Set(headerSessionID, sid)
		} else {
			t.Header().Del(headerSessionID)
		}
	}
}

func (t *tokenWriter) WriteHeader(code int) {
	t.header()
	t.ResponseWriter.WriteHeader(code)
}

func (t *tokenWriter) Write(b []byte) (int, error) {
	t.header()
	return t.ResponseWriter.Write(b)
}

// Flush keeps server-sent events streaming through the wrapper.
func (t *tokenWriter) Flush() {
	t.header()
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (t *tokenWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// upstreamMeta is a client's request _meta without the keys of protocol
// 2026-07-28 (io.modelcontextprotocol/protocolVersion, …/clientCapabilities):
// they describe the client's exchange with the gateway, and an upstream
// that speaks an older revision refuses a request that carries them.
func upstreamMeta(m mcp.Meta) mcp.Meta {
	var out mcp.Meta
	for k, v := range m {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			continue
		}
		if out == nil {
			out = mcp.Meta{}
		}
		out[k] = v
	}
	return out
}
