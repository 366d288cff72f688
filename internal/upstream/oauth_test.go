package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/manifests"
)

// tokenServer is an OAuth authorization server's token endpoint for the
// client credentials grant: it checks the client's credentials, scope and
// resource, and issues tokens that expire at once (so each use of one
// makes airlock ask for a new one).
type tokenServer struct {
	mu     sync.Mutex
	issued map[string]bool
	asked  int
	bad    []string
}

func (ts *tokenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostFormValue("client_id"), r.PostFormValue("client_secret")
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if id != "airlock" || secret != "cc-secret" || r.PostFormValue("grant_type") != "client_credentials" ||
		r.PostFormValue("scope") != "tickets.write" || r.PostFormValue("resource") != "https://tickets.test/mcp" {
		ts.bad = append(ts.bad, r.PostForm.Encode())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid_client"}`)
		return
	}
	ts.asked++
	tok := fmt.Sprintf("cc-token-%d", ts.asked)
	ts.issued[tok] = true
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 1})
}

func (ts *tokenServer) valid(tok string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.issued[tok]
}

// TestHTTPClientCredentials: airlock gets a token from the authorization
// server with its client credentials, sends it to an upstream that checks
// it, and gets new ones as they expire; calls work throughout.
func TestHTTPClientCredentials(t *testing.T) {
	ts := &tokenServer{issued: map[string]bool{}}
	as := httptest.NewServer(ts)
	t.Cleanup(as.Close)
	t.Setenv("TEST_CC_SECRET", "cc-secret")

	var count atomic.Int32
	var seen sync.Map
	var refused atomic.Int32
	s := newTestServer(testHooks{count: func() int { return int(count.Add(1)) }, slowStarted: func() {}})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !ts.valid(tok) {
			refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		seen.Store(tok, true)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)

	srv := manifests.Server{Name: "tickets", HTTP: &manifests.HTTPServer{URL: up.URL, OAuth: &manifests.ClientCredentials{
		TokenURL: as.URL, ClientID: "airlock", ClientSecretEnv: "TEST_CC_SECRET", Scopes: []string{"tickets.write"}, Resource: "https://tickets.test/mcp"}}}
	p := startPool(t, []manifests.Server{srv}, testOptions())
	waitState(t, p, "tickets", StateConnected)
	for i := range 3 {
		res, err := p.CallTool(context.Background(), "tickets", "echo", json.RawMessage(fmt.Sprintf(`{"text":"t%d"}`, i)))
		if err != nil || resultText(res) != fmt.Sprintf("t%d", i) {
			t.Fatalf("call %d: %v %v", i, resultText(res), err)
		}
	}
	n := 0
	seen.Range(func(any, any) bool { n++; return true })
	if n < 2 || refused.Load() != 0 || len(ts.bad) != 0 {
		t.Fatalf("%d distinct tokens reached the upstream (want at least 2: refreshed), %d requests refused, bad token requests %v", n, refused.Load(), ts.bad)
	}
}

// TestHTTPClientCredentialsMissingSecret: without the secret's variable
// the upstream is unavailable, and says which variable to set.
func TestHTTPClientCredentialsMissingSecret(t *testing.T) {
	srv := manifests.Server{Name: "tickets", HTTP: &manifests.HTTPServer{URL: "http://127.0.0.1:1/mcp", OAuth: &manifests.ClientCredentials{
		TokenURL: "http://127.0.0.1:1/token", ClientID: "airlock", ClientSecretEnv: "TEST_CC_SECRET_UNSET"}}}
	p := startPool(t, []manifests.Server{srv}, testOptions())
	st := waitState(t, p, "tickets", StateUnavailable)
	if !strings.Contains(st.Reason, "TEST_CC_SECRET_UNSET is not set") {
		t.Fatalf("reason %q", st.Reason)
	}
}
