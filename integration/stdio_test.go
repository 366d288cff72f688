package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
)

// TestStdioDev launches `airlock dev --stdio` the way Claude Desktop does:
// as a child process speaking MCP on its stdin/stdout, from a go-sdk client.
// Everything for people (banner, logs) must go to stderr; a stray line on
// stdout would break the client's JSON-RPC stream, so the test working is
// the proof.
func TestStdioDev(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	dir := t.TempDir()
	cfg := writeStdioConfig(t, dir, newEffectsLog(t))
	dataDir := filepath.Join(dir, "data")

	t.Run("new task", func(t *testing.T) {
		p := startStdio(t, bin, "--config", cfg, "--data-dir", dataDir, "--temporal-port", fmt.Sprint(freePort(t)))
		res := p.echo(t, "hello over stdio")
		task, _ := res.Meta[gateway.MetaTask].(string)
		if task == "" {
			t.Fatalf("result _meta lacks %q: %v", gateway.MetaTask, res.Meta)
		}
		if !strings.Contains(p.stderr.String(), "serving MCP on stdio") {
			t.Errorf("stderr lacks the banner; got:\n%s", p.stderr.String())
		}
		p.closeAndWait(t)
	})

	t.Run("--task attaches", func(t *testing.T) {
		// Same data dir: the first process must have released it.
		p := startStdio(t, bin, "--config", cfg, "--data-dir", dataDir, "--temporal-port", fmt.Sprint(freePort(t)), "--task", "my-task-1")
		res := p.echo(t, "again")
		if got := res.Meta[gateway.MetaTask]; got != "my-task-1" {
			t.Fatalf("result _meta %q = %v, want my-task-1", gateway.MetaTask, got)
		}
		p.closeAndWait(t)
	})
}

// writeStdioConfig writes an airlock.yaml serving the testupstream.
func writeStdioConfig(t *testing.T, dir, sideEffectLog string) string {
	t.Helper()
	up := buildBinary(t, "./integration/testupstream")
	manifest := `server:
  name: counter
  stdio:
    command: ` + up + `
    env:
      SIDE_EFFECT_LOG: ` + sideEffectLog + `
` + effectsSandbox(sideEffectLog) + `tools:
  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  append: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false}
`
	if err := os.WriteFile(filepath.Join(dir, "counter.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(cfg, []byte("manifests:\n  - counter.yaml\n"+identityYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// stdioProcess is `airlock dev --stdio` with a client session on it.
type stdioProcess struct {
	cmd    *exec.Cmd
	cs     *mcp.ClientSession
	stderr *syncBuffer
	closed bool
}

func startStdio(t *testing.T, bin string, args ...string) *stdioProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dev", "--stdio"}, args...)...)
	cmd.Dir = t.TempDir()
	p := &stdioProcess{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-test-stdio", Version: "1"}, nil)
	// Starting the embedded Temporal takes a few seconds; the client's
	// messages wait in the pipe meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// A long TerminateDuration: closing the session must make airlock exit
	// by itself, not because the SDK sent SIGTERM.
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		t.Fatalf("connecting to airlock dev --stdio: %v\nstderr:\n%s", err, p.stderr.String())
	}
	p.cs = cs
	t.Cleanup(func() {
		if !p.closed {
			_ = cmd.Process.Kill()
			_ = cs.Close()
		}
		if t.Failed() {
			t.Logf("airlock dev --stdio stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

func (p *stdioProcess) echo(t *testing.T, msg string) *mcp.CallToolResult {
	t.Helper()
	waitTools(t, p.cs, "counter__echo")
	res := call(t, p.cs, "counter__echo", map[string]any{"text": msg}, "")
	if res.IsError || text(res) != msg {
		t.Fatalf("counter__echo: isError=%v text %q, want %q", res.IsError, text(res), msg)
	}
	return res
}

// closeAndWait closes the client session (closing airlock's stdin) and
// requires airlock to exit with status 0 by itself.
func (p *stdioProcess) closeAndWait(t *testing.T) {
	t.Helper()
	start := time.Now()
	err := p.cs.Close()
	p.closed = true
	took := time.Since(start)
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("closing the session: %v", err)
	}
	if took >= 30*time.Second {
		t.Fatalf("airlock did not exit within 30s of its stdin closing (took %s; the SDK had to signal it)", took)
	}
	if st := p.cmd.ProcessState; st == nil || st.ExitCode() != 0 {
		t.Fatalf("airlock exited with %v (err %v), want status 0", st, err)
	}
}

// syncBuffer collects a child's stderr.
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
