package gateway

// Any replica serves any request. A client's successive HTTP requests may
// land on different gateway replicas (a round-robin load balancer, a
// restart), so nothing that binds an MCP session to its task and principal
// may live only in one process's memory. It lives in the session ID:
//
//	Mcp-Session-Id: <random>.<base64url task>.<base64url principal>.<base64url HMAC-SHA256>
//
// signed with Options.SessionKey, which every replica shares (sessions.go
// signs and verifies it). The replica that answered initialize keeps the
// go-sdk's in-memory session (client capabilities, log level, the
// standalone GET stream, subscriptions) under <random>; any other replica,
// or the same one after a restart or after the session went idle, verifies
// the signature and serves the request with a request-scoped session (the
// go-sdk's stateless mode), taking the task and principal from the token.
// The principal must match the request's API key (403 otherwise,
// ownedSession), so a leaked session ID is useless to another principal.
//
// Protocol 2026-07-28 has no sessions at all: its requests (MCP-Protocol-
// Version header 2026-07-28 or later) go to the stateless handler, which
// serves server/discover, per-request _meta and the Mcp-Method / Mcp-Name
// headers; they name their task with the Airlock-Task header or get the
// principal's default task (see taskFor).

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// Header names of the streamable HTTP transport.
const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
)

// StatelessProtocol is the first protocol revision without sessions
// (SEP-2575): its clients are served by the stateless handler.
const StatelessProtocol = "2026-07-28"

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
			// Priming events, retry and resumption of this replica's
			// streams (eventstore.go).
			EventStore: newEventStore(streamEventBytes, streamEventAge),
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

// httpPrincipal is the principal of an HTTP request: the one the edge
// authenticated, or the open gateway's.
func (g *Gateway) httpPrincipal(r *http.Request) string {
	if p, ok := edgePrincipal(r); ok {
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
			g.serveTasks(w, r, principal) // the Tasks extension (mcptasks.go)
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
		pw := &primeWriter{hold: true, ResponseWriter: &tokenWriter{ResponseWriter: w, rewrite: func(raw string) string {
			if _, no := g.refused.LoadAndDelete(raw); no {
				return "" // a refused initialize opens no session
			}
			t := task
			if t == "" {
				t = sessionTaskID(raw)
			}
			return g.issueSession(sessionToken{raw: raw, task: t, principal: principal})
		}}}
		s.stateful.ServeHTTP(pw, r)
		pw.release()
		return
	}
	tok, err := g.ownedSession(sid, principal)
	switch {
	case errors.Is(err, errForeignSession):
		writeJSONError(w, http.StatusForbidden, err.Error())
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if g.liveSession(tok.raw) {
		r2 := r.Clone(r.Context())
		r2.Header.Set(headerSessionID, tok.raw)
		var pw http.ResponseWriter = &tokenWriter{ResponseWriter: w, rewrite: func(raw string) string {
			if raw == tok.raw {
				return sid
			}
			return raw
		}}
		if r.Method == http.MethodPost {
			pw = &primeWriter{ResponseWriter: pw}
		}
		s.stateful.ServeHTTP(pw, r2)
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
		if r.Header.Get("Last-Event-ID") != "" {
			// A resume of a stream made on another replica, which keeps its
			// events (eventstore.go). An empty stream ends the client's wait
			// for that one call ("terminated without response") and keeps
			// its session: an error status would make a go-sdk client fail
			// the whole session. The call itself goes on in its task.
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache, no-transform")
			w.WriteHeader(http.StatusOK)
			fmt.Fprintf(w, ": %s\n\n", foreignResume)
			return
		}
		// The standalone stream lives on the replica that made the session;
		// 405 tells the client that this one offers none (MCP §2.2.3).
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "this gateway replica does not hold the session's standalone stream", http.StatusMethodNotAllowed)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	}
}

// foreignResume is the comment on the empty stream that answers a resume
// on a replica that does not hold the session.
var foreignResume = "this gateway replica does not hold the events of this session's streams (the replica that opened the session keeps them for " +
	streamEventAge.String() + "); the call goes on in its task: call again with the same _meta." + MetaIdempotencyKey + " to get its outcome without running it twice"

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
