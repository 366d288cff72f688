package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/zitadel/oidc/v3/example/server/storage"
	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/manifests"
)

// exchangeProvider is a real OpenID provider (zitadel/oidc's op, with its
// example in-memory storage) that implements RFC 8693 token exchange and
// issues JWT access tokens: it signs the users' sign-in tokens (for airlock,
// the MCP resource) and exchanges them for tokens of the upstream. A
// revoked user's exchanges are refused, as a provider refuses a disabled
// account's. It issues refresh tokens by exchange (requested_token_type
// refresh_token) and exchanges them again (subject_token_type
// refresh_token): held grants, offline: true. Its client "airlock" gets
// its own token by client credentials, and an exchange with that token as
// actor_token names it in the act claim (delegation).
type exchangeProvider struct {
	*storage.Storage
	issuer string
	client *jwtClient

	mu        sync.Mutex
	revoked   map[string]bool
	exchanged []string // the tokens it issued by exchange (access and refresh)
	held      int      // exchanges of a held grant (a refresh token)
	holds     int      // exchanges that issued a refresh token
}

// jwtClient is the example's web client, issuing JWT access tokens, allowed
// client credentials too (airlock's own actor token).
type jwtClient struct{ op.Client }

func (jwtClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

func (c jwtClient) GrantTypes() []zoidc.GrantType {
	return append(c.Client.GrantTypes(), zoidc.GrantTypeClientCredentials, zoidc.GrantTypeTokenExchange)
}

func (p *exchangeProvider) ClientCredentials(ctx context.Context, id, secret string) (op.Client, error) {
	if id != p.client.GetID() || secret != "exchange-secret" {
		return nil, errors.New("wrong client or secret")
	}
	return p.client, nil
}

func (p *exchangeProvider) ClientCredentialsTokenRequest(ctx context.Context, id string, scopes []string) (op.TokenRequest, error) {
	return &zoidc.JWTTokenRequest{Subject: id, Audience: []string{id}, Scopes: scopes}, nil
}

func (p *exchangeProvider) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	if id != p.client.GetID() {
		return nil, errors.New("client not found")
	}
	return p.client, nil
}

func (p *exchangeProvider) ValidateTokenExchangeRequest(ctx context.Context, r op.TokenExchangeRequest) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked[r.GetExchangeSubject()] {
		return zoidc.ErrInvalidGrant().WithDescription("the user's account is disabled")
	}
	if r.GetRequestedTokenType() == "" {
		r.SetRequestedTokenType(zoidc.AccessTokenType)
	}
	r.SetCurrentScopes(r.GetScopes())
	return nil
}

// GetPrivateClaimsFromTokenExchangeRequest names the actor, when the
// exchange was given one (actor_token), in the act claim (RFC 8693 §4.1).
func (p *exchangeProvider) GetPrivateClaimsFromTokenExchangeRequest(ctx context.Context, r op.TokenExchangeRequest) (map[string]any, error) {
	if a := r.GetExchangeActor(); a != "" {
		return map[string]any{"act": map[string]any{"sub": a}}, nil
	}
	return nil, nil
}

func (p *exchangeProvider) CreateAccessToken(ctx context.Context, r op.TokenRequest) (string, time.Time, error) {
	return p.Storage.CreateAccessToken(ctx, r)
}

type signIn struct {
	sub string
	aud []string
}

func (s signIn) GetSubject() string    { return s.sub }
func (s signIn) GetAudience() []string { return s.aud }
func (s signIn) GetScopes() []string   { return []string{"openid", "mcp"} }

