package upstream

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// BenchmarkSandbox measures what the sandbox costs with the real npm
// filesystem server: starting it (process start to tools listed) and a
// call (list_allowed_directories), plain and in bubblewrap. The figures
// are in RATIONALE.md, "Why bubblewrap for stdio servers?".
func BenchmarkSandbox(b *testing.B) {
	testenv.RequireNode(b)
	root := b.TempDir()
	srv := manifests.Server{
		Name:      "fs",
		Stdio:     &manifests.StdioServer{Command: "node", Args: []string{testenv.NPMServer(b, "server-filesystem"), root}},
		PathRoots: []string{root},
	}
	sb := requireSandbox(b)
	for _, mode := range []struct {
		name string
		sb   *Sandbox
	}{{"plain", nil}, {"sandboxed", sb}} {
		opts := Options{MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Sandbox: mode.sb}
		b.Run("start/"+mode.name, func(b *testing.B) {
			for b.Loop() {
				p := New([]manifests.Server{srv}, opts)
				p.Start(context.Background())
				testenv.WaitFor(b, "fs to connect", hang, func() bool { return p.Status("fs").State == StateConnected })
				b.StopTimer() // the figure is the start: process to tools listed
				if err := p.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		b.Run("call/"+mode.name, func(b *testing.B) {
			p := New([]manifests.Server{srv}, opts)
			p.Start(context.Background())
			defer p.Close()
			testenv.WaitFor(b, "fs to connect", hang, func() bool { return p.Status("fs").State == StateConnected })
			args := json.RawMessage(`{}`)
			for b.Loop() {
				res, err := p.CallTool(context.Background(), "fs", "list_allowed_directories", args)
				if err != nil || res.IsError {
					b.Fatalf("call: %v %+v", err, res)
				}
			}
		})
	}
}

// BenchmarkEgress is the egress proxy's cost per request, end to end: a
// sandboxed server sends plain HTTP requests (kept alive) to a listener
// on the host, directly with network: host, and through the forwarder,
// the unix socket and airlock's proxy with an allowlist. One iteration
// is a call making 100 requests; ns/request is the figure.
func BenchmarkEgress(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	l := attackLayout{data: b.TempDir(), config: b.TempDir()}
	l.root = l.data
	sb := requireSandbox(b)
	const n = 100
	for _, c := range []struct {
		name string
		net  manifests.SandboxNetwork
	}{
		{"direct", manifests.SandboxNetwork{Mode: manifests.SandboxNetworkHost}},
		{"proxy", manifests.SandboxNetwork{Allow: []string{strings.TrimPrefix(srv.URL, "http://")}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			opts := Options{MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Sandbox: sb}
			p := New([]manifests.Server{hostileServer(b, l, &manifests.Sandbox{Network: c.net})}, opts)
			p.Start(context.Background())
			defer p.Close()
			testenv.WaitFor(b, "hostile to connect", hang, func() bool { return p.Status("hostile").State == StateConnected })
			args, _ := json.Marshal(attackIn{Kind: "fetchloop", Target: srv.URL, N: n})
			for b.Loop() {
				res, err := p.CallTool(context.Background(), "hostile", "attack", args)
				if err != nil || !strings.HasPrefix(resultText(res), "ok: ") {
					b.Fatalf("fetchloop: %v %s", err, resultText(res))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/request")
		})
	}
}
