package upstream

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/egress"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/manifests"
)

// tableResolver answers the egress proxy's lookups from a table (names
// the test controls, pointing at loopback and the metadata address).
type tableResolver map[string]string

func (r tableResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// syncBuffer is a bytes.Buffer safe for the pool's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSandboxEgress is issue 32's egress allowlist, proved by attack: a
// hostile server whose manifest allows a TLS listener (by its literal
// address) and a few names reaches the listener through its proxy and
// gets its answer; it is refused a host not allowed, a name resolving
// to loopback, the metadata address by literal and by name, an allowed
// name on another port; a raw socket to a host listener still gets
// nothing and DNS still fails inside; every refusal is logged, counted
// and audited; airlock's other upstream and the hostile one keep
// serving.
func TestSandboxEgress(t *testing.T) {
	l := newAttackLayout(t)
	sb := requireSandbox(t, l.data, l.config)
	sb.resolver = tableResolver{"loopback.test": "127.0.0.1", "metadata.test": "169.254.169.254", "api.allowed.test": "203.0.113.9"}

	var hits atomic.Int32
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "the allowed host answers %s", r.URL.Path)
	}))
	defer tlsSrv.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "plain answers %s", r.URL.Path)
	}))
	defer plain.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}))
	allowed := strings.TrimPrefix(tlsSrv.URL, "https://")

	// A listener on the host that nothing may reach (raw or by proxy).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	_, hostPort, _ := net.SplitHostPort(ln.Addr().String())

	var logs, audit syncBuffer
	log := zerolog.New(&logs)
	opts := testOptions()
	opts.Sandbox, opts.Logger, opts.Audit = sb, &log, auditstream.New(&audit)
	memory := manifests.ByteSize(512 << 20)
	if raceDetector {
		memory = 256 << 30
	}
	hostile := hostileServer(t, l, &manifests.Sandbox{Memory: memory, Processes: 128, OpenFiles: 256,
		Network: manifests.SandboxNetwork{Allow: []string{allowed, strings.TrimPrefix(plain.URL, "http://"), "loopback.test:" + hostPort, "metadata.test:80", "api.allowed.test:443"}}})
	f := stdioFiles{pid: l.other + "/pid", counter: l.other + "/counter", slow: l.other + "/slow"}
	other := stdioServer(t, "other", f, nil)
	other.PathRoots = []string{l.other}
	p := startPool(t, []manifests.Server{hostile, other}, opts)
	waitState(t, p, "hostile", StateConnected)
	waitState(t, p, "other", StateConnected)
	refused := func(kind string) float64 {
		return testutil.ToFloat64(metrics.EgressRefusals.WithLabelValues("hostile", kind))
	}
	before := map[string]float64{"not_allowed": refused("not_allowed"), "address": refused("address")}

	for _, c := range []struct {
		name string
		in   attackIn
		want string // prefix of the report
		has  string
	}{
		{"reach the allowed host through the proxy", attackIn{Kind: "fetch", Target: tlsSrv.URL + "/hello", CA: ca}, "ok: 200 OK the allowed host answers /hello", ""},
		{"a plain http request to an allowed host", attackIn{Kind: "fetch", Target: plain.URL + "/plain"}, "ok: 200 OK plain answers /plain", ""},
		{"a plain http request to a host not allowed", attackIn{Kind: "fetch", Target: "http://evil.example/"}, "ok: 403 Forbidden egress refused: evil.example:80 is not in the allowlist", ""},
		{"tunnel to a host not allowed", attackIn{Kind: "tunnel", Target: "evil.example:443"}, "failed: 403 Forbidden", "evil.example:443 is not in the allowlist"},
		{"tunnel to a name resolving to loopback", attackIn{Kind: "tunnel", Target: "loopback.test:" + hostPort}, "failed: 403 Forbidden", "resolves to 127.0.0.1 (loopback)"},
		{"tunnel to the metadata address", attackIn{Kind: "tunnel", Target: "169.254.169.254:80"}, "failed: 403 Forbidden", "169.254.169.254:80 is not in the allowlist"},
		{"tunnel to a name resolving to the metadata address", attackIn{Kind: "tunnel", Target: "metadata.test:80"}, "failed: 403 Forbidden", "the cloud metadata address"},
		{"tunnel to an allowed name on another port", attackIn{Kind: "tunnel", Target: "api.allowed.test:8443"}, "failed: 403 Forbidden", "allowed on port 443 only"},
		{"tunnel to the host listener by address", attackIn{Kind: "tunnel", Target: ln.Addr().String()}, "failed: 403 Forbidden", "is not in the allowlist"},
		{"fetch a host not allowed", attackIn{Kind: "fetch", Target: "https://evil.example/", CA: ca}, "failed: ", "Forbidden"},
		{"raw socket to the host listener", attackIn{Kind: "connect", Target: ln.Addr().String()}, "failed: ", ""},
		{"raw socket to the allowed host, around the proxy", attackIn{Kind: "connect", Target: allowed}, "failed: ", ""},
		{"resolve a host name", attackIn{Kind: "resolve", Target: "example.com"}, "failed: ", ""},
		{"the environment names the proxy", attackIn{Kind: "env"}, "ok: ", "HTTPS_PROXY=http://127.0.0.1:3128"},
	} {
		got := attackCall(t, p, c.in)
		if !strings.HasPrefix(got, c.want) || !strings.Contains(got, c.has) {
			t.Errorf("%s: the server reports %q, want %q…%q", c.name, got, c.want, c.has)
		} else {
			t.Logf("%s: %s", c.name, firstLine(got))
		}
	}
	env := attackCall(t, p, attackIn{Kind: "env"})
	for _, w := range []string{"http_proxy=http://127.0.0.1:3128", "ALL_PROXY=http://127.0.0.1:3128", "NODE_USE_ENV_PROXY=1"} {
		if !strings.Contains(env, w) {
			t.Errorf("the server's environment lacks %s:\n%s", w, env)
		}
	}
	if strings.Contains(env, "AIRLOCK_BWRAP_RELAY") {
		t.Errorf("the forwarder's variable reached the server:\n%s", env)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the host's listener accepted %d connections from the sandbox", n)
	}
	if n := hits.Load(); n != 2 {
		t.Errorf("the allowed hosts saw %d requests, want 2", n)
	}

	// Reported: counted, logged (server, host, reason) and audited.
	if d := refused("not_allowed") - before["not_allowed"]; d != 6 {
		t.Errorf("egress_refusals_total{kind=not_allowed} rose by %v, want 6", d)
	}
	if d := refused("address") - before["address"]; d != 2 {
		t.Errorf("egress_refusals_total{kind=address} rose by %v, want 2", d)
	}
	for _, w := range []string{`"server":"hostile"`, `"host":"evil.example:443"`, `"host":"loopback.test:` + hostPort + `"`, `"reason":"loopback.test resolves to 127.0.0.1 (loopback)`, `"message":"egress refused`} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("the log lacks %s:\n%s", w, logs.String())
		}
	}
	if got := strings.Count(audit.String(), `"event":"egress_refused"`); got != 8 {
		t.Errorf("%d egress_refused audit lines, want 8:\n%s", got, audit.String())
	}
	if !strings.Contains(audit.String(), `"host":"metadata.test:80","kind":"address"`) {
		t.Errorf("the audit lacks the metadata refusal:\n%s", audit.String())
	}

	// Both keep serving.
	checkCalls(t, p, "other")
	if got := attackCall(t, p, attackIn{Kind: "fetch", Target: tlsSrv.URL + "/again", CA: ca}); !strings.HasPrefix(got, "ok: 200 OK") {
		t.Errorf("the hostile server no longer reaches its allowed host: %q", got)
	}
}

