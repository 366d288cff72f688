package httplimit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
)

const goodKey = "good-key"

func authenticated(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer "+goodKey }

// guarded answers like the gateway's HTTP edge: 401 on the headers
// alone, without reading the body; an authenticated request gets its body
// read and echoed.
var guarded = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if !authenticated(r) {
		http.Error(w, `{"error":"API key not recognised"}`, http.StatusUnauthorized)
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "ok %d", len(b))
})

// serve starts a Server for h on a loopback port.
func serve(t *testing.T, h http.Handler, lim Limits) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(h, lim, func(r *http.Request) (*http.Request, bool) { return r, authenticated(r) })
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.HTTP.Close() })
	return s, ln.Addr().String()
}

// dialRequest opens a connection and sends the head of a request.
func dialRequest(t *testing.T, addr, head string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	return c
}

func postHead(key string, contentLength int) string {
	return fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: airlock\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", key, contentLength)
}

// drip writes one byte every interval until the connection fails or stop
// closes.
func drip(c net.Conn, interval time.Duration, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return
		}
	}
}

// readUntilClosed reads the answer and then until the server closes the
// connection; it returns the status line and how long that took. A
// connection still open at limit is reported as such (closed false).
func readUntilClosed(c net.Conn, limit time.Duration) (status string, took time.Duration, closed bool) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	br := bufio.NewReader(c)
	status, _ = br.ReadString('\n')
	_, err := io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return strings.TrimSpace(status), time.Since(start), false
	}
	return strings.TrimSpace(status), time.Since(start), true
}

// TestWrongKeySlowBodyAnsweredAtOnce: the attack of issue 13 item 2. A
// request with a wrong key whose body drips in is answered 401 at once and
// its connection closed, though net/http would read the body first (and
// wait for it without end when there is no read timeout).
func TestWrongKeySlowBodyAnsweredAtOnce(t *testing.T) {
	s, addr := serve(t, guarded, Limits{ReadTimeout: 30 * time.Second})
	stop := make(chan struct{})
	defer close(stop)
	c := dialRequest(t, addr, postHead("wrong", 100_000)+"{")
	go drip(c, 100*time.Millisecond, stop)
	status, took, closed := readUntilClosed(c, 5*time.Second)
	if status != "HTTP/1.1 401 Unauthorized" || !closed || took > 2*time.Second {
		t.Fatalf("status %q, closed %v after %s; want 401 and the connection closed at once (not after the 30s read timeout)", status, closed, took)
	}
	if st := s.Stats(); st.ClosedUnread != 1 {
		t.Errorf("stats %+v, want one answer closed unread", st)
	}
}

// TestSlowBodyCutAtReadTimeout: an unauthenticated request to a handler
// that reads its body (the approvals page's login) cannot take longer than
// the read timeout, however slowly the body comes.
func TestSlowBodyCutAtReadTimeout(t *testing.T) {
	readErr := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			http.Error(w, "slow", http.StatusRequestTimeout)
		}
	})
	const readTimeout = 700 * time.Millisecond
	_, addr := serve(t, h, Limits{ReadHeaderTimeout: readTimeout, ReadTimeout: readTimeout})
	stop := make(chan struct{})
	defer close(stop)
	c := dialRequest(t, addr, "POST /approvals/login HTTP/1.1\r\nHost: airlock\r\nContent-Length: 1000\r\n\r\nkey=")
	go drip(c, 100*time.Millisecond, stop)
	_, took, closed := readUntilClosed(c, 10*time.Second)
	if !closed || took > readTimeout+1500*time.Millisecond {
		t.Fatalf("connection closed %v after %s; want it closed within the read timeout %s (and a little)", closed, took, readTimeout)
	}
	select {
	case err := <-readErr:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("the handler read %v, want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler never finished reading")
	}
}

// TestBodyOverUnauthenticatedLimit: a declared body over the limit is
// refused (413) before any of it is read; a chunked one is cut off at the
// limit.
func TestBodyOverUnauthenticatedLimit(t *testing.T) {
	var sawErr error
	var mu sync.Mutex
	reads := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		mu.Lock()
		sawErr = err
		mu.Unlock()
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		fmt.Fprint(w, "read")
	})
	s, addr := serve(t, reads, Limits{MaxUnauthenticatedBody: 1024})

	// 64 MiB declared, 10 bytes sent: answered without waiting for more.
	c := dialRequest(t, addr, postHead("wrong", 64<<20)+"0123456789")
	status, took, closed := readUntilClosed(c, 5*time.Second)
	if status != "HTTP/1.1 413 Request Entity Too Large" || !closed || took > 2*time.Second {
		t.Fatalf("declared 64 MiB: status %q, closed %v after %s; want 413 at once and the connection closed", status, closed, took)
	}
	if st := s.Stats(); st.TooLarge != 1 {
		t.Errorf("stats %+v, want one refused as too large", st)
	}

	// Chunked, 4 KiB: the handler reads 1 KiB and an error.
	chunk := strings.Repeat("a", 4096)
	c = dialRequest(t, addr, "POST /slack/interactions HTTP/1.1\r\nHost: airlock\r\nTransfer-Encoding: chunked\r\n\r\n"+fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(chunk), chunk))
	status, _, closed = readUntilClosed(c, 5*time.Second)
	if status != "HTTP/1.1 413 Request Entity Too Large" || !closed {
		t.Fatalf("chunked 4 KiB: status %q, closed %v; want 413 and the connection closed", status, closed)
	}
	mu.Lock()
	err := sawErr
	mu.Unlock()
	var mbe *http.MaxBytesError
	if !errors.As(err, &mbe) || mbe.Limit != 1024 {
		t.Fatalf("the handler read %v, want a *http.MaxBytesError at 1024", err)
	}

	// Authenticated requests are not held to it.
	c = dialRequest(t, addr, postHead(goodKey, 4096)+chunk)
	if status, _, _ := readUntilClosed(c, 500*time.Millisecond); status != "HTTP/1.1 200 OK" {
		t.Fatalf("authenticated 4 KiB: status %q, want 200", status)
	}
}

