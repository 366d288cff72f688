package upstream

import (
	"context"
	"encoding/json"
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
