package upstream

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/tracing"
)

// stderrTailBytes is how much of a stdio child's stderr is kept for the
// status reason.
const stderrTailBytes = 4096

// stdioTransport builds the command for one connection attempt and records
// it in s.
func (u *upstream) stdioTransport(s *session) (mcp.Transport, error) {
	c := u.cfg.Stdio
	var cmd *exec.Cmd
	if mode, _ := u.sandboxMode(); mode == sandboxOn {
		// The sandbox sets the environment and working directory itself
		// (only what the manifest passes; sandbox.go).
		var err error
		if cmd, s.release, err = u.sandboxedCommand(); err != nil {
			return nil, err
		}
	} else {
		cmd = exec.Command(c.Command, c.Args...)
		env := os.Environ()
		keys := make([]string, 0, len(c.Env))
		for k := range c.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			env = append(env, k+"="+c.Env[k])
		}
		cmd.Env = env
		cmd.Dir = c.Dir
	}
	s.stderr = &stderrTail{logLine: func(line string) {
		u.log.Debug().Str("stderr", line).Msg("upstream stderr")
	}}
	cmd.Stderr = s.stderr
	// Bounds Wait when a grandchild keeps the stderr pipe open.
	cmd.WaitDelay = time.Second
	setProcAttrs(cmd)
	s.cmd = cmd
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: terminateDuration}, nil
}

// stderrTail keeps the last stderrTailBytes written to it and logs every
// complete line.
type stderrTail struct {
	logLine func(string)

	mu   sync.Mutex
	buf  []byte
	line []byte
}

func (w *stderrTail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > 2*stderrTailBytes {
		w.buf = append([]byte(nil), w.buf[len(w.buf)-stderrTailBytes:]...)
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		w.logLine(strings.TrimRight(string(w.line[:i]), "\r"))
		w.line = w.line[i+1:]
	}
	if len(w.line) > stderrTailBytes {
		w.logLine(string(w.line))
		w.line = nil
	}
	w.line = append([]byte(nil), w.line...)
	return len(p), nil
}

// String returns the kept tail, trimmed, starting at a rune boundary.
func (w *stderrTail) String() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.buf
	if len(b) > stderrTailBytes {
		b = b[len(b)-stderrTailBytes:]
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
}

// headerTransport adds the manifest's headers to every request, and notes
// in the call's sendMarker whether a tool call's request reached the wire.
type headerTransport struct {
	base http.RoundTripper
	// direct is base without server.http.oauth's transport: a request
	// whose call carries its own bearer (exchange.go) goes there.
	direct  http.RoundTripper
	headers map[string]string
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if m, ok := ctx.Value(sendMarkerKey{}).(*sendMarker); ok && req.Method == http.MethodPost {
		// Nothing reaches the wire before the headers are written, so a
		// failure before WroteHeaders proves the request was never sent.
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteHeaders: func() { m.wrote.Store(true) },
		})
	}
	r := req.Clone(ctx)
	tracing.InjectHeader(ctx, r.Header) // the call's trace, for HTTP-aware upstreams
	for k, v := range t.headers {
		if strings.EqualFold(k, "Host") {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	if tok, ok := callBearer(ctx); ok && t.direct != nil {
		r.Header.Set("Authorization", "Bearer "+tok)
		return t.direct.RoundTrip(r)
	}
	return t.base.RoundTrip(r)
}

// sendMarker travels in a call's context to the HTTP transport.
type sendMarker struct {
	wrote atomic.Bool

	mu        sync.Mutex
	resumeErr error // why the call's SSE stream could not be resumed (resume.go)
}

func (m *sendMarker) setResumeErr(err error) {
	m.mu.Lock()
	m.resumeErr = err
	m.mu.Unlock()
}

func (m *sendMarker) resumeError() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.resumeErr
}

type sendMarkerKey struct{}

func withSendMarker(ctx context.Context, m *sendMarker) context.Context {
	return context.WithValue(ctx, sendMarkerKey{}, m)
}

// summarizeStderr condenses what a dead child printed into one line for a
// status reason or a tool result: the first line that looks like an error
// (a Node or Python stack trace starts with noise), else the last line.
// Operators get every line in the debug log.
func summarizeStderr(tail string) string {
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	pick := ""
	for _, l := range lines {
		l = strings.TrimSpace(l)
		lower := strings.ToLower(l)
		if strings.Contains(lower, "error") || strings.HasPrefix(lower, "fatal") || strings.HasPrefix(lower, "panic") {
			pick = l
			break
		}
	}
	if pick == "" && len(lines) > 0 {
		pick = strings.TrimSpace(lines[len(lines)-1])
	}
	if len(pick) > 300 {
		pick = pick[:300] + "…"
	}
	if len(lines) > 1 {
		pick += fmt.Sprintf(" (%d lines of stderr; see the debug log)", len(lines))
	}
	return pick
}