// signIn is sub's access token for airlock, valid for ttl.
func (p *exchangeProvider) signIn(t *testing.T, sub, resource string, ttl time.Duration) string {
	t.Helper()
	tok, err := op.CreateJWT(context.Background(), p.issuer, signIn{sub, []string{resource}}, time.Now().Add(ttl), uuid.NewString(), p.client, p)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (p *exchangeProvider) revoke(sub string) {
	p.mu.Lock()
	p.revoked[sub] = true
	p.mu.Unlock()
}

func startExchangeProvider(t *testing.T) *exchangeProvider {
	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	web := storage.WebClient("airlock", "exchange-secret")
	p := &exchangeProvider{issuer: srv.URL, revoked: map[string]bool{},
		Storage: storage.NewStorageWithClients(storage.NewUserStore(srv.URL), map[string]*storage.Client{"airlock": web})}
	p.client = &jwtClient{storage.RedirectGlobsClient(web)}
	provider, err := op.NewOpenIDProvider(srv.URL, &op.Config{CryptoKey: [32]byte{1}}, p, op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/oauth/token" {
			provider.ServeHTTP(w, r)
			return
		}
		// Note each issued token, to search for it later.
		_ = r.ParseForm()
		rec := httptest.NewRecorder()
		provider.ServeHTTP(rec, r)
		if rec.Code == 200 {
			var out struct {
				AccessToken  string `json:"access_token"`
				RefreshToken string `json:"refresh_token"`
			}
			if jsonUnmarshal(rec.Body.Bytes(), &out) == nil && out.AccessToken != "" {
				p.mu.Lock()
				p.exchanged = append(p.exchanged, out.AccessToken)
				if out.RefreshToken != "" {
					p.exchanged = append(p.exchanged, out.RefreshToken)
					p.holds++
				}
				if r.PostForm.Get("subject_token_type") == exchange.TokenTypeRefresh {
					p.held++
				}
				p.mu.Unlock()
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
	return p
}

// ticketsUpstream is an MCP server over HTTP that verifies the bearer of
// every tool call (signature against the provider's key set, issuer,
// audience "tickets") and answers with the token's subject; airlock's own
// session traffic (initialize, tools/list) carries no bearer and is let
// through without one.
type ticketsUpstream struct {
	url    string
	mu     sync.Mutex
	ran    map[string][]string // tool → subjects it ran for
	actors map[string][]string // tool → the act claim's sub of each run ("" without)
	seen   []string            // every bearer received
	hold   map[string]int      // tool → how many of its next calls stay in the call (holdNext)
	// released ends the held calls when the test ends.
	released chan struct{}
}

// holdNext makes the next n calls of tool stay in the upstream call (run
// recorded, no answer) until their request is cancelled: airlock died.
func (u *ticketsUpstream) holdNext(tool string, n int) {
	u.mu.Lock()
	u.hold[tool] += n
	u.mu.Unlock()
}

func startTicketsUpstream(t *testing.T, issuer string) *ticketsUpstream {
	prov, err := oidc.NewProvider(context.Background(), issuer)
	if err != nil {
		t.Fatal(err)
	}
	verifier := prov.Verifier(&oidc.Config{ClientID: "tickets"})
	u := &ticketsUpstream{ran: map[string][]string{}, actors: map[string][]string{}, hold: map[string]int{}, released: make(chan struct{})}
	srv := mcp.NewServer(&mcp.Implementation{Name: "tickets", Version: "1"}, nil)
	for _, name := range []string{"whoami", "deploy", "update"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name, Description: name}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
			N int `json:"n"`
		}) (*mcp.CallToolResult, any, error) {
			sub, _ := req.Extra.TokenInfo.Extra["sub"].(string)
			if sub == "" {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no user"}}}, nil, nil
			}
			act, _ := req.Extra.TokenInfo.Extra["act"].(string)
			u.mu.Lock()
			u.ran[name] = append(u.ran[name], sub)
			u.actors[name] = append(u.actors[name], act)
			hold := u.hold[name] > 0
			if hold {
				u.hold[name]--
			}
			u.mu.Unlock()
			if hold { // holdNext: stay in the call until airlock goes away
				select {
				case <-ctx.Done():
				case <-u.released:
				}
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "held call ended"}}}, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s #%d as %s", name, in.N, sub)}}}, nil, nil
		})
	}
	verify := func(ctx context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		if tok == "airlock-session" {
			return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour), Extra: map[string]any{}}, nil
		}
		idt, err := verifier.Verify(ctx, tok)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		var claims struct {
			Act struct {
				Sub string `json:"sub"`
			} `json:"act"`
		}
		if err := idt.Claims(&claims); err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		return &auth.TokenInfo{Expiration: idt.Expiry, Extra: map[string]any{"sub": idt.Subject, "act": claims.Act.Sub}}, nil
	}
	mcpH := auth.RequireBearerToken(verify, nil)(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		authz := r.Header.Get("Authorization")
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"tools/call"`)) && authz == "" {
				http.Error(w, "tools/call needs the user's bearer", http.StatusUnauthorized)
				return
			}
		}
		if authz == "" {
			r.Header.Set("Authorization", "Bearer airlock-session")
		} else {
			u.mu.Lock()
			u.seen = append(u.seen, strings.TrimPrefix(authz, "Bearer "))
			u.mu.Unlock()
		}
		mcpH.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(u.released) }) // before hs.Close: held calls end
	u.url = hs.URL
	return u
}

func (u *ticketsUpstream) runs(tool string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.ran[tool]...)
}

func (u *ticketsUpstream) actorsOf(tool string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.actors[tool]...)
}

// TestTokenExchangeActsAsUser: through the real stack, against a real
// OpenID provider with token exchange, each call reaches an upstream that
// verifies its bearer as the user who made it: alice's as alice and bob's
// as bob, forty at once on one shared upstream session, never crossed,
// and a program's calls as the user who ran it.
// A call approved after its user's token expired, and a call of a user
// revoked at the provider while it waited, fail with "did not run" and
// nothing runs. An API-key caller is refused. The tasks' histories name
// who acted; no history, audit line or log line holds any token.
func TestTokenExchangeActsAsUser(t *testing.T) {
	const resource = "https://airlock.test/mcp"
	p := startExchangeProvider(t)
	up := startTicketsUpstream(t, p.issuer)
	t.Setenv("TICKETS_EXCHANGE_SECRET", "exchange-secret")

	tool := func(risk manifests.Risk, approval *manifests.Approval) *manifests.Tool {
		return &manifests.Tool{Description: "x", SideEffects: []manifests.SideEffect{manifests.SideEffectWrite}, DataAccessLevel: manifests.DataPublic,
			Risk: risk, Idempotent: true, Timeout: manifests.Duration(20 * time.Second), Approval: approval}
	}
	m := &manifests.Manifest{File: "tickets.yaml",
		Server: manifests.Server{Name: "tickets", HTTP: &manifests.HTTPServer{URL: up.url, Auth: &manifests.UpstreamAuth{TokenExchange: &manifests.TokenExchange{
			TokenURL: p.issuer + "/oauth/token", ClientID: "airlock", ClientSecretEnv: "TICKETS_EXCHANGE_SECRET", Audience: "tickets", Scopes: []string{"tickets.write"}}}}},
		Tools: map[string]*manifests.Tool{
			"whoami": tool(manifests.RiskLow, nil),
			"deploy": tool(manifests.RiskHigh, &manifests.Approval{Group: "ops", Timeout: manifests.Duration(10 * time.Minute)}),
			"update": tool(manifests.RiskLow, nil),
		}}
	// update's pre-image is read as the user too (a capture is part of the call).
	m.Tools["update"].Capture = &manifests.Call{Tool: "whoami", Args: map[string]string{"n": "args.n + 100"}}
	m.Tools["update"].Compensation = &manifests.Call{Tool: "whoami", Args: map[string]string{"n": "args.n"}}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatal(manifests.Problems(ps))
	}
	dir := identity.New(&config.Config{
		Roles:      map[string]*config.Role{"all": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}}},
		Principals: []config.Principal{{Name: "carol", Roles: []string{"all"}, APIKeySHA256: []string{identity.HashKey("carol-key")}}},
		PrincipalsFromTokens: &config.Tokens{Resource: resource,
			Issuers: []config.TokenIssuer{{Issuer: p.issuer, Name: "corp"}},
			Roles:   []config.TokenRole{{Roles: []string{"all"}, When: `claims.sub != ""`}}},
	})
	key, err := exchange.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	var logs, audit syncBuffer
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir, subjectKey: key, logs: &logs,
		audit: auditstream.New(&audit), groups: map[string][]string{"ops": {"carol"}}, inlineWait: 2 * time.Minute,
		programs: &gateway.ProgramOptions{}})

	tokens := map[string]string{"alice": p.signIn(t, "alice", resource, time.Hour), "bob": p.signIn(t, "bob", resource, time.Hour)}
	sessions := map[string]*mcp.ClientSession{}
	for who, tok := range tokens {
		sessions[who] = connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + tok})
	}
	waitTools(t, sessions["alice"], "tickets__whoami", "tickets__deploy")
	tasks := map[string]bool{}
	var tasksMu sync.Mutex

	// 1. Concurrent calls of two users on one upstream, never crossed.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		who := []string{"alice", "bob"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sessions[who].CallTool(context.Background(), &mcp.CallToolParams{Name: "tickets__whoami", Arguments: map[string]any{"n": i}})
			if err != nil {
				errs <- err
				return
			}
			if want := fmt.Sprintf("whoami #%d as %s", i, who); res.IsError || text(res) != want {
				errs <- fmt.Errorf("%s's call %d: %q, want %q", who, i, text(res), want)
			}
			tasksMu.Lock()
			tasks[res.Meta[gateway.MetaTask].(string)] = true
			tasksMu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(up.runs("whoami")); n != 40 {
		t.Fatalf("the upstream ran whoami %d times, want 40", n)
	}

	// 1a. A call's capture runs as the user.
	if res := call(t, sessions["alice"], "tickets__update", map[string]any{"n": 5}, ""); res.IsError || text(res) != "update #5 as alice" {
		t.Fatalf("update: %s", text(res))
	}
	if got := up.runs("whoami"); len(got) != 41 || got[40] != "alice" {
		t.Fatalf("the capture ran as %v", got[40:])
	}

	// 1b. A program's calls act as the user who ran it.
	res, _ := runProgram(t, sessions["bob"], "def main():\n    return tickets.whoami(n=7)\n", false, "")
	if res.IsError || !strings.Contains(text(res)+mustJSON(t, res.StructuredContent), "whoami #7 as bob") {
		t.Fatalf("bob's program: %s %s", text(res), mustJSON(t, res.StructuredContent))
	}
	tasks[res.Meta[gateway.MetaTask].(string)] = true

	// 2. An API key names no user to act as.
	carol := connectURL(t, s.url, bearer("carol-key"))
	if res := call(t, carol, "tickets__whoami", map[string]any{"n": 0}, ""); !res.IsError || !strings.Contains(text(res), "API key") || !strings.Contains(text(res), "Nothing ran") {
		t.Fatalf("API-key call: %s", text(res))
	}

	local := approver.Local{Temporal: s.client, Namespace: s.srv.Namespace()}
	approveAs := func(r api.ApprovalRequest) {
		t.Helper()
		if _, err := local.Decide(context.Background(), approver.Decision{RequestID: r.ID, Approver: "carol", Approve: true, Via: "cli", Digest: r.Digest[:12]}); err != nil {
			t.Fatal(err)
		}
	}
	failed := func(r asyncResult, want string) {
		t.Helper()
		if r.err != nil || !r.res.IsError || !strings.Contains(text(r.res), "did not run") || !strings.Contains(text(r.res), want) {
			t.Fatalf("result %v %s; want it to say it did not run, and %q", r.err, text(r.res), want)
		}
		tasksMu.Lock()
		tasks[r.res.Meta[gateway.MetaTask].(string)] = true
		tasksMu.Unlock()
	}

	// 3. Approved after the user's token expired: nothing runs.
	short := p.signIn(t, "alice", resource, 3*time.Second)
	tokens["alice-short"] = short
	csShort := connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + short})
	pending := callAsync(csShort, "tickets__deploy", map[string]any{"n": 1001})
	r := waitPending(t, local, "1001", nil)
	if r.ActsAs != "alice@corp" || r.ActsUntil.IsZero() || r.ActsUntil.After(time.Now().Add(5*time.Second)) {
		t.Fatalf("the approver is not told whom the call acts as, and until when: %q %v", r.ActsAs, r.ActsUntil)
	}
	waitFor(t, "the short token to expire", 10*time.Second, func() bool { return expired(short) })
	approveAs(r)
	failed(<-pending, "expired")

	// 4. A user revoked at the provider while the call waited: nothing runs.
	pending = callAsync(sessions["bob"], "tickets__deploy", map[string]any{"n": 1002})
	r = waitPending(t, local, "1002", map[string]bool{r.ID: true})
	p.revoke("bob")
	approveAs(r)
	failed(<-pending, "disabled")
	if got := up.runs("deploy"); len(got) != 0 {
		t.Fatalf("deploy ran for %v; want never", got)
	}

	// 5. Where tokens must never be: histories, the audit stream, logs.
	h := searchTokens(t, s, tasks, p, up, tokens, &logs, &audit)
	for _, want := range []string{"ActedAs", `\"Subject\":\"alice\"`, `\"Subject\":\"bob\"`, p.issuer, "alice@corp", "UserGrant"} {
		if !strings.Contains(h, want) {
			t.Errorf("the histories do not hold %s", want)
		}
	}
}