// TestSandboxEgressNeedsSandbox: a server with an allowlist does not run
// unconfined on a host without the sandbox (it would reach every host).
func TestSandboxEgressNeedsSandbox(t *testing.T) {
	l := newAttackLayout(t)
	opts := testOptions()
	opts.Sandbox = NoSandbox("the stdio sandbox is not available on this host: bwrap is not installed")
	p := startPool(t, []manifests.Server{hostileServer(t, l, &manifests.Sandbox{Network: manifests.SandboxNetwork{Allow: []string{"api.github.com:443"}}})}, opts)
	st := waitState(t, p, "hostile", StateUnavailable)
	if !strings.Contains(st.Reason, "the manifest requires a sandbox") {
		t.Errorf("reason = %q", st.Reason)
	}
}

// TestEgressRefusalFlood: a server refused as fast as it can connect
// does not flood the log or the audit stream (a burst, then a few a
// second, the next line saying how many were left out), while the
// counter counts every refusal.
func TestEgressRefusalFlood(t *testing.T) {
	var logs, audit syncBuffer
	log := zerolog.New(&logs)
	u := &upstream{name: "flood", log: log, pool: &Pool{opts: Options{Audit: auditstream.New(&audit)}}}
	clock := time.Unix(1e9, 0)
	r := newRefusalReporter(u, func() time.Time { return clock })
	before := testutil.ToFloat64(metrics.EgressRefusals.WithLabelValues("flood", egress.RefusedNotAllowed))
	x := egress.Refusal{Server: "flood", Host: "evil.example:443", Kind: egress.RefusedNotAllowed, Reason: "evil.example:443 is not in the allowlist"}
	for range 1000 {
		r.report(x)
	}
	lines := func(b *syncBuffer) int { return strings.Count(b.String(), "\n") }
	if lines(&logs) != egressReportBurst || lines(&audit) != egressReportBurst {
		t.Errorf("a burst of 1000 wrote %d log and %d audit lines, want %d each", lines(&logs), lines(&audit), egressReportBurst)
	}
	// A second later, egressReportRate more; the first says how many were left out.
	clock = clock.Add(time.Second)
	for range 1000 {
		r.report(x)
	}
	if got := lines(&logs); got != egressReportBurst+egressReportRate {
		t.Errorf("a second later: %d log lines, want %d", got, egressReportBurst+egressReportRate)
	}
	if !strings.Contains(logs.String(), `"suppressed":980`) || !strings.Contains(audit.String(), `"suppressed":980`) {
		t.Errorf("no line says 980 were suppressed:\n%s\n%s", logs.String(), audit.String())
	}
	if d := testutil.ToFloat64(metrics.EgressRefusals.WithLabelValues("flood", egress.RefusedNotAllowed)) - before; d != 2000 {
		t.Errorf("the counter rose by %v, want 2000", d)
	}
}

