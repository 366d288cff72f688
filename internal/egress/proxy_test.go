package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeResolver answers from a table, counting lookups; rebind answers
// the first lookup of a name with its first address and later ones with
// the rest (a DNS-rebinding server).
type fakeResolver struct {
	names  map[string][]string
	rebind map[string]bool
	mu     sync.Mutex
	calls  map[string]int
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	f.calls[host]++
	n := f.calls[host]
	f.mu.Unlock()
	as, ok := f.names[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	if f.rebind[host] {
		if n == 1 {
			as = as[:1]
		} else {
			as = as[1:]
		}
	}
	var out []netip.Addr
	for _, a := range as {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// refusals collects what a proxy reports.
type refusals struct {
	mu sync.Mutex
	rs []Refusal
}

func (r *refusals) add(x Refusal) { r.mu.Lock(); r.rs = append(r.rs, x); r.mu.Unlock() }
func (r *refusals) all() []Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Refusal(nil), r.rs...)
}

type proxyEnv struct {
	p        *Proxy
	addr     string // the proxy's TCP address
	refused  *refusals
	resolver *fakeResolver
}

func startProxy(t *testing.T, allow []string, maxConns int, names map[string][]string) *proxyEnv {
	t.Helper()
	l, err := ParseAllowlist(allow)
	if err != nil {
		t.Fatal(err)
	}
	e := &proxyEnv{refused: &refusals{}, resolver: &fakeResolver{names: names, rebind: map[string]bool{}, calls: map[string]int{}}}
	e.p = New(Config{Server: "hostile", Allow: l, MaxConns: maxConns, OnRefusal: e.refused.add, Resolver: e.resolver, DialTimeout: 2 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	go func() { _ = e.p.Serve(ln) }()
	t.Cleanup(func() { _ = e.p.Close() })
	return e
}

// client is an HTTP client that sends everything through the proxy
// (http.ProxyFromEnvironment would bypass it for 127.0.0.1).
func (e *proxyEnv) client(tlsCfg *tls.Config) *http.Client {
	u, _ := url.Parse("http://" + e.addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: tlsCfg, DisableKeepAlives: true}, Timeout: 30 * time.Second}
}

// connect sends CONNECT target on a new connection and returns the
// status line and the connection.
func (e *proxyEnv) connect(t *testing.T, target string) (string, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return "error: " + err.Error(), nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		return resp.Status + ": " + strings.TrimSpace(string(b)), nil, nil
	}
	return resp.Status, c, br
}

func port(t *testing.T, addr string) string {
	_, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(addr, "https://"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProxyEnforces: allowed hosts are reached (CONNECT to a TLS server,
// a plain request), everything else is refused with 403 and reported:
// hosts not listed, another port of an allowed host, names that resolve
// to loopback or the metadata address, a DNS-rebinding name, requests
// that are not proxy requests.
func TestProxyEnforces(t *testing.T) {
	var hits atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "hello from %s %s", r.Host, r.URL.Path)
	})
	tlsSrv := httptest.NewTLSServer(h)
	defer tlsSrv.Close()
	plain := httptest.NewServer(h)
	defer plain.Close()
	tp, pp := port(t, tlsSrv.URL), port(t, plain.URL)

	e := startProxy(t, []string{
		"127.0.0.1:" + tp, "127.0.0.1:" + pp, // the listeners, named literally
		"internal.test:" + pp, // a name whose address is also named literally
		"loop.test:9", "meta.test:80", "rebind.test:" + pp, "gone.test:443",
		"mixed.test:" + pp,
	}, 0, map[string][]string{
		"internal.test": {"127.0.0.1"},
		"loop.test":     {"127.0.0.1", "::1"},
		"meta.test":     {"169.254.169.254"},
		"rebind.test":   {"203.0.113.7", "127.0.0.1"},
		"mixed.test":    {"127.0.0.2", "127.0.0.1"},
	})
	e.resolver.rebind["rebind.test"] = true

	// Reached through the proxy: HTTPS by CONNECT, HTTP as a plain request.
	resp, err := e.client(tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig).Get(tlsSrv.URL + "/tls")
	if err != nil {
		t.Fatalf("https through the proxy: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasSuffix(string(b), "/tls") {
		t.Errorf("https through the proxy: %s %q", resp.Status, b)
	}
	for _, u := range []string{plain.URL + "/plain", "http://internal.test:" + pp + "/named"} {
		resp, err := e.client(nil).Get(u)
		if err != nil {
			t.Fatalf("%s through the proxy: %v", u, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "hello from ") {
			t.Errorf("%s through the proxy: %s %q", u, resp.Status, b)
		}
	}
	before := hits.Load()
	if before != 3 {
		t.Errorf("the listeners saw %d requests, want 3", before)
	}
	if n := len(e.refused.all()); n != 0 {
		t.Errorf("allowed requests were reported refused: %+v", e.refused.all())
	}

	for _, c := range []struct {
		target, kind, reason string
	}{
		{"evil.example:443", RefusedNotAllowed, "evil.example:443 is not in the allowlist"},
		{"127.0.0.1:22", RefusedNotAllowed, "127.0.0.1:22 is not in the allowlist (the host is allowed on port " + tp + ", " + pp + " only)"},
		{"loop.test:22", RefusedNotAllowed, "(the host is allowed on port 9 only)"},
		{"LOOP.test.:9", RefusedAddress, "loop.test resolves to 127.0.0.1 (loopback), ::1 (loopback), which a name may not reach"},
		{"169.254.169.254:80", RefusedNotAllowed, "169.254.169.254:80 is not in the allowlist"},
		{"meta.test:80", RefusedAddress, "169.254.169.254 (the cloud metadata address)"},
		{"[::ffff:127.0.0.1]:22", RefusedNotAllowed, "127.0.0.1:22 is not in the allowlist"},
		{"gone.test:443", RefusedResolve, "gone.test does not resolve"},
		{"[fe80::1%25eth0]:443", RefusedNotAllowed, "zone"},
		{"evil.example", RefusedProtocol, "is not host:port"},
		{"evil.example:99999", RefusedProtocol, "out of range"},
		{"a..b:443", RefusedNotAllowed, "empty label"},
	} {
		n := len(e.refused.all())
		status, c2, _ := e.connect(t, c.target)
		if c2 != nil {
			c2.Close()
			t.Errorf("CONNECT %s: %s, want a refusal", c.target, status)
			continue
		}
		if !strings.HasPrefix(status, "403 ") {
			t.Errorf("CONNECT %s: %s, want 403", c.target, status)
		}
		rs := e.refused.all()
		if len(rs) != n+1 {
			t.Errorf("CONNECT %s: %d refusals reported, want 1", c.target, len(rs)-n)
			continue
		}
		r := rs[n]
		if r.Server != "hostile" || r.Kind != c.kind || !strings.Contains(r.Reason, c.reason) || r.Host == "" {
			t.Errorf("CONNECT %s reported %+v, want kind %s and a reason with %q", c.target, r, c.kind, c.reason)
		}
	}

	// The rebinding name checked public at the lookup; the dial goes to
	// that address (which does not answer here), never to the loopback
	// address a second lookup would give.
	status, c2, _ := e.connect(t, "rebind.test:"+pp)
	if c2 != nil {
		c2.Close()
		t.Errorf("CONNECT rebind.test: %s, want a failure", status)
	}
	if n := e.resolver.calls["rebind.test"]; n != 1 {
		t.Errorf("rebind.test was looked up %d times, want once", n)
	}
	// mixed.test resolves to two loopback addresses, one named literally:
	// only that one is dialed.
	resp, err = e.client(nil).Get("http://mixed.test:" + pp + "/mixed")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("mixed.test: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if got := hits.Load(); got != before+1 {
		t.Errorf("the listeners saw %d requests after the refusals, want %d (one for mixed.test)", got, before+1)
	}

	// Plain requests that are not proxy requests, and https:// as a plain request.
	for _, c := range []struct{ req, want string }{
		{"GET / HTTP/1.1\r\nHost: " + e.addr + "\r\n\r\n", "400 "},
		{"GET https://127.0.0.1:" + tp + "/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400 "},
		{"GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n", "403 "},
		{"GET http://127.0.0.1:22/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "403 "},
		{"GET http://127.0.0.1:" + pp + "/x HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 64<<10) + "\r\n\r\n", "431 "},
	} {
		conn, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, c.req)
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if !strings.Contains(line, " "+c.want) {
			t.Errorf("%.60q: %q, want %s", c.req, line, c.want)
		}
	}
	if got := hits.Load(); got != before+1 {
		t.Errorf("refused plain requests reached a listener: %d hits", got)
	}
}

// TestProxyConnectionBound: past MaxConns a connection is answered 503
// and reported, in a burst too; a slot comes back when a tunnel closes.
func TestProxyConnectionBound(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }() // echo
		}
	}()
	target := backend.Addr().String()
	const bound = 4
	e := startProxy(t, []string{target}, bound, nil)

	var open []net.Conn
	for range bound {
		status, c, br := e.connect(t, target)
		if c == nil {
			t.Fatalf("CONNECT within the bound: %s", status)
		}
		io.WriteString(c, "ping\n")
		if l, err := br.ReadString('\n'); l != "ping\n" {
			t.Fatalf("echo through the tunnel: %q %v", l, err)
		}
		open = append(open, c)
	}
	if status, c, _ := e.connect(t, target); c != nil || !strings.HasPrefix(status, "503 ") {
		t.Errorf("CONNECT past the bound: %s", status)
	}
	if rs := e.refused.all(); len(rs) != 1 || rs[0].Kind != RefusedLimit {
		t.Errorf("refusals = %+v, want one limit", rs)
	}

	// A burst of 40 at once, with the bound full: all refused, all reported, none hangs.
	var wg sync.WaitGroup
	var refusedN atomic.Int32
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, c, _ := e.connect(t, target)
			if c != nil {
				c.Close()
				return
			}
			if strings.HasPrefix(status, "503 ") {
				refusedN.Add(1)
			}
		}()
	}
	wg.Wait()
	if refusedN.Load() != 40 || len(e.refused.all()) != 41 {
		t.Errorf("burst: %d answered 503, %d refusals reported; want 40 and 41", refusedN.Load(), len(e.refused.all()))
	}

	// Closing a tunnel gives its slot back.
	open[0].Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, c, _ := e.connect(t, target)
		if c != nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot came back after a tunnel closed: %s", status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range open[1:] {
		c.Close()
	}
}

