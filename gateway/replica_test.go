package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSessionTokens: a session ID verifies only with the key that signed
// it and only unchanged; each part it carries is bound by the MAC.
func TestSessionTokens(t *testing.T) {
	a := New(Options{SessionKey: []byte(strings.Repeat("a", 32))})
	b := New(Options{SessionKey: []byte(strings.Repeat("a", 32))})
	other := New(Options{SessionKey: []byte(strings.Repeat("b", 32))})
	tok := sessionToken{raw: newRawSessionID(), task: "t.with.dots", principal: "alice@example.com"}
	sid := a.issueSession(tok)
	if got, err := b.verifySession(sid); err != nil || got != tok {
		t.Fatalf("another replica with the same key: %+v %v; want %+v", got, err, tok)
	}
	if _, err := other.verifySession(sid); err == nil {
		t.Fatal("a replica with another key accepted the session ID")
	}
	parts := strings.Split(sid, ".")
	for i := range parts {
		forged := append([]string(nil), parts...)
		forged[i] = "QUFB" + forged[i] // "AAA" prepended once decoded
		if _, err := a.verifySession(strings.Join(forged, ".")); err == nil {
			t.Errorf("part %d changed: accepted", i)
		}
	}
	for _, bad := range []string{"", "abc", sid + ".x", strings.Join(parts[:3], ".")} {
		if _, err := a.verifySession(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestSessionServedByAnotherReplica: a session initialized on replica A is
// served by replica B (which never saw it) in the session's task when B
// shares A's key, and is "not found" on a replica with another key.
func TestSessionServedByAnotherReplica(t *testing.T) {
	key := []byte(NewSessionKey())
	ft := &fakeTemporal{}
	srvA := httptest.NewServer(newTestGateway(t, ft, Options{Principal: "alice", SessionKey: key}).Handler())
	t.Cleanup(srvA.Close)
	srvB := httptest.NewServer(newTestGateway(t, ft, Options{Principal: "alice", SessionKey: key}).Handler())
	t.Cleanup(srvB.Close)
	srvC := httptest.NewServer(newTestGateway(t, ft, Options{Principal: "alice"}).Handler())
	t.Cleanup(srvC.Close)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)

	rs := &rawSession{url: srvA.URL, hc: hc}
	rs.open(t, map[string]string{HeaderTask: "t-moved"})
	rs.url = srvB.URL
	resp, body := rs.post(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"on b"}}}`, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "echo on b") || ft.last(t).update.WorkflowID != "t-moved" {
		t.Fatalf("the session's call on replica B: %d %s; want it served in t-moved", resp.StatusCode, body)
	}
	if resp.Header.Get("Mcp-Session-Id") != "" {
		t.Errorf("replica B answered with session ID %q; want none (the client keeps its own)", resp.Header.Get("Mcp-Session-Id"))
	}
	rs.url = srvC.URL
	if code := rs.ping(t); code != http.StatusNotFound {
		t.Fatalf("a replica with another key: %d, want 404", code)
	}
}

// TestRouterRefusesRebinding: a request through a loopback listener with a
// foreign Host header is refused before any session or tasks/* answer,
// as the go-sdk's handlers refuse it.
func TestRouterRefusesRebinding(t *testing.T) {
	g := newTestGateway(t, &fakeTemporal{}, Options{Principal: "alice"})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	for name, h := range map[string]map[string]string{
		"session":    {"Mcp-Session-Id": g.issueSession(sessionToken{raw: "r", task: "t", principal: "alice"})},
		"tasks/get":  {"Mcp-Protocol-Version": StatelessProtocol, "Mcp-Method": "tasks/get"},
		"initialize": {},
	} {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t~c"}}`))
		req.Host = "evil.example.com"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s with Host evil.example.com: %d, want 403", name, resp.StatusCode)
		}
	}
}

// BenchmarkVerifySession is what a replica pays per request to learn a
// session's task and principal.
func BenchmarkVerifySession(b *testing.B) {
	g := New(Options{SessionKey: []byte(NewSessionKey())})
	sid := g.issueSession(sessionToken{raw: newRawSessionID(), task: sessionTaskID(newRawSessionID()), principal: "alice"})
	for b.Loop() {
		if _, err := g.verifySession(sid); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(sid)), "id-bytes")
}

// TestSessionTokensCanonical: issue 25 (low). A session ID is accepted in
// the one spelling issueSession writes: another base64 spelling of the
// same bytes (non-zero trailing bits, a line break) is refused, so that
// one session has one ID.
func TestSessionTokensCanonical(t *testing.T) {
	g := New(Options{SessionKey: []byte(strings.Repeat("a", 32))})
	// "ab" encodes as "YWI": its last character carries two unused bits.
	tok := sessionToken{raw: newRawSessionID(), task: "ab", principal: "alice"}
	sid := g.issueSession(tok)
	if _, err := g.verifySession(sid); err != nil {
		t.Fatalf("the issued ID: %v", err)
	}
	parts := strings.Split(sid, ".")
	if parts[1] != "YWI" {
		t.Fatalf("task part %q, want YWI", parts[1])
	}
	for name, task := range map[string]string{"trailing bits set": "YWJ", "line break": "YW\nI", "carriage return": "Y\rWI"} {
		forged := append([]string(nil), parts...)
		forged[1] = task
		if got, err := g.verifySession(strings.Join(forged, ".")); err == nil {
			t.Errorf("%s: %q accepted as %+v", name, strings.Join(forged, "."), got)
		}
	}
	// The MAC too: a line break inside it.
	forged := append([]string(nil), parts...)
	forged[3] = forged[3][:5] + "\n" + forged[3][5:]
	if _, err := g.verifySession(strings.Join(forged, ".")); err == nil {
		t.Error("a MAC with a line break accepted")
	}
}
