package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// discardLog takes net/http's own error lines (a client that hangs up
// mid-request); what matters is reported as a Refusal.
var discardLog = log.New(io.Discard, "", 0)

// Refusal is one connection the proxy did not make.
type Refusal struct {
	// Server is the proxy's server (Config.Server).
	Server string
	// Host is what the server asked for ("host:port", as it wrote it,
	// truncated to 300 bytes).
	Host string
	// Reason says why, for the log.
	Reason string
	// Kind classifies Reason for a metric: one of the Refused* constants.
	Kind string
}

// Refusal kinds.
const (
	RefusedNotAllowed = "not_allowed" // no entry names the host, or not on that port
	RefusedAddress    = "address"     // the name resolves to a loopback, private, link-local or metadata address
	RefusedResolve    = "resolve"     // the name does not resolve
	RefusedProtocol   = "protocol"    // not a proxy request (no absolute http:// URL, not CONNECT)
	RefusedLimit      = "limit"       // too many connections at once
)

// Resolver looks up a name's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config is one server's proxy.
type Config struct {
	// Server names the server, in refusals.
	Server string
	Allow  Allowlist
	// MaxConns bounds the connections open at once, idle ones included
	// (default 64); past it a connection is answered 503 and closed.
	MaxConns int
	// OnRefusal is told of every refusal (from the connection's
	// goroutine; it should return quickly).
	OnRefusal func(Refusal)
	// Resolver defaults to net.DefaultResolver; DialTimeout to 10s.
	Resolver    Resolver
	DialTimeout time.Duration
}

// DefaultMaxConns is Config.MaxConns's default.
const DefaultMaxConns = 64

// Proxy is an HTTP forward proxy (CONNECT, and plain HTTP requests with
// an absolute URI) that connects only where its allowlist says.
type Proxy struct {
	cfg       Config
	srv       *http.Server
	transport *http.Transport
	sem       chan struct{}

	mu     sync.Mutex
	ln     net.Listener
	dir    string // the socket's private directory, removed by Close
	conns  map[net.Conn]struct{}
	closed bool
}

// New makes a proxy; serve it with Serve or ListenUnix.
func New(cfg Config) *Proxy {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	p := &Proxy{cfg: cfg, sem: make(chan struct{}, cfg.MaxConns), conns: map[net.Conn]struct{}{}}
	p.transport = &http.Transport{
		Proxy: nil, // never the environment's proxy
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return p.dial(ctx, addr)
		},
		MaxIdleConns:          8,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          discardLog,
	}
	return p
}

// ListenUnix serves the proxy on a unix socket in a new private
// directory (mode 0700) under dir ("" for the system's temporary
// directory), returning the socket's path. Close removes it.
func (p *Proxy) ListenUnix(dir string) (string, error) {
	d, err := os.MkdirTemp(dir, "airlock-egress-")
	if err != nil {
		return "", fmt.Errorf("egress proxy: %w", err)
	}
	path := filepath.Join(d, "proxy.sock")
	// sun_path holds 108 bytes with its NUL.
	if len(path) > 107 {
		_ = os.RemoveAll(d)
		return "", fmt.Errorf("egress proxy: the socket path %s is longer than a unix socket allows (107 bytes); set TMPDIR to a shorter directory", path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		_ = os.RemoveAll(d)
		return "", fmt.Errorf("egress proxy: %w", err)
	}
	p.mu.Lock()
	p.dir = d
	p.mu.Unlock()
	go func() { _ = p.Serve(ln) }()
	return path, nil
}

// Serve answers proxy requests on ln until Close.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ln.Close()
		return http.ErrServerClosed
	}
	p.ln = ln
	p.mu.Unlock()
	return p.srv.Serve(&limitListener{Listener: ln, p: p})
}

// Close stops the proxy, closes every connection it holds (tunnels
// included) and removes the socket's directory.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := slices.Collect(func(yield func(net.Conn) bool) {
		for c := range p.conns {
			if !yield(c) {
				return
			}
		}
	})
	dir := p.dir
	p.mu.Unlock()
	err := p.srv.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.transport.CloseIdleConnections()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	return err
}

func (p *Proxy) refuse(host, kind, format string, args ...any) *refusedError {
	if len(host) > maxEntry {
		host = host[:maxEntry]
	}
	r := Refusal{Server: p.cfg.Server, Host: host, Kind: kind, Reason: fmt.Sprintf(format, args...)}
	if p.cfg.OnRefusal != nil {
		p.cfg.OnRefusal(r)
	}
	return &refusedError{r}
}

// refusedError is a dial the allowlist refused.
type refusedError struct{ r Refusal }

func (e *refusedError) Error() string { return "egress refused: " + e.r.Reason }

