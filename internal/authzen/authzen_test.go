package authzen_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/authzen"
	"github.com/airlock-run/airlock/internal/authzen/opapdp"
)

// policy is the Rego the real PDP runs: low-risk tools for anyone but
// mallory; answers about cached__tool may be reused for a minute.
const policy = `package airlock.authzen

default allow := false

allow if {
	input.action.name == "tools/call"
	input.resource.properties.risk == "low"
	input.subject.id != "mallory"
}

response := {"decision": true, "context": {"policy": "low-risk"}} if {
	allow
} else := {"decision": false, "context": {"reason_user": {"en": sprintf("%s may not call %s", [input.subject.id, input.resource.id])}}}

max_age := 60 if input.resource.id == "cached__tool"
`

func request(subject, tool, risk string) []byte {
	b, err := authzen.Body(authzen.Request{
		Subject:  authzen.Entity{Type: "principal", ID: subject},
		Action:   authzen.Action{Name: "tools/call"},
		Resource: authzen.Entity{Type: "mcp_tool", ID: tool, Properties: map[string]any{"risk": risk}},
		Context:  map[string]any{"arguments": json.RawMessage(`{"path":"a.txt"}`)},
	})
	if err != nil {
		panic(err)
	}
	return b
}

func TestEvaluateAgainstOPA(t *testing.T) {
	pdp := opapdp.Start(t, policy)
	c := authzen.New(authzen.Options{Endpoint: pdp.URL + "/", Authorization: "Bearer pdp-token", CacheEntries: 16})
	for _, tc := range []struct {
		name, subject, risk string
		want                bool
		context             string
	}{
		{"allow", "alice", "low", true, `{"policy":"low-risk"}`},
		{"deny by subject", "mallory", "low", false, `{"reason_user":{"en":"mallory may not call fs__read"}}`},
		{"deny by risk", "alice", "high", false, `{"reason_user":{"en":"alice may not call fs__read"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := c.Evaluate(context.Background(), request(tc.subject, "fs__read", tc.risk), "task-1/call-1")
			if err != nil {
				t.Fatal(err)
			}
			if a.Decision != tc.want || string(a.Context) != tc.context || a.Cached {
				t.Fatalf("answer %+v (context %s), want decision %v context %s, not cached", a, a.Context, tc.want, tc.context)
			}
		})
	}
	seen := pdp.Requests()
	if len(seen) != 3 {
		t.Fatalf("the PDP got %d requests, want 3 (no max-age: nothing cached)", len(seen))
	}
	if seen[0].Authorization != "Bearer pdp-token" || seen[0].RequestID != "task-1/call-1" {
		t.Fatalf("headers %+v, want the configured Authorization and the request ID", seen[0])
	}
	if c.URL() != pdp.URL+"/access/v1/evaluation" {
		t.Fatalf("URL %s", c.URL())
	}
}

func TestEvaluateTimeout(t *testing.T) {
	pdp := opapdp.Start(t, policy)
	pdp.SetDelay(2 * time.Second)
	c := authzen.New(authzen.Options{Endpoint: pdp.URL, Timeout: 100 * time.Millisecond})
	start := time.Now()
	_, err := c.Evaluate(context.Background(), request("alice", "fs__read", "low"), "")
	var e *authzen.Error
	if !errors.As(err, &e) || e.Kind != authzen.KindTimeout {
		t.Fatalf("err %v, want a timeout", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the timeout of 100ms took %s", d)
	}
	if !strings.Contains(err.Error(), "did not answer within 100ms") {
		t.Fatalf("err %q does not say what timed out", err)
	}
}

func TestEvaluateTransportAndStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/down/access/v1/evaluation":
			http.Error(w, "policy store unavailable", http.StatusServiceUnavailable)
		case "/moved/access/v1/evaluation":
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		default:
			http.NotFound(w, r)
		}
	}))
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	defer srv.Close()
	for _, tc := range []struct{ name, endpoint, kind string }{
		{"503", srv.URL + "/down", authzen.KindStatus},
		{"redirect not followed", srv.URL + "/moved", authzen.KindStatus},
		{"404", srv.URL + "/none", authzen.KindStatus},
		{"refused", closed.URL, authzen.KindTransport},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := authzen.New(authzen.Options{Endpoint: tc.endpoint}).Evaluate(context.Background(), request("alice", "fs__read", "low"), "")
			var e *authzen.Error
			if !errors.As(err, &e) || e.Kind != tc.kind {
				t.Fatalf("err %v, want kind %s", err, tc.kind)
			}
		})
	}
}

// raw serves body with contentType as every answer.
func raw(t *testing.T, contentType, body string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // no sniffing: "" sends none
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestEvaluateMalformed(t *testing.T) {
	for _, tc := range []struct{ name, contentType, body, says string }{
		{"trailing bytes", "application/json", `{"decision":true} {"decision":false}`, "invalid"},
		{"trailing garbage", "application/json", `{"decision":true}x`, "invalid"},
		{"duplicate decision", "application/json", `{"decision":false,"decision":true}`, `"decision" appears more than once`},
		{"duplicate in context", "application/json", `{"decision":true,"context":{"a":1,"a":2}}`, "more than once"},
		{"decision a string", "application/json", `{"decision":"true"}`, `"decision" is "true"`},
		{"decision a number", "application/json", `{"decision":1}`, `"decision" is 1`},
		{"decision null", "application/json", `{"decision":null}`, `"decision" is null`},
		{"no decision", "application/json", `{"context":{}}`, `no "decision"`},
		{"case-folded decision", "application/json", `{"Decision":true,"decision":false}`, `member "Decision"`},
		{"case-folded alone", "application/json", `{"DECISION":true}`, `member "DECISION"`},
		{"context an array", "application/json", `{"decision":true,"context":[]}`, `"context" is []`},
		{"context a string", "application/json", `{"decision":true,"context":"ok"}`, `not an object`},
		{"an array", "application/json", `[{"decision":true}]`, "not a JSON object"},
		{"null", "application/json", `null`, "not a JSON object"},
		{"empty", "application/json", ``, "unexpected end"},
		{"not JSON", "application/json", `decision=true`, "invalid"},
		{"html", "text/html", `{"decision":true}`, `Content-Type "text/html"`},
		{"huge", "application/json", `{"decision":true,"context":{"x":"` + strings.Repeat("a", authzen.MaxAnswerBytes) + `"}}`, "over 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := authzen.New(authzen.Options{Endpoint: raw(t, tc.contentType, tc.body), CacheEntries: 4})
			a, err := c.Evaluate(context.Background(), request("alice", "fs__read", "low"), "")
			var e *authzen.Error
			if !errors.As(err, &e) || e.Kind != authzen.KindMalformed {
				t.Fatalf("answer %+v err %v, want malformed", a, err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err %q does not say %q", err, tc.says)
			}
			if c.CacheLen() != 0 {
				t.Fatal("a malformed answer was cached")
			}
		})
	}
	// A well-formed answer without Content-Type and with other members is read.
	a, err := authzen.New(authzen.Options{Endpoint: raw(t, "", ` {"decision":true,"extra":[1]} `)}).Evaluate(context.Background(), request("a", "b", "low"), "")
	if err != nil || !a.Decision || a.Context != nil {
		t.Fatalf("answer %+v err %v, want allow without context", a, err)
	}
}

func TestEvaluateCache(t *testing.T) {
	pdp := opapdp.Start(t, policy)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c := authzen.New(authzen.Options{Endpoint: pdp.URL, CacheEntries: 2, Now: clock})
	ask := func(subject, tool string) authzen.Answer {
		t.Helper()
		a, err := c.Evaluate(context.Background(), request(subject, tool, "low"), "")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := ask("alice", "cached__tool"); a.Cached || !a.Decision {
		t.Fatalf("first answer %+v", a)
	}
	if a := ask("alice", "cached__tool"); !a.Cached || !a.Decision || string(a.Context) != `{"policy":"low-risk"}` {
		t.Fatalf("second answer %+v, want the cached allow", a)
	}
	if n := len(pdp.Requests()); n != 1 {
		t.Fatalf("%d requests, want 1: max-age=60 was not honoured", n)
	}
	advance(61 * time.Second)
	if a := ask("alice", "cached__tool"); a.Cached {
		t.Fatal("an answer was reused after its max-age")
	}
	// Without max-age nothing is kept.
	ask("alice", "fs__read")
	ask("alice", "fs__read")
	if n := len(pdp.Requests()); n != 4 {
		t.Fatalf("%d requests, want 4: an answer without max-age was cached", n)
	}
	// Bounded: a third cached answer evicts the oldest.
	ask("bob", "cached__tool")
	ask("carol", "cached__tool")
	if c.CacheLen() != 2 {
		t.Fatalf("cache holds %d, want its bound 2", c.CacheLen())
	}
	before := len(pdp.Requests())
	ask("alice", "cached__tool") // evicted: asked again
	ask("carol", "cached__tool") // kept
	if n := len(pdp.Requests()) - before; n != 1 {
		t.Fatalf("%d requests, want 1 (alice evicted, carol kept)", n)
	}
	// A client with no cache never reuses.
	nc := authzen.New(authzen.Options{Endpoint: pdp.URL})
	for range 2 {
		if a, err := nc.Evaluate(context.Background(), request("alice", "cached__tool", "low"), ""); err != nil || a.Cached {
			t.Fatalf("answer %+v err %v", a, err)
		}
	}
}

func TestCacheControl(t *testing.T) {
	for _, tc := range []struct {
		header string
		cached bool
	}{
		{"max-age=60", true},
		{"private, max-age=60", true},
		{`max-age="60"`, true},
		{"max-age=0", false},
		{"no-store, max-age=60", false},
		{"max-age=60, no-cache", false},
		{"max-age=60, max-age=10", false},
		{"max-age=-1", false},
		{"max-age=abc", false},
		{"max-age=99999999999999999999", false},
		{"s-maxage=60", false},
		{"", false},
	} {
		t.Run(tc.header, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json; charset=utf-8")
				if tc.header != "" {
					w.Header().Set("Cache-Control", tc.header)
				}
				_, _ = w.Write([]byte(`{"decision":false}`))
			}))
			defer srv.Close()
			c := authzen.New(authzen.Options{Endpoint: srv.URL, CacheEntries: 4})
			if _, err := c.Evaluate(context.Background(), request("a", "b", "low"), ""); err != nil {
				t.Fatal(err)
			}
			if got := c.CacheLen() == 1; got != tc.cached {
				t.Fatalf("cached %v, want %v", got, tc.cached)
			}
		})
	}
}

// TestAirlockDoesNotLinkOPA keeps OPA a test-only dependency: the binary
// stays the size it was.
func TestAirlockDoesNotLinkOPA(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/airlock-run/airlock/cmd/airlock").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "open-policy-agent") {
		t.Fatal("cmd/airlock imports OPA; only tests may (package opapdp)")
	}
	if !strings.Contains(string(out), "github.com/airlock-run/airlock/internal/authzen\n") {
		t.Fatal("cmd/airlock does not import internal/authzen; is the list right?")
	}
}

// TestEvaluateSlowBody: the timeout bounds reading the answer too, not
// only its headers (a PDP that trickles its body).
func TestEvaluateSlowBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"decision":`))
		w.(http.Flusher).Flush()
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte(`true}`))
	}))
	defer srv.Close()
	start := time.Now()
	_, err := authzen.New(authzen.Options{Endpoint: srv.URL, Timeout: 200 * time.Millisecond}).Evaluate(context.Background(), request("a", "b", "low"), "")
	var e *authzen.Error
	if !errors.As(err, &e) || e.Kind != authzen.KindTimeout || time.Since(start) > 2*time.Second {
		t.Fatalf("err %v after %s, want a timeout at 200ms", err, time.Since(start))
	}
}

