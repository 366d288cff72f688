package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestEdge checks 401s, and that what is behind the edge sees the
// principal, in the request's context and in its auth.TokenInfo, and the
// request's own headers.
func TestEdge(t *testing.T) {
	d := keysDirectory("alice", "bob")
	var seen, seenExtra, seenAuth, seenKey string
	h := Edge(d, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := edgePrincipal(r)
		seen = p.Name
		pe, _ := extraPrincipal(&mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context()), Header: r.Header})
		seenExtra = pe.Name
		seenAuth, seenKey = r.Header.Get("Authorization"), r.Header.Get("X-API-Key")
		w.WriteHeader(http.StatusOK)
	}))
	do := func(method string, hdr map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/mcp", nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	w := do("POST", nil)
	if w.Code != 401 || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer realm=\"airlock\"") || !strings.Contains(w.Body.String(), "no API key") {
		t.Fatalf("unauthenticated: %d %q %s", w.Code, w.Header().Get("WWW-Authenticate"), w.Body)
	}
	if w := do("POST", map[string]string{"Authorization": "Bearer wrong"}); w.Code != 401 {
		t.Fatalf("bad key: %d", w.Code)
	}
	if w := do("POST", map[string]string{"Authorization": "Bearer alice-key"}); w.Code != 200 || seen != "alice" || seenExtra != "alice" || seenAuth != "Bearer alice-key" {
		t.Fatalf("alice: %d seen %q, in TokenInfo %q, Authorization %q", w.Code, seen, seenExtra, seenAuth)
	}
	if w := do("GET", map[string]string{"X-API-Key": "bob-key"}); w.Code != 200 || seen != "bob" || seenExtra != "bob" || seenAuth != "" || seenKey != "bob-key" {
		t.Fatalf("bob: %d seen %q, in TokenInfo %q, Authorization %q, X-API-Key %q", w.Code, seen, seenExtra, seenAuth, seenKey)
	}
}

// TestAuthenticatorOnce: the listener's check hands its principal to the
// edge, which does not authenticate the request again; a request the
// check refuses, the edge refuses with its own answer.
func TestAuthenticatorOnce(t *testing.T) {
	d := keysDirectory("alice")
	var seen string
	h := Edge(d, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := edgePrincipal(r)
		seen = p.Name
	}))
	r := httptest.NewRequest("GET", "/mcp", nil)
	r.Header.Set("Authorization", "Bearer alice-key")
	r2, ok := Authenticator(d)(r)
	if !ok {
		t.Fatal("alice's key not authenticated")
	}
	r2.Header.Del("Authorization") // only the listener's result can name alice now
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r2)
	if w.Code != 200 || seen != "alice" {
		t.Fatalf("after the listener's check: %d seen %q, want alice", w.Code, seen)
	}

	r = httptest.NewRequest("GET", "/mcp", nil)
	r.Header.Set("Authorization", "Bearer wrong")
	if r2, ok = Authenticator(d)(r); ok {
		t.Fatal("a wrong key authenticated")
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r2)
	if w.Code != 401 || !strings.Contains(w.Body.String(), "not recognised") {
		t.Fatalf("wrong key: %d %s", w.Code, w.Body)
	}
}