// ServeHTTP answers one proxy request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" {
		e := p.refuse(r.Host, RefusedProtocol, "%s %.100q is not a proxy request (CONNECT host:port, or an absolute http:// URL)", r.Method, r.RequestURI)
		http.Error(w, e.Error(), http.StatusBadRequest)
		return
	}
	if r.URL.Scheme != "http" {
		e := p.refuse(r.URL.Host, RefusedProtocol, "a plain request for a %.20s:// URL; the proxy forwards http:// only and tunnels the rest with CONNECT", r.URL.Scheme)
		http.Error(w, e.Error(), http.StatusBadRequest)
		return
	}
	host := r.URL.Host
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = pr.In.URL
			pr.Out.Host = host // as the client wrote it
		},
		Transport: p.transport,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if re := (*refusedError)(nil); errors.As(err, &re) {
				http.Error(w, re.Error(), http.StatusForbidden)
				return
			}
			http.Error(w, "egress proxy: "+err.Error(), http.StatusBadGateway)
		},
		ErrorLog: discardLog,
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		r.URL.Host = net.JoinHostPort(strings.Trim(host, "[]"), "80")
	}
	rp.ServeHTTP(w, r)
}

// connect tunnels a CONNECT request to an allowed host.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	up, err := p.dial(r.Context(), r.Host)
	if err != nil {
		code := http.StatusBadGateway
		if re := (*refusedError)(nil); errors.As(err, &re) {
			code = http.StatusForbidden
		}
		http.Error(w, err.Error(), code)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "egress proxy: cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	down, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	_ = down.SetDeadline(time.Time{})
	_, err = io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n")
	if err != nil {
		up.Close()
		down.Close()
		return
	}
	pipe(down, brw.Reader, up)
}

// pipe copies both ways until both ends are done, then closes both.
func pipe(down net.Conn, downR *bufio.Reader, up net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, downR)
		closeWrite(up)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(down, up)
		closeWrite(down)
	}()
	wg.Wait()
	up.Close()
	down.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	if cc, ok := c.(*countedConn); ok {
		closeWrite(cc.Conn)
		return
	}
	_ = c.Close()
}

// dial connects to addr ("host:port") if the allowlist allows it: a
// name is resolved here, every address it resolves to is checked, and
// only a checked address is dialed (a second lookup could answer
// differently: DNS rebinding).
func (p *Proxy) dial(ctx context.Context, addr string) (net.Conn, error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, p.refuse(addr, RefusedProtocol, "%.100q is not host:port", addr)
	}
	port, err := parsePort(portS)
	if err != nil {
		return nil, p.refuse(addr, RefusedProtocol, "%.100q: %v", addr, err)
	}
	var targets []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return nil, p.refuse(addr, RefusedNotAllowed, "%s has an IPv6 zone, which no entry names", addr)
		}
		a = a.Unmap()
		ok, other := p.cfg.Allow.literal(a, port)
		if !ok {
			return nil, p.refuse(addr, RefusedNotAllowed, "%s is not in the allowlist%s", netip.AddrPortFrom(a, port), onPorts(other))
		}
		targets = []netip.Addr{a}
	} else {
		name, err := normalName(host)
		if err != nil {
			return nil, p.refuse(addr, RefusedNotAllowed, "%.100q is not a host name the allowlist could name: %v", host, err)
		}
		ok, other := p.cfg.Allow.names(name, port)
		if !ok {
			return nil, p.refuse(addr, RefusedNotAllowed, "%s:%d is not in the allowlist%s", name, port, onPorts(other))
		}
		rctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
		addrs, err := p.cfg.Resolver.LookupNetIP(rctx, "ip", name)
		cancel()
		if err != nil || len(addrs) == 0 {
			return nil, p.refuse(addr, RefusedResolve, "%s does not resolve: %v", name, err)
		}
		var refused []string
		for _, a := range addrs {
			a = a.Unmap()
			if what := Special(a); what != "" {
				if ok, _ := p.cfg.Allow.literal(a, port); !ok {
					refused = append(refused, a.String()+" ("+what+")")
					continue
				}
			}
			targets = append(targets, a)
		}
		if len(targets) == 0 {
			return nil, p.refuse(addr, RefusedAddress, "%s resolves to %s, which a name may not reach; an entry naming the address literally would allow it", name, strings.Join(refused, ", "))
		}
	}
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	var errs []error
	for _, a := range targets {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("egress proxy: %s: %w", addr, errors.Join(errs...))
}

func onPorts(ports []uint16) string {
	if len(ports) == 0 {
		return ""
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return " (the host is allowed on port " + strings.Join(s, ", ") + " only)"
}

// limitListener bounds the connections open at once: past the bound a
// connection is answered 503, reported and closed.
type limitListener struct {
	net.Listener
	p *Proxy
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.p.sem <- struct{}{}:
			cc := &countedConn{Conn: c, p: l.p}
			l.p.mu.Lock()
			if l.p.closed {
				l.p.mu.Unlock()
				cc.Close()
				continue
			}
			l.p.conns[cc] = struct{}{}
			l.p.mu.Unlock()
			return cc, nil
		default:
			e := l.p.refuse("", RefusedLimit, "%d connections are open already (the proxy's bound)", l.p.cfg.MaxConns)
			go func() {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				body := e.Error() + "\n"
				_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
				_ = c.Close()
			}()
		}
	}
}

// countedConn gives its slot back once, when closed.
type countedConn struct {
	net.Conn
	p    *Proxy
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
		<-c.p.sem
	})
	return err
}
