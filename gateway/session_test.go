package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
)

// rawSession speaks just enough streamable HTTP to open a session, so the
// test's own client holds no goroutines of its own per session (a go-sdk
// client keeps a stream open for each).
type rawSession struct {
	url, id string
	hc      *http.Client
}

func (r *rawSession) post(t *testing.T, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", r.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if r.id != "" {
		req.Header.Set("Mcp-Session-Id", r.id)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// open initializes a session (header: e.g. Airlock-Task) and returns the
// initialize response's body.
func (r *rawSession) open(t *testing.T, header map[string]string) string {
	t.Helper()
	r.id = ""
	resp, body := r.post(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, header)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	r.id = resp.Header.Get("Mcp-Session-Id")
	if resp, body := r.post(t, `{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", resp.StatusCode, body)
	}
	return body
}

// end ends the session (an HTTP DELETE).
func (r *rawSession) end(t *testing.T) {
	t.Helper()
	req, err := http.NewRequest("DELETE", r.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Mcp-Session-Id", r.id)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := r.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// ping sends a request in the session and returns its HTTP status.
func (r *rawSession) ping(t *testing.T) int {
	t.Helper()
	resp, _ := r.post(t, `{"jsonrpc":"2.0","id":2,"method":"ping","params":{}}`, nil)
	return resp.StatusCode
}

// settled waits for cond, collecting garbage before each look so that
// finalizers and freed memory count.
func settled(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, what, within, func() bool {
		runtime.GC()
		return cond()
	})
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestIdleSessionsExpire: issue 13 item 3. Sessions left idle (clients that
// vanished without ending them) are closed after the idle time: the
// gateway forgets them and the goroutines and heap they held return. A
// client that comes back is served on its signed session ID (replica.go),
// in its task, holding nothing; initializing again with the Airlock-Task
// header reattaches it to its task too.
//
// It runs in a synctest bubble over an in-memory network (serveMem): the
// idle time passes on the bubble's clock, at once.
func TestIdleSessionsExpire(t *testing.T) { synctest.Test(t, testIdleSessionsExpire) }

func testIdleSessionsExpire(t *testing.T) {
	const idle = 2 * time.Second
	const n = 200
	g := newTestGateway(t, &fakeTemporal{}, Options{Principal: "alice", SessionIdle: idle, MaxSessionsPerPrincipal: n + 1})
	url, hc := serveMem(t, g.Handler())
	srv := struct{ URL string }{url}

	// Warm up (one session come and gone), then measure.
	(&rawSession{url: srv.URL, hc: hc}).open(t, nil)
	settled(t, "the warm-up session expired", 10*time.Second, func() bool { return g.sessionCount("") == 0 })
	hc.CloseIdleConnections()
	goroutines, heap := runtime.NumGoroutine(), heapInUse()

	keep := &rawSession{url: srv.URL, hc: hc}
	if body := keep.open(t, map[string]string{HeaderTask: "t-keep"}); !strings.Contains(body, `"airlock.dev/task":"t-keep"`) {
		t.Fatalf("initialize with %s: t-keep: %s", HeaderTask, body)
	}
	for range n - 1 {
		(&rawSession{url: srv.URL, hc: hc}).open(t, nil)
	}
	if got := g.sessionCount("alice"); got != n {
		t.Fatalf("%d sessions open, want %d", got, n)
	}
	t.Logf("%d open sessions: %d goroutines (%d before), heap in use %d KiB (%d before)",
		n, runtime.NumGoroutine(), goroutines, heapInUse()>>10, heap>>10)

	// A session in use does not expire.
	for range 3 {
		time.Sleep(idle / 2) // the behaviour under test: time passing, the session in use
		if code := keep.ping(t); code != http.StatusOK {
			t.Fatalf("a session in use expired: ping %d", code)
		}
	}

	settled(t, "idle sessions closed and forgotten", 10*time.Second, func() bool { return g.sessionCount("") == 0 })
	hc.CloseIdleConnections()
	settled(t, "goroutines back to where they were", 10*time.Second, func() bool {
		return runtime.NumGoroutine() <= goroutines+5
	})
	if after := heapInUse(); after > heap+2<<20 {
		t.Errorf("heap in use %d KiB after the sessions expired, %d KiB before they opened; want it back within 2 MiB", after>>10, heap>>10)
	}

	// The client comes back: its session ID still names its task.
	resp, body := keep.post(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"back"}}}`, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "echo back") || !strings.Contains(body, `"airlock.dev/task":"t-keep"`) {
		t.Fatalf("call in an expired session: %d %s; want it served in task t-keep", resp.StatusCode, body)
	}
	if g.sessionCount("") != 0 {
		t.Fatalf("serving an expired session's request reopened it: %d sessions", g.sessionCount(""))
	}
	if body := keep.open(t, map[string]string{HeaderTask: "t-keep"}); !strings.Contains(body, `"airlock.dev/task":"t-keep"`) {
		t.Fatalf("re-initialize with %s: t-keep did not reattach: %s", HeaderTask, body)
	}
	// Ended, so that none of its goroutines outlives the bubble.
	keep.end(t)
	settled(t, "the reattached session ended", 10*time.Second, func() bool { return g.sessionCount("") == 0 })
	outwaitCancelWatch()
}

// TestSessionCapPerPrincipal: a principal over its cap of open sessions
// loses the memory of its least recently used one (its next request is
// served by its signed ID alone, in its task), the others stay open, and
// another principal's sessions are not counted.
func TestSessionCapPerPrincipal(t *testing.T) {
	const max = 3
	g := newTestGateway(t, &fakeTemporal{}, Options{Principal: "alice", MaxSessionsPerPrincipal: max})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)

	var ss []*rawSession
	for i := range max + 2 {
		s := &rawSession{url: srv.URL, hc: hc}
		s.open(t, map[string]string{HeaderTask: fmt.Sprintf("t-%d", i)})
		ss = append(ss, s)
		if i == 1 {
			// Session 0 is used after 1 was opened: 1 is the least recently used.
			if code := ss[0].ping(t); code != http.StatusOK {
				t.Fatalf("ping 0: %d", code)
			}
		}
	}
	settled(t, "the cap enforced", 5*time.Second, func() bool { return g.sessionCount("alice") == max })
	// 1 went first (least recently used), then 0.
	for i, want := range []bool{false, false, true, true, true} {
		if got := g.liveSession(rawOf(t, g, ss[i].id)); got != want {
			t.Errorf("session %d: held in memory %v, want %v", i, got, want)
		}
		resp, body := ss[i].post(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"x"}}}`, nil)
		if task := fmt.Sprintf(`"airlock.dev/task":"t-%d"`, i); resp.StatusCode != http.StatusOK || !strings.Contains(body, task) {
			t.Errorf("session %d: call %d %s; want it in its task t-%d", i, resp.StatusCode, body, i)
		}
	}
	if got := g.sessionCount("alice"); got != max {
		t.Errorf("%d sessions open after calls in closed ones, want %d", got, max)
	}
}

// TestSessionCapNeverClosesABusySession: at the cap with every session in
// a call, a new session is refused (CodeTooManySessions) rather than one
// closed under its call.
//
// In a synctest bubble (serveMem): the inline wait passes at once.
func TestSessionCapNeverClosesABusySession(t *testing.T) {
	synctest.Test(t, testSessionCapNeverClosesABusySession)
}

func testSessionCapNeverClosesABusySession(t *testing.T) {
	ft := &fakeTemporal{block: true}
	g := newTestGateway(t, ft, Options{Principal: "alice", MaxSessionsPerPrincipal: 1, InlineWait: 3 * time.Second})
	url, hc := serveMem(t, g.Handler())
	srv := struct{ URL string }{url}

	busy := &rawSession{url: srv.URL, hc: hc}
	busy.open(t, nil)
	done := make(chan int, 1)
	go func() {
		resp, _ := busy.post(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","arguments":{}}}`, nil)
		done <- resp.StatusCode
	}()
	// The call has reached the task (so the middleware counts it), not
	// only some other request of the session, such as its initialized
	// notification.
	settled(t, "the call in flight", 5*time.Second, func() bool {
		if ft.count() == 0 {
			return false
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, s := range g.sessions {
			if s.inflight > 0 {
				return true
			}
		}
		return false
	})
	resp, body := (&rawSession{url: srv.URL, hc: hc}).post(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	if !strings.Contains(body, fmt.Sprint(CodeTooManySessions)) || !strings.Contains(body, "too many sessions") {
		t.Fatalf("initialize over the cap with the only session busy: %d %s; want error %d", resp.StatusCode, body, CodeTooManySessions)
	}
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the busy session's call: %d", code)
	}
	if code := busy.ping(t); code != http.StatusOK {
		t.Fatalf("the busy session was closed: ping %d", code)
	}
	// Ended, so that none of its goroutines outlives the bubble.
	busy.end(t)
	settled(t, "the busy session ended", 10*time.Second, func() bool { return g.sessionCount("") == 0 })
	outwaitCancelWatch()
}

// outwaitCancelWatch lets the bubble's clock pass the cancel grace, so
// that a call's watchCancel (relay.go) — which, when the call's context
// ends as its answer goes out, waits cancelGrace for a
// notifications/cancelled that never comes — returns before the bubble
// ends; synctest fails a test whose bubble still has blocked goroutines.
func outwaitCancelWatch() {
	time.Sleep(cancelGrace + time.Second)
	synctest.Wait()
}

// rawOf is the go-sdk session ID inside a signed one.
func rawOf(t *testing.T, g *Gateway, sid string) string {
	t.Helper()
	tok, err := g.verifySession(sid)
	if err != nil {
		t.Fatalf("session ID %q: %v", sid, err)
	}
	return tok.raw
}
