// Package httplimit bounds what an HTTP client can hold on airlock's
// listeners, above all before it has authenticated: how long it may take to
// send a request (headers, then body), how large a body it may send without
// credentials, how many connections may wait unauthenticated at once, and
// how long an idle connection stays open.
//
// What it leaves unbounded on purpose is the time an authenticated response
// takes: MCP's streamable HTTP keeps GET and POST streams (server-sent
// events) open for as long as a session needs them, so there is no write
// timeout. Reads are bounded instead (http.Server.ReadTimeout runs from the
// first byte of a request until its body is read to the end, after which
// net/http clears the deadline), and so is the set of connections that have
// not authenticated (Server evicts the oldest of them).
//
// A request that is refused before its body is read (a 401 from a wrong key,
// a 413) is answered at once and its connection closed: net/http would
// otherwise read up to 256 KiB of the unread body, before writing the
// answer and again after the handler, and a client that sent that body
// slowly held its connection (and a file descriptor) open forever.
//
// It imports only the standard library and never logs: Stats says what it
// did.
package httplimit

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Defaults of Limits.
const (
	DefaultReadHeaderTimeout       = 10 * time.Second
	DefaultReadTimeout             = 30 * time.Second
	DefaultIdleTimeout             = 2 * time.Minute
	DefaultMaxHeaderBytes          = 64 << 10
	DefaultMaxUnauthenticatedBody  = 256 << 10
	DefaultMaxUnauthenticatedConns = 1024
)

// Limits bound the requests and connections of one listener. Zero fields
// take the defaults.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, headers and body, from
	// its first byte. It does not bound the response: once the body is
	// read, net/http clears the connection's read deadline.
	ReadTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends no new request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the size of a request's headers.
	MaxHeaderBytes int
	// MaxUnauthenticatedBody bounds the body of a request without valid
	// credentials: a larger Content-Length is refused with 413 before the
	// body is read, and a chunked body is cut off at the limit.
	MaxUnauthenticatedBody int64
	// MaxUnauthenticatedConns bounds the connections that have not (yet)
	// sent an authenticated request. Past it, the oldest such connection is
	// closed for each new one, so a flood of connections cannot lock
	// clients out: a new connection only has to authenticate before the
	// flood opens this many more. Authenticated connections are not
	// counted and never evicted.
	MaxUnauthenticatedConns int
}

// WithDefaults returns l with its zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = DefaultReadTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxUnauthenticatedBody <= 0 {
		l.MaxUnauthenticatedBody = DefaultMaxUnauthenticatedBody
	}
	if l.MaxUnauthenticatedConns <= 0 {
		l.MaxUnauthenticatedConns = DefaultMaxUnauthenticatedConns
	}
	return l
}

// Server is an http.Server with Limits. Serve its listener with Serve, not
// with HTTP.Serve, which would leave connections uncounted.
type Server struct {
	// HTTP is the underlying server, for Shutdown and Close.
	HTTP *http.Server

	lim     Limits
	next    http.Handler
	authn   func(*http.Request) (*http.Request, bool)
	pending pending

	tooLarge atomic.Int64
	closed   atomic.Int64 // unauthenticated answers sent with Connection: close
}

// New returns a server for h under lim. authenticated tells whether a
// request carries valid credentials (the gateway passes a check of the
// credentials in its headers, gateway.Authenticator; the headers alone
// decide, so no body is read first) and returns the request to serve,
// which may carry in its context what the check learned; nil treats every
// request as unauthenticated.
func New(h http.Handler, lim Limits, authenticated func(*http.Request) (*http.Request, bool)) *Server {
	lim = lim.WithDefaults()
	s := &Server{lim: lim, next: h, authn: authenticated}
	s.pending.init(lim.MaxUnauthenticatedConns)
	s.HTTP = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*conn); ok {
				return context.WithValue(ctx, connKey{}, tc)
			}
			return ctx
		},
	}
	return s
}

// Limits are the limits in force (the defaults filled in).
func (s *Server) Limits() Limits { return s.lim }

// Serve accepts connections on ln until the server is shut down.
func (s *Server) Serve(ln net.Listener) error {
	return s.HTTP.Serve(&listener{Listener: ln, p: &s.pending})
}

// Shutdown stops the server gracefully (http.Server.Shutdown).
func (s *Server) Shutdown(ctx context.Context) error { return s.HTTP.Shutdown(ctx) }

// Stats count what the limits did.
type Stats struct {
	// Unauthenticated is the number of open connections that have not sent
	// an authenticated request.
	Unauthenticated int
	// Evicted counts the unauthenticated connections closed to make room.
	Evicted int64
	// TooLarge counts the unauthenticated requests refused for the size of
	// their body.
	TooLarge int64
	// ClosedUnread counts the unauthenticated requests answered, with
	// their connection closed, before their body was read.
	ClosedUnread int64
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	return Stats{Unauthenticated: s.pending.len(), Evicted: s.pending.evicted.Load(), TooLarge: s.tooLarge.Load(), ClosedUnread: s.closed.Load()}
}

type connKey struct{}

// ServeHTTP applies the per-request limits. An authenticated request goes
// through untouched (its connection stops counting as unauthenticated); any
// other gets its body bounded, and its connection closed after the answer
// if the handler answered without reading the whole body.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.authn != nil {
		r2, ok := s.authn(r)
		if ok {
			if c, ok := r2.Context().Value(connKey{}).(*conn); ok {
				s.pending.remove(c)
			}
			s.next.ServeHTTP(w, r2)
			return
		}
	}
	if r.ContentLength == 0 {
		s.next.ServeHTTP(w, r)
		return
	}
	if r.ContentLength > s.lim.MaxUnauthenticatedBody {
		s.tooLarge.Add(1)
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("the request body (%d bytes) is larger than the %d bytes accepted before authentication; send valid credentials (Authorization: Bearer <key>)",
			r.ContentLength, s.lim.MaxUnauthenticatedBody), http.StatusRequestEntityTooLarge)
		return
	}
	body := &body{ReadCloser: http.MaxBytesReader(w, r.Body, s.lim.MaxUnauthenticatedBody)}
	r.Body = body
	s.next.ServeHTTP(&closeUnread{ResponseWriter: w, body: body, closed: &s.closed}, r)
	if !body.eof.Load() {
		// After the handler, net/http reads up to 256 KiB of what is left
		// of the body (to reuse the connection), at the client's pace.
		// A deadline in the past makes that read fail at once, and the
		// connection close.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// body notes whether it was read to the end.
type body struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// closeUnread adds "Connection: close" to an answer written before the
// request's body was read to the end, so that net/http does not read the
// rest of the body (at the client's pace) before sending it.
type closeUnread struct {
	http.ResponseWriter
	body   *body
	closed *atomic.Int64
	wrote  bool
}

func (w *closeUnread) WriteHeader(code int) {
	if !w.wrote && code >= 200 { // 1xx answers come before the real one
		w.wrote = true
		if !w.body.eof.Load() {
			w.Header().Set("Connection", "close")
			w.closed.Add(1)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeUnread) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps streamed answers streaming through the wrapper.
func (w *closeUnread) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *closeUnread) Unwrap() http.ResponseWriter { return w.ResponseWriter }
