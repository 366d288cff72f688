package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/httplimit"
	"github.com/airlock-run/airlock/internal/testenv"
)

// TestSlowUnauthenticatedFlood: the attack of issue 13 item 2, against the
// gateway's MCP handler behind the limits airlock serves it with. 2,000
// connections each send a tools/call's headers with a wrong API key and
// then drip its body a byte at a time (before the fix none was ever
// answered, and 20,000 of them exhausted the file descriptors); then 2,000
// more drip their headers and never finish them. Every one is closed by
// the server within the configured read timeout (the first kind answered
// 401 at once), and a legitimate client's tools/call made while the flood
// is under way is answered.
func TestSlowUnauthenticatedFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 4,000 connections; skipped with -short")
	}
	const (
		attackers   = 2000
		readTimeout = 3 * time.Second
		maxPending  = 512
		dripEvery   = 200 * time.Millisecond
	)
	dir := resLevelsDirectory() // "public-key" is a valid key
	g := newTestGateway(t, &fakeTemporal{}, Options{Directory: dir})
	srv := httplimit.New(g.Handler(), httplimit.Limits{ReadHeaderTimeout: readTimeout, ReadTimeout: readTimeout, MaxUnauthenticatedConns: maxPending},
		Authenticator(dir))
	ln, err := net.Listen("tcp", "127.0.0.1:0") // loopback only
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.HTTP.Close() })
	addr := ln.Addr().String()

	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"counter__echo","arguments":{}}}`
	for _, tc := range []struct {
		name       string
		head, drip string
		statuses   []string // what an attacker may read before the server hangs up
	}{
		{
			name:     "wrong key, slow body",
			head:     fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer wrong-key\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body[:1]),
			drip:     body[1:],
			statuses: []string{"HTTP/1.1 401 Unauthorized"},
		},
		{
			name:     "slow headers",
			head:     fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer wrong-key\r\n", addr),
			drip:     "X-Padding: " + strings.Repeat("a", 1000),
			statuses: []string{"", "HTTP/1.1 408 Request Timeout"}, // timed out or evicted: closed unanswered
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := srv.Stats()
			type outcome struct {
				status string
				took   time.Duration
				closed bool
				err    error
			}
			stop := make(chan struct{})
			defer close(stop)
			results := make(chan outcome, attackers)
			var sent atomic.Int64
			var wg sync.WaitGroup
			wg.Add(attackers)
			go func() { // a bounded loop of attackers, 64 dialling at a time
				sem := make(chan struct{}, 64)
				for range attackers {
					sem <- struct{}{}
					go func() {
						defer wg.Done()
						c, err := net.DialTimeout("tcp", addr, 5*time.Second)
						<-sem
						if err != nil {
							results <- outcome{err: err}
							return
						}
						defer c.Close()
						start := time.Now()
						if _, err := io.WriteString(c, tc.head); err != nil {
							results <- outcome{err: err}
							return
						}
						sent.Add(1)
						go func() { // the rest, slowly, until the server hangs up
							for i := range len(tc.drip) {
								select {
								case <-stop:
									return
								case <-time.After(dripEvery):
								}
								if _, err := c.Write([]byte{tc.drip[i]}); err != nil {
									return
								}
							}
						}()
						_ = c.SetReadDeadline(start.Add(readTimeout + 5*time.Second))
						br := bufio.NewReader(c)
						status, _ := br.ReadString('\n')
						_, err = io.Copy(io.Discard, br)
						var ne net.Error
						closed := !(errors.As(err, &ne) && ne.Timeout())
						results <- outcome{status: strings.TrimSpace(status), took: time.Since(start), closed: closed}
					}()
				}
			}()

			// While the flood is under way, a legitimate client is answered.
			testenv.WaitFor(t, "half the attackers to have sent their head", time.Minute, func() bool { return sent.Load() >= attackers/2 })
			cs, err := connectHTTP("http://"+addr+"/mcp", &headerRT{h: map[string]string{"Authorization": "Bearer public-key"}})
			if err != nil {
				t.Fatalf("a legitimate client cannot connect during the flood: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__echo", Arguments: map[string]any{}})
			cancel()
			if err != nil || res.IsError {
				t.Fatalf("a legitimate call during the flood (%d attackers in): %v %v", sent.Load(), err, res)
			}
			_ = cs.Close()

			wg.Wait()
			close(results)
			var slowest time.Duration
			for o := range results {
				switch {
				case o.err != nil:
					t.Fatalf("an attacker could not connect or send (the test's own failure): %v", o.err)
				case !o.closed:
					t.Fatalf("an attacker's connection was still open %s after its headers; want it closed within the read timeout %s", o.took, readTimeout)
				case !slices.Contains(tc.statuses, o.status):
					t.Fatalf("an attacker read %q, want one of %q", o.status, tc.statuses)
				}
				slowest = max(slowest, o.took)
			}
			// The server's deadline, plus a second for a loaded machine.
			if slowest > readTimeout+time.Second {
				t.Fatalf("the slowest attacker's connection was closed after %s; want within the read timeout %s", slowest, readTimeout)
			}
			st := srv.Stats()
			if st.Unauthenticated > maxPending {
				t.Errorf("%d unauthenticated connections open, more than the cap %d", st.Unauthenticated, maxPending)
			}
			t.Logf("%d attackers closed by the server, the slowest after %s; stats before %+v, after %+v", attackers, slowest, before, st)
		})
	}
}