// BenchmarkEvaluate is the cost of one decision asked of OPA over
// loopback HTTP, and of one answered from the cache.
func BenchmarkEvaluate(b *testing.B) {
	pdp := opapdp.Start(b, policy)
	body := request("alice", "fs__read", "low")
	cachedBody := request("alice", "cached__tool", "low")
	b.Run("opa", func(b *testing.B) {
		c := authzen.New(authzen.Options{Endpoint: pdp.URL})
		for b.Loop() {
			if _, err := c.Evaluate(context.Background(), body, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		c := authzen.New(authzen.Options{Endpoint: pdp.URL, CacheEntries: 16})
		for b.Loop() {
			if _, err := c.Evaluate(context.Background(), cachedBody, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestEvaluateHugeHeaders: an answer's headers are bounded like its body.
func TestEvaluateHugeHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Padding", strings.Repeat("a", 2*authzen.MaxAnswerBytes))
		_, _ = w.Write([]byte(`{"decision":true}`))
	}))
	defer srv.Close()
	_, err := authzen.New(authzen.Options{Endpoint: srv.URL}).Evaluate(context.Background(), request("a", "b", "low"), "")
	var e *authzen.Error
	if !errors.As(err, &e) || e.Kind != authzen.KindTransport {
		t.Fatalf("err %v, want the answer refused", err)
	}
}