// searchTokens searches the histories of tasks, the audit stream and the
// logs for every token the provider issued (by exchange and refresh), the
// users' sign-in tokens, every bearer the upstream received and the client
// secret, and returns the histories' text.
func searchTokens(t *testing.T, s *stack, tasks map[string]bool, p *exchangeProvider, up *ticketsUpstream, tokens map[string]string, logs, audit *syncBuffer) string {
	t.Helper()
	ctx := context.Background()
	var hist strings.Builder
	for id := range tasks {
		it := s.client.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			hist.WriteString(ev.String())
		}
	}
	h := hist.String()
	p.mu.Lock()
	exchanged := append([]string(nil), p.exchanged...)
	p.mu.Unlock()
	if len(exchanged) < len(tasks) {
		t.Fatalf("the provider issued %d tokens for %d tasks", len(exchanged), len(tasks))
	}
	secrets := append(exchanged, "exchange-secret")
	for _, tok := range tokens {
		secrets = append(secrets, tok)
	}
	up.mu.Lock()
	secrets = append(secrets, up.seen...)
	up.mu.Unlock()
	places := map[string]string{"history": h, "audit stream": audit.String(), "logs": logs.String()}
	if logs.String() == "" || audit.String() == "" {
		t.Fatal("no logs or no audit lines to search")
	}
	for where, text := range places {
		for _, sec := range secrets {
			for _, part := range strings.Split(sec, ".") {
				if len(part) >= 16 && strings.Contains(text, part) {
					t.Fatalf("the %s holds token material (%.12s…)", where, part)
				}
			}
		}
	}
	return h
}

