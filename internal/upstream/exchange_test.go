package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/manifests"
)

// TestHTTPTokenExchange: calls of two users through one upstream session,
// at once, each reach the upstream with the token exchanged for its own
// user, while the session's own traffic carries airlock's client
// credentials token; a call without an exchanged token is refused before it
// is sent; a refused exchange is the user's grant error. With actor: true
// each exchange names airlock by its own token (actor_token).
func TestHTTPTokenExchange(t *testing.T) {
	t.Setenv("TEST_TX_SECRET", "tx-secret")
	var n atomic.Int32
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, _ := r.BasicAuth()
		w.Header().Set("Content-Type", "application/json")
		if id != "airlock" || secret != "tx-secret" {
			w.WriteHeader(401)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		switch r.PostFormValue("grant_type") {
		case "client_credentials":
			fmt.Fprint(w, `{"access_token":"cc-token","token_type":"Bearer","expires_in":3600}`)
		case exchange.GrantType:
			user, ok := strings.CutPrefix(r.PostFormValue("subject_token"), "sign-in-")
			if !ok || user == "revoked" || r.PostFormValue("audience") != "tickets" ||
				r.PostFormValue("actor_token") != "cc-token" || r.PostFormValue("actor_token_type") != exchange.TokenTypeAccess {
				w.WriteHeader(400)
				fmt.Fprint(w, `{"error":"invalid_grant","error_description":"account disabled"}`)
				return
			}
			fmt.Fprintf(w, `{"access_token":"up-%s-%d","token_type":"Bearer","issued_token_type":%q,"expires_in":60}`, user, n.Add(1), exchange.TokenTypeAccess)
		}
	}))
	t.Cleanup(as.Close)

	var mu sync.Mutex
	var calls, crossed []string
	sessionBearers := map[string]bool{}
	s := newTestServer(testHooks{count: func() int { return 0 }, slowStarted: func() {}})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		authz := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			calls = append(calls, authz)
			// The echoed text names the user the call was made for.
			for _, user := range []string{"alice", "bob"} {
				if bytes.Contains(body, []byte(`"text":"`+user)) && !strings.HasPrefix(authz, "up-"+user+"-") {
					crossed = append(crossed, user+" got "+authz)
				}
			}
		} else {
			sessionBearers[authz] = true
		}
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)

	srv := manifests.Server{Name: "tickets", HTTP: &manifests.HTTPServer{URL: up.URL,
		OAuth: &manifests.ClientCredentials{TokenURL: as.URL, ClientID: "airlock", ClientSecretEnv: "TEST_TX_SECRET"},
		Auth:  &manifests.UpstreamAuth{TokenExchange: &manifests.TokenExchange{TokenURL: as.URL, ClientID: "airlock", ClientSecretEnv: "TEST_TX_SECRET", Audience: "tickets", Actor: true}}}}
	p := startPool(t, []manifests.Server{srv}, testOptions())
	waitState(t, p, "tickets", StateConnected)

	_, err := p.CallTool(context.Background(), "tickets", "echo", json.RawMessage(`{"text":"nobody"}`))
	if !errors.Is(err, exchange.ErrNoSubject) {
		t.Fatalf("a call without a user: %v; want ErrNoSubject", err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		user := []string{"alice", "bob"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, tok, err := p.ActAs(context.Background(), "tickets", exchange.Grant{Token: "sign-in-" + user}, user+"@corp")
			if err != nil || tok == nil || tok.Audience != "tickets" || tok.Actor != "airlock" {
				errs <- fmt.Errorf("%s: ActAs %v %+v", user, err, tok)
				return
			}
			text := fmt.Sprintf("%s-%d", user, i)
			res, err := p.CallTool(ctx, "tickets", "echo", json.RawMessage(`{"text":"`+text+`"}`))
			if err != nil || resultText(res) != text {
				errs <- fmt.Errorf("%s: %v %v", text, resultText(res), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 20 || len(crossed) != 0 {
		t.Fatalf("%d tools/call requests (want 20); crossed: %v", len(calls), crossed)
	}
	if !sessionBearers["cc-token"] || len(sessionBearers) != 1 {
		t.Fatalf("session traffic carried %v; want airlock's own cc-token only", sessionBearers)
	}

	_, _, err = p.ActAs(context.Background(), "tickets", exchange.Grant{Token: "sign-in-revoked", Type: exchange.TokenTypeAccess}, "revoked@corp")
	if !errors.Is(err, exchange.ErrRefused) || !strings.Contains(err.Error(), "account disabled") {
		t.Fatalf("revoked: %v", err)
	}
	if ctx, tok, err := p.ActAs(context.Background(), "nope", exchange.Grant{Token: "x"}, "x"); err == nil || tok != nil || ctx == nil {
		t.Fatal("an unknown upstream was acted on")
	}
}
