package egress

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// BenchmarkProxy is a plain HTTP request direct and through the proxy
// (over TCP here; in a sandbox the forwarder adds a unix socket hop, see
// BenchmarkEgress in internal/upstream), on kept-alive connections and
// on a new connection per request. The ratios are in RATIONALE.md,
// "Why bubblewrap for stdio servers".
func BenchmarkProxy(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	l, err := ParseAllowlist([]string{"127.0.0.1:" + port})
	if err != nil {
		b.Fatal(err)
	}
	p := New(Config{Server: "bench", Allow: l, MaxConns: 1024})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = p.Serve(ln) }()
	defer p.Close()
	pu, _ := url.Parse("http://" + ln.Addr().String())
	for _, c := range []struct {
		name  string
		proxy *url.URL
		fresh bool
	}{{"direct/keepalive", nil, false}, {"proxy/keepalive", pu, false}, {"direct/newconn", nil, true}, {"proxy/newconn", pu, true}} {
		b.Run(c.name, func(b *testing.B) {
			tr := &http.Transport{DisableKeepAlives: c.fresh}
			if c.proxy != nil {
				tr.Proxy = http.ProxyURL(c.proxy)
			}
			cl := &http.Client{Transport: tr}
			defer tr.CloseIdleConnections()
			for b.Loop() {
				resp, err := cl.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}