// TestSandboxEgressSocketsHidden: a server allowed to read the host's
// temporary directory (where the proxies' sockets are) still cannot
// reach another server's proxy, and so not its allowlist: the sockets'
// directory is covered in every sandbox.
func TestSandboxEgressSocketsHidden(t *testing.T) {
	l := newAttackLayout(t)
	sb := requireSandbox(t, l.data, l.config)
	visible, err := os.CreateTemp("", "airlock-visible-")
	if err != nil {
		t.Fatal(err)
	}
	visible.Close()
	defer os.Remove(visible.Name())

	egressSrv := hostileServer(t, l, &manifests.Sandbox{Network: manifests.SandboxNetwork{Allow: []string{"api.allowed.test:443"}}})
	egressSrv.Name = "egress"
	reader := hostileServer(t, l, &manifests.Sandbox{ReadPaths: []string{os.TempDir()}})
	reader.Name = "hostile"
	reader.PathRoots = nil
	opts := testOptions()
	opts.Sandbox = sb
	p := startPool(t, []manifests.Server{egressSrv, reader}, opts)
	waitState(t, p, "egress", StateConnected)
	waitState(t, p, "hostile", StateConnected)

	sb.sockets.mu.Lock()
	dir := sb.sockets.path
	sb.sockets.mu.Unlock()
	subs, err := os.ReadDir(dir)
	if err != nil || len(subs) != 1 {
		t.Fatalf("the sockets' directory %s holds %v (%v), want one proxy's", dir, subs, err)
	}
	sock := filepath.Join(dir, subs[0].Name(), "proxy.sock")
	if _, err := os.Stat(sock); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   attackIn
		want string
	}{
		{attackIn{Kind: "read", Target: visible.Name()}, "ok: read 0 bytes"}, // the control: it does see the host's temporary directory
		{attackIn{Kind: "list", Target: dir}, "ok: "},                        // empty: covered
		{attackIn{Kind: "unix", Target: sock}, "failed: "},
	} {
		got := attackCall(t, p, c.in)
		if !strings.HasPrefix(got, c.want) || (c.in.Kind == "list" && got != "ok: ") {
			t.Errorf("%s %s: %q, want %s…", c.in.Kind, c.in.Target, got, c.want)
		}
	}
}