// expired reports whether the JWT tok's exp has passed (airlock's edge
// and worker compare whole seconds).
func expired(tok string) bool {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return false
	}
	var c struct {
		Exp int64 `json:"exp"`
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || jsonUnmarshal(b, &c) != nil {
		return false
	}
	return time.Now().Unix() > c.Exp
}

// heldGrantStack is the stack of TestTokenExchangeHeldGrant: the tickets
// upstream behind the manifests "desk" (offline: true, actor: true: the
// gateway has the provider hold each caller's grant, the worker names
// airlock as actor), "tickets" (neither: the old behaviour), and "vault"
// and "down" (offline, but the secret is not set / the provider is not
// reachable).
func heldGrantStack(t *testing.T, p *exchangeProvider, up *ticketsUpstream, opts stackOptions) *stack {
	const resource = "https://airlock.test/mcp"
	tool := func(risk manifests.Risk, approval *manifests.Approval) *manifests.Tool {
		return &manifests.Tool{Description: "x", SideEffects: []manifests.SideEffect{manifests.SideEffectWrite}, DataAccessLevel: manifests.DataPublic,
			Risk: risk, Idempotent: true, Timeout: manifests.Duration(20 * time.Second), Approval: approval}
	}
	manifest := func(name string, offline bool, tokenURL, secretEnv string) *manifests.Manifest {
		m := &manifests.Manifest{File: name + ".yaml",
			Server: manifests.Server{Name: name, HTTP: &manifests.HTTPServer{URL: up.url, Auth: &manifests.UpstreamAuth{TokenExchange: &manifests.TokenExchange{
				TokenURL: tokenURL, ClientID: "airlock", ClientSecretEnv: secretEnv, Audience: "tickets",
				Scopes: []string{"tickets.write"}, Offline: offline, Actor: offline}}}},
			Tools: map[string]*manifests.Tool{
				"whoami": tool(manifests.RiskLow, nil),
				"deploy": tool(manifests.RiskHigh, &manifests.Approval{Group: "ops", Timeout: manifests.Duration(10 * time.Minute)}),
				"update": tool(manifests.RiskLow, nil),
			}}
		m.Tools["update"].Capture = &manifests.Call{Tool: "whoami", Args: map[string]string{"n": "args.n + 100"}}
		m.Tools["update"].Compensation = &manifests.Call{Tool: "whoami", Args: map[string]string{"n": "args.n + 200"}}
		if ps := m.Validate(); len(ps) > 0 {
			t.Fatal(manifests.Problems(ps))
		}
		return m
	}
	tokenURL := p.issuer + "/oauth/token"
	opts.manifests = []*manifests.Manifest{manifest("desk", true, tokenURL, "TICKETS_EXCHANGE_SECRET"), manifest("tickets", false, tokenURL, "TICKETS_EXCHANGE_SECRET"),
		// Held grants that cannot be had: the gateway has no secret, the
		// provider cannot be reached.
		manifest("vault", true, tokenURL, "UNSET_EXCHANGE_SECRET"), manifest("down", true, "http://127.0.0.1:1/oauth/token", "TICKETS_EXCHANGE_SECRET")}
	opts.directory = identity.New(&config.Config{
		Roles: map[string]*config.Role{"all": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}}},
		PrincipalsFromTokens: &config.Tokens{Resource: resource,
			Issuers: []config.TokenIssuer{{Issuer: p.issuer, Name: "corp"}},
			Roles:   []config.TokenRole{{Roles: []string{"all"}, When: `claims.sub != ""`}}},
	})
	opts.groups = map[string][]string{"ops": {"carol"}}
	opts.inlineWait = 2 * time.Minute
	opts.programs = &gateway.ProgramOptions{}
	return newStack(t, opts)
}