// TestProxyUnixSocket: ListenUnix serves on a socket in a private
// directory, and Close removes it and ends open tunnels.
func TestProxyUnixSocket(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	l, _ := ParseAllowlist([]string{backend.Addr().String()})
	p := New(Config{Server: "s", Allow: l})
	path, err := p.ListenUnix(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %s: %v %v", path, fi, err)
	}
	dir, _ := os.Stat(strings.TrimSuffix(path, "/proxy.sock"))
	if dir.Mode().Perm() != 0o700 {
		t.Errorf("the socket's directory has mode %v", dir.Mode().Perm())
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\nhello\n", backend.Addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT over the unix socket: %v %v", resp, err)
	}
	// Bytes sent right after the CONNECT (a TLS hello) are not lost.
	if l, err := br.ReadString('\n'); l != "hello\n" {
		t.Fatalf("echo: %q %v", l, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after Close: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Error("the tunnel is still open after Close")
	}
}

// TestProxySystemResolver: with the system's resolver (no table), a name
// that resolves to loopback through /etc/hosts is refused like any
// other, although a rule names it (ParseRule refuses "localhost", so the
// rule is made by hand here).
func TestProxySystemResolver(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	_, ps, _ := net.SplitHostPort(backend.Addr().String())
	port, _ := parsePort(ps)
	var got refusals
	p := New(Config{Server: "s", Allow: Allowlist{{Name: "localhost", Port: port}}, OnRefusal: got.add})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Serve(ln) }()
	defer p.Close()
	e := &proxyEnv{p: p, addr: ln.Addr().String(), refused: &got}
	status, c, _ := e.connect(t, "localhost:"+ps)
	if c != nil {
		c.Close()
	}
	rs := got.all()
	if !strings.HasPrefix(status, "403 ") || len(rs) != 1 || rs[0].Kind != RefusedAddress || !strings.Contains(rs[0].Reason, "(loopback)") {
		t.Errorf("CONNECT localhost: %s, refusals %+v", status, rs)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the loopback listener accepted %d connections", n)
	}
}