// TestEvictsOldestUnauthenticated: a flood of connections that never
// authenticate holds at most MaxUnauthenticatedConns of them, the oldest
// going first; an authenticated keep-alive connection opened before the
// flood is not touched, and a new client still gets through.
func TestEvictsOldestUnauthenticated(t *testing.T) {
	const max = 10
	s, addr := serve(t, guarded, Limits{MaxUnauthenticatedConns: max})

	// An authenticated client on a kept-alive connection.
	authed := dialRequest(t, addr, postHead(goodKey, 2)+"{}")
	br := bufio.NewReader(authed)
	readOK := func(what string) {
		t.Helper()
		_ = authed.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", what, resp.Status)
		}
	}
	readOK("authenticated request before the flood")

	var flood []net.Conn
	for range 3 * max {
		flood = append(flood, dialRequest(t, addr, "POST /mcp HTTP/1.1\r\nHost: airlock\r\n")) // headers never end
	}
	testenv.WaitFor(t, fmt.Sprintf("%d connections evicted", 2*max), 5*time.Second, func() bool { return s.Stats().Evicted >= 2*max })
	if st := s.Stats(); st.Evicted < 2*max || st.Unauthenticated > max {
		t.Fatalf("stats %+v after %d connections; want at most %d unauthenticated and at least %d evicted", st, len(flood), max, 2*max)
	}
	for i, c := range flood[:2*max] {
		if _, _, closed := readUntilClosed(c, 2*time.Second); !closed {
			t.Fatalf("flood connection %d (among the oldest) is still open", i)
		}
	}
	// The newest of the flood are still open: eviction went oldest first.
	if _, _, closed := readUntilClosed(flood[len(flood)-1], 200*time.Millisecond); closed {
		t.Fatal("the newest flood connection was closed; want the oldest evicted first")
	}

	if _, err := io.WriteString(authed, postHead(goodKey, 2)+"{}"); err != nil {
		t.Fatalf("the authenticated connection was closed by the flood: %v", err)
	}
	readOK("authenticated request after the flood, same connection")
	c := dialRequest(t, addr, postHead(goodKey, 2)+"{}")
	if status, _, _ := readUntilClosed(c, 500*time.Millisecond); status != "HTTP/1.1 200 OK" {
		t.Fatalf("a new authenticated client during the flood: %q", status)
	}
}

// TestAuthenticatedStreamsOutliveReadTimeout: the read timeout bounds
// reading a request, not the answer: an authenticated POST or GET whose
// answer streams (server-sent events, as MCP's streamable HTTP sends them)
// for longer than the read timeout keeps streaming, and its request's
// context stays live.
func TestAuthenticatedStreamsOutliveReadTimeout(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	const events = 8 // 8 × 100ms: four times the read timeout
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			fmt.Fprintf(w, "data: %d\n\n", i)
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
		}
	})
	_, addr := serve(t, h, Limits{ReadHeaderTimeout: readTimeout, ReadTimeout: readTimeout})
	for _, method := range []string{"GET", "POST"} {
		t.Run(method, func(t *testing.T) {
			body := ""
			if method == "POST" {
				body = `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`
			}
			req, err := http.NewRequest(method, "http://"+addr+"/mcp", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+goodKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("stream broke: %v after %q", err, b)
			}
			if got := strings.Count(string(b), "data: "); got != events {
				t.Fatalf("%d events, want %d: the stream was cut (%q)", got, events, b)
			}
		})
	}
}

func TestRaiseOpenFiles(t *testing.T) {
	soft, hard, err := RaiseOpenFiles()
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("RaiseOpenFiles on %s: %v, want ErrUnsupported", runtime.GOOS, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("RaiseOpenFiles: %v", err)
	}
	if soft == 0 || soft != hard {
		t.Fatalf("open-file limit soft %d, hard %d; want the soft limit raised to the hard one", soft, hard)
	}
}