// TestTokenExchangeHeldGrant (issue 31 §2): with offline: true the gateway
// has the provider hold the caller's grant (an RFC 8693 exchange for a
// refresh token, sealed with the call; one per sign-in), so
//   - a call approved after its user's 3 s token expired runs, with a fresh
//     exchange of the held grant made when it runs, as that user, and the
//     upstream sees airlock named as actor (actor: true, act claim);
//   - a user revoked at the provider while the call waited does not run
//     (UserGrant, "did not run"), and the approver was told the grant was
//     held;
//   - a compensation acts as the user of the call it undoes: after the
//     token expired it runs with the held grant; without one (an upstream
//     without offline) the rollback fails closed, naming the reason, and
//     nothing runs;
//   - no history, audit line or log line holds any token, the refresh
//     tokens included.
func TestTokenExchangeHeldGrant(t *testing.T) {
	const resource = "https://airlock.test/mcp"
	p := startExchangeProvider(t)
	up := startTicketsUpstream(t, p.issuer)
	t.Setenv("TICKETS_EXCHANGE_SECRET", "exchange-secret")
	key, err := exchange.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	var logs, audit syncBuffer
	s := heldGrantStack(t, p, up, stackOptions{subjectKey: key, logs: &logs, audit: auditstream.New(&audit)})
	tokens := map[string]string{"alice": p.signIn(t, "alice", resource, time.Hour)}
	waitTools(t, connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + tokens["alice"]}), "desk__deploy", "tickets__update")
	tasks := map[string]bool{}
	local := approver.Local{Temporal: s.client, Namespace: s.srv.Namespace()}
	approveAs := func(r api.ApprovalRequest) {
		t.Helper()
		if _, err := local.Decide(context.Background(), approver.Decision{RequestID: r.ID, Approver: "carol", Approve: true, Via: "cli", Digest: r.Digest[:12]}); err != nil {
			t.Fatal(err)
		}
	}
	short := func(who string) (*mcp.ClientSession, string) {
		tok := p.signIn(t, who, resource, 3*time.Second)
		tokens[who+"-short-"+uuid.NewString()] = tok
		return connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + tok}), tok
	}
	taskOf := func(res *mcp.CallToolResult) string {
		t.Helper()
		id, _ := res.Meta[gateway.MetaTask].(string)
		if id == "" {
			t.Fatalf("no task in %v", res.Meta)
		}
		tasks[id] = true
		return id
	}
	rollback := func(task string) api.RollbackResult {
		t.Helper()
		ctx := context.Background()
		h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: task, UpdateID: "rb-" + uuid.NewString(),
			UpdateName: api.UpdateRollback, Args: []any{api.RollbackRequest{By: "operator"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
		var res api.RollbackResult
		if err == nil {
			err = h.Get(ctx, &res)
		}
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	// 0. Concurrent calls of two users, each holding its grant, never
	// crossed; a program's calls hold the grant of the user who ran it.
	tokens["bob"] = p.signIn(t, "bob", resource, time.Hour)
	sessions := map[string]*mcp.ClientSession{
		"alice": connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + tokens["alice"]}),
		"bob":   connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + tokens["bob"]}),
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := make(chan error, 20)
	for i := range 20 {
		who := []string{"alice", "bob"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sessions[who].CallTool(context.Background(), &mcp.CallToolParams{Name: "desk__whoami", Arguments: map[string]any{"n": 500 + i}})
			if err != nil {
				errs <- err
				return
			}
			if want := fmt.Sprintf("whoami #%d as %s", 500+i, who); res.IsError || text(res) != want {
				errs <- fmt.Errorf("%s's call %d: %q, want %q", who, i, text(res), want)
				return
			}
			mu.Lock()
			taskOf(res)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	pres, _ := runProgram(t, sessions["bob"], "def main():\n    return desk.whoami(n=9)\n", false, "")
	if pres.IsError || !strings.Contains(text(pres)+mustJSON(t, pres.StructuredContent), "whoami #9 as bob") {
		t.Fatalf("bob's program: %s %s", text(pres), mustJSON(t, pres.StructuredContent))
	}
	taskOf(pres)
	p.mu.Lock()
	holds0 := p.holds
	p.mu.Unlock()
	if holds0 != 2 || len(up.runs("whoami")) != 21 {
		t.Fatalf("the provider held %d grants and whoami ran %d times; want 2 (one per sign-in, shared by its calls and the program) and 21", holds0, len(up.runs("whoami")))
	}
	for _, a := range up.actorsOf("whoami") {
		if a != "airlock" {
			t.Fatalf("a call reached the upstream with actor %q; want airlock", a)
		}
	}

	// 1. Approved after the token expired: runs as alice, freshly exchanged.
	cs, tok := short("alice")
	pending := callAsync(cs, "desk__deploy", map[string]any{"n": 2001})
	r := waitPending(t, local, "2001", nil)
	if r.ActsAs != "alice@corp" || !r.ActsHeld {
		t.Fatalf("the approver is not told the grant is held: %q held=%v", r.ActsAs, r.ActsHeld)
	}
	p.mu.Lock()
	holds, held := p.holds, p.held
	p.mu.Unlock()
	if holds != holds0+1 || held != 0 {
		t.Fatalf("before approval the provider held %d more grants and exchanged %d; want 1 and 0", holds-holds0, held)
	}
	waitFor(t, "the short token to expire", 10*time.Second, func() bool { return expired(tok) })
	approveAs(r)
	res := <-pending
	if res.err != nil || res.res.IsError || text(res.res) != "deploy #2001 as alice" {
		t.Fatalf("approved after expiry: %v %s; want it run as alice", res.err, text(res.res))
	}
	taskOf(res.res)
	p.mu.Lock()
	held = p.held
	p.mu.Unlock()
	if held != 1 {
		t.Fatalf("the provider exchanged %d held grants; want 1 (the fresh exchange when the call ran)", held)
	}
	if got, act := up.runs("deploy"), up.actorsOf("deploy"); len(got) != 1 || got[0] != "alice" || act[0] != "airlock" {
		t.Fatalf("deploy ran as %v with actors %v; want alice with act airlock", got, act)
	}

	// 2. Revoked at the provider while it waited (its token expired too):
	// nothing runs.
	cs, tok = short("dave")
	pending = callAsync(cs, "desk__deploy", map[string]any{"n": 2002})
	r = waitPending(t, local, "2002", map[string]bool{r.ID: true})
	waitFor(t, "the short token to expire", 10*time.Second, func() bool { return expired(tok) })
	p.revoke("dave")
	approveAs(r)
	res = <-pending
	if res.err != nil || !res.res.IsError || !strings.Contains(text(res.res), "did not run") || !strings.Contains(text(res.res), "disabled") || !strings.Contains(text(res.res), "dave@corp") {
		t.Fatalf("revoked: %v %s; want it not run, naming dave and the provider's reason", res.err, text(res.res))
	}
	taskOf(res.res)
	if got := up.runs("deploy"); len(got) != 1 {
		t.Fatalf("deploy ran for %v; want alice only", got)
	}

	// 3. A compensation acts as the call's user, after the token expired,
	// with the held grant.
	cs, tok = short("alice")
	res1 := call(t, cs, "desk__update", map[string]any{"n": 7}, "")
	if res1.IsError || text(res1) != "update #7 as alice" {
		t.Fatalf("desk update: %s", text(res1))
	}
	task := taskOf(res1)
	waitFor(t, "the short token to expire", 10*time.Second, func() bool { return expired(tok) })
	if rb := rollback(task); rb.State != api.StateRolledBack || len(rb.Compensated) != 1 {
		t.Fatalf("rollback of desk update: %s %s; want rolled back", rb.State, rb.Reason)
	}
	whoami := up.runs("whoami")[21:]
	if len(whoami) != 2 || whoami[0] != "alice" || whoami[1] != "alice" {
		t.Fatalf("capture and compensation ran as %v; want alice twice", whoami)
	}

	// 4. Without a held grant (tickets: no offline), a compensation after
	// the token expired fails closed, saying why; nothing runs.
	cs, tok = short("alice")
	res1 = call(t, cs, "tickets__update", map[string]any{"n": 8}, "")
	if res1.IsError || text(res1) != "update #8 as alice" {
		t.Fatalf("tickets update: %s", text(res1))
	}
	task = taskOf(res1)
	waitFor(t, "the short token to expire", 10*time.Second, func() bool { return expired(tok) })
	rb := rollback(task)
	if rb.State != api.StateRollbackFailed || !strings.Contains(rb.Reason, "alice@corp") || !strings.Contains(rb.Reason, "expired") || !strings.Contains(rb.Reason, "nothing ran") {
		t.Fatalf("rollback without a held grant: %s %q; want rollback_failed naming the expired sign-in", rb.State, rb.Reason)
	}
	if n := len(up.runs("whoami")); n != 24 { // the capture ran, the compensation did not
		t.Fatalf("whoami ran %d times; want 24", n)
	}

	// 5. A grant the gateway cannot have held refuses the call before it
	// enters the task: the provider refuses (a disabled user), the gateway
	// lacks the secret, the provider cannot be reached. Nothing runs.
	p.revoke("erin")
	tokens["erin"] = p.signIn(t, "erin", resource, time.Hour)
	erin := connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + tokens["erin"]})
	for _, tc := range []struct {
		cs         *mcp.ClientSession
		tool, want string
	}{
		{erin, "desk__whoami", "cannot hold erin@corp's grant for desk (offline: true): cannot act as erin@corp: the provider refused"},
		{sessions["alice"], "vault__whoami", "the environment variable UNSET_EXCHANGE_SECRET is not set on this gateway"},
		{sessions["alice"], "down__whoami", "cannot hold alice@corp's grant for down (offline: true): token exchange at http://127.0.0.1:1/oauth/token"},
	} {
		res := call(t, tc.cs, tc.tool, map[string]any{"n": 9999}, "")
		if !res.IsError || !strings.Contains(text(res), tc.want) || !strings.Contains(text(res), "Nothing ran") {
			t.Errorf("%s: %s; want it refused, saying %q and that nothing ran", tc.tool, text(res), tc.want)
		}
	}
	if n := len(up.runs("whoami")); n != 24 {
		t.Fatalf("whoami ran %d times after the refusals; want 24", n)
	}
	// A gateway without the subject key refuses before asking the provider.
	p.mu.Lock()
	holds = p.holds
	p.mu.Unlock()
	keyless := heldGrantStack(t, p, up, stackOptions{})
	kcs := connectURL(t, keyless.url, map[string]string{"Authorization": "Bearer " + tokens["alice"]})
	waitTools(t, kcs, "desk__whoami")
	res1 = call(t, kcs, "desk__whoami", map[string]any{"n": 9998}, "")
	if !res1.IsError || !strings.Contains(text(res1), exchange.EnvKey) || !strings.Contains(text(res1), "Nothing ran") {
		t.Fatalf("a gateway without the subject key: %s", text(res1))
	}
	p.mu.Lock()
	if p.holds != holds {
		t.Errorf("a gateway without the subject key asked the provider to hold a grant")
	}
	p.mu.Unlock()

	h := searchTokens(t, s, tasks, p, up, tokens, &logs, &audit)
	for _, want := range []string{`\"Held\":true`, "user-grant", `\"Actor\":\"airlock\"`, "UserGrant", "dave@corp"} {
		if !strings.Contains(h, want) {
			t.Errorf("the histories do not hold %s", want)
		}
	}
}
