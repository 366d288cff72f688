package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/oauth"
	"github.com/airlock-run/airlock/internal/oauth/oauthtest"
	"github.com/airlock-run/airlock/manifests"
)

// lockedBuffer is an audit destination tests read while the gateway
// writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the audit lines written so far, decoded.
func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if ln == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatalf("audit line %q: %v", ln, err)
		}
		out = append(out, m)
	}
	return out
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type oauthGateway struct {
	url      string // the MCP endpoint
	base     string
	resource string
	p        *oauthtest.Provider
	ft       *fakeTemporal
	audit    *lockedBuffer
}

// newOAuthGateway serves a gateway whose directory accepts tokens of a
// real OpenID provider for its own URL, and the API key "key-holder-key".
func newOAuthGateway(t *testing.T) *oauthGateway {
	t.Helper()
	return newOAuthGatewayWith(t, Options{})
}

// newOAuthGatewayWith is newOAuthGateway with more options.
func newOAuthGatewayWith(t *testing.T, o Options) *oauthGateway {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	resource := "http://" + srv.Listener.Addr().String() + "/mcp"
	p := oauthtest.Start(t, resource)
	cfg := &config.Config{
		Roles:      map[string]*config.Role{"all": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}}},
		Principals: []config.Principal{{Name: "key-holder", Roles: []string{"all"}, APIKeySHA256: []string{identity.HashKey("key-holder-key")}}},
		PrincipalsFromTokens: &config.Tokens{Resource: resource,
			Issuers:    []config.TokenIssuer{{Issuer: p.Issuer(), Name: "corp"}},
			Roles:      []config.TokenRole{{Roles: []string{"all"}, When: `claims.sub != ""`}},
			ToolScopes: []config.ToolScope{{Tools: "counter__*", Scopes: []string{"counter:call"}}},
			// Follow a rotation at once (internal/oauth tests the cooldown).
			JWKSRefetchCooldown: 1,
		},
	}
	dir := identity.New(cfg)
	audit := &lockedBuffer{}
	ft := &fakeTemporal{}
	o.Directory, o.Audit = dir, auditstream.New(audit)
	g := newTestGateway(t, ft, o)
	mux := http.NewServeMux()
	mux.Handle("/mcp", g.Handler())
	dir.MountMetadata(mux)
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	return &oauthGateway{url: srv.URL + "/mcp", base: srv.URL, resource: resource, p: p, ft: ft, audit: audit}
}

// post sends one JSON-RPC request with a bearer value ("" for none).
func (o *oauthGateway) post(t *testing.T, bearer, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", o.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`

var resourceMetadataParam = regexp.MustCompile(`resource_metadata="([^"]+)"`)

// TestOAuthDiscoveryFromChallenge: a request without credentials gets 401
// with WWW-Authenticate naming the Protected Resource Metadata; following
// it, as an MCP client does, gives the resource and its authorization
// server.
func TestOAuthDiscoveryFromChallenge(t *testing.T) {
	o := newOAuthGateway(t)
	resp, _ := o.post(t, "", initializeBody)
	ch := resp.Header.Get("WWW-Authenticate")
	m := resourceMetadataParam.FindStringSubmatch(ch)
	if resp.StatusCode != 401 || m == nil || strings.Contains(ch, "error=") {
		t.Fatalf("no credentials: %d, WWW-Authenticate %q; want 401 with resource_metadata and no error code", resp.StatusCode, ch)
	}
	if m[1] != o.base+"/.well-known/oauth-protected-resource/mcp" {
		t.Fatalf("resource_metadata %s", m[1])
	}
	for _, u := range []string{m[1], o.base + "/.well-known/oauth-protected-resource"} {
		r, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var md oauth.Metadata
		err = json.NewDecoder(r.Body).Decode(&md)
		r.Body.Close()
		if err != nil || md.Resource != o.resource || len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != o.p.Issuer() {
			t.Fatalf("%s: %+v %v", u, md, err)
		}
	}
}

// TestOAuthTokenCallsTool: an access token from the provider (authorization
// code flow) opens an MCP session and calls a tool; the task and the call
// are recorded for sub@issuer-name, and the token reaches neither the
// workflow input nor the call request. An API key works beside it.
func TestOAuthTokenCallsTool(t *testing.T) {
	o := newOAuthGateway(t)
	c := o.p.Claims("alice")
	c["scope"] = "openid counter:call"
	tok := o.p.Sign(t, c)
	cs, err := connectHTTP(o.url, &headerRT{h: map[string]string{"Authorization": "Bearer " + tok}})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res := callTool(t, cs, "counter__echo", map[string]any{"text": "hi"}, "")
	if res.IsError {
		t.Fatalf("call: %s", textOf(res))
	}
	u := o.ft.last(t)
	if u.in.Principal != "alice@corp" || u.req.Principal != "alice@corp" {
		t.Fatalf("recorded principal %q / %q, want alice@corp", u.in.Principal, u.req.Principal)
	}
	if s := mustJSON(t, u.in) + mustJSON(t, u.req) + mustJSON(t, u.start); strings.Contains(s, tok) || strings.Contains(s, strings.Split(tok, ".")[2]) {
		t.Fatal("the token reached the task's input")
	}

	// A token the provider issued through the code flow (no scopes: it
	// may list tools but not call counter__*, see TestOAuthStepUp).
	flow := o.p.Token(t, &mockoidc.MockUser{Subject: "bob"})
	cs2, err := connectHTTP(o.url, &headerRT{h: map[string]string{"Authorization": "Bearer " + flow}})
	if err != nil {
		t.Fatalf("provider token: %v", err)
	}
	defer cs2.Close()
	if _, err := cs2.ListTools(t.Context(), nil); err != nil {
		t.Fatalf("provider token lists tools: %v", err)
	}

	// API keys keep working beside tokens.
	cs3, err := connectHTTP(o.url, &headerRT{h: map[string]string{"Authorization": "Bearer key-holder-key"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cs3.Close()
	if res := callTool(t, cs3, "counter__echo", map[string]any{"text": "k"}, ""); res.IsError || o.ft.last(t).req.Principal != "key-holder" {
		t.Fatalf("API key: %s, principal %q", textOf(res), o.ft.last(t).req.Principal)
	}
}

// TestOAuthRefusalsAudited: every bad token gets 401 with an
// invalid_token challenge, and an auth_failed line with the channel and
// the reason, never the token.
func TestOAuthRefusalsAudited(t *testing.T) {
	o := newOAuthGateway(t)
	other := oauthtest.Start(t, o.resource)
	good := o.p.Claims("alice")
	with := func(k string, v any) jwt.MapClaims {
		c := o.p.Claims("alice")
		c[k] = v
		return c
	}
	cases := []struct{ name, token, reason string }{
		{"expired", o.p.Sign(t, with("exp", 1)), "token expired"},
		{"wrong audience", o.p.Sign(t, with("aud", "https://elsewhere.test/mcp")), "wrong audience"},
		{"wrong issuer", other.Token(t, nil), "wrong issuer"},
		{"alg none", oauthtest.Unsigned(t, good), "algorithm not allowed"},
		{"key not in the JWKS", oauthtest.SignWithUnknownKey(t, good), "bad signature"},
		{"tampered signature", oauthtest.Tamper(t, o.p.Sign(t, good)), "bad signature"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := o.post(t, tc.token, initializeBody)
			ch := resp.Header.Get("WWW-Authenticate")
			if resp.StatusCode != 401 || !strings.Contains(ch, `error="invalid_token"`) || !resourceMetadataParam.MatchString(ch) || !strings.Contains(body, tc.reason) {
				t.Fatalf("%d %q %s; want 401 invalid_token saying %q", resp.StatusCode, ch, body, tc.reason)
			}
			var line map[string]any
			for _, l := range o.audit.lines(t) {
				if r, _ := l["reason"].(string); l["event"] == auditstream.EventAuthFailed && strings.Contains(r, tc.reason) {
					line = l
				}
			}
			if line == nil || line["channel"] != "mcp" || line["status"] != float64(401) || line["path"] != "/mcp" {
				t.Fatalf("no auth_failed line for %s: %s", tc.reason, o.audit)
			}
		})
	}
	for _, tc := range cases {
		if strings.Contains(o.audit.String(), tc.token) || strings.Contains(o.audit.String(), strings.Split(tc.token, ".")[1]) {
			t.Errorf("the audit stream holds the %s token", tc.name)
		}
	}
}

// TestOAuthStepUp: a call of a tool that needs a scope the token lacks is
// refused 403 insufficient_scope with the scope to ask for (audited); a
// token with the scope calls it.
func TestOAuthStepUp(t *testing.T) {
	o := newOAuthGateway(t)
	c := o.p.Claims("alice")
	c["scope"] = "openid"
	weak := o.p.Sign(t, c)
	resp, body := o.post(t, weak, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"x"}}}`)
	ch := resp.Header.Get("WWW-Authenticate")
	if resp.StatusCode != 403 || !strings.Contains(ch, `error="insufficient_scope"`) || !strings.Contains(ch, `scope="counter:call"`) || !resourceMetadataParam.MatchString(ch) {
		t.Fatalf("weak token: %d %q %s", resp.StatusCode, ch, body)
	}
	found := false
	for _, l := range o.audit.lines(t) {
		if r, _ := l["reason"].(string); l["event"] == auditstream.EventAuthFailed && l["status"] == float64(403) && strings.Contains(r, "needs scope counter:call") && l["principal"] == "alice@corp" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no 403 auth_failed line: %s", o.audit)
	}
	// Through an MCP client: the session opens, the call fails.
	cs, err := connectHTTP(o.url, &headerRT{h: map[string]string{"Authorization": "Bearer " + weak}})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	n := len(o.ft.updates)
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "counter__echo", Arguments: map[string]any{"text": "x"}}); err == nil {
		t.Fatal("the weak token called counter__echo")
	}
	if len(o.ft.updates) != n {
		t.Fatal("a refused call reached the task")
	}
	// Stepped up.
	c["scope"] = "openid counter:call"
	cs2, err := connectHTTP(o.url, &headerRT{h: map[string]string{"Authorization": "Bearer " + o.p.Sign(t, c)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close()
	if res := callTool(t, cs2, "counter__echo", map[string]any{"text": "x"}, ""); res.IsError {
		t.Fatalf("stepped-up call: %s", textOf(res))
	}
}

// TestOAuthKeyRotation: after the provider rotates its signing key, the
// gateway accepts tokens signed with the new key (it fetches the JWKS
// again) and refuses, with 401, new tokens signed with the retired one.
func TestOAuthKeyRotation(t *testing.T) {
	o := newOAuthGateway(t)
	if resp, body := o.post(t, o.p.Sign(t, o.p.Claims("alice")), initializeBody); resp.StatusCode != 200 {
		t.Fatalf("before rotation: %d %s", resp.StatusCode, body)
	}
	retired := o.p.Sign(t, o.p.Claims("bob"))
	o.p.Rotate(t)
	if resp, body := o.post(t, o.p.Sign(t, o.p.Claims("carol")), initializeBody); resp.StatusCode != 200 {
		t.Fatalf("new key: %d %s", resp.StatusCode, body)
	}
	if resp, body := o.post(t, retired, initializeBody); resp.StatusCode != 401 || !strings.Contains(body, "bad signature") {
		t.Fatalf("retired key: %d %s", resp.StatusCode, body)
	}
}

// TestOAuthTokenNamesOwnDefaultTask: issue 25 (low). A token principal
// (alice@corp) names its own default task, alice@corp-default, with the
// Airlock-Task header, at initialize and on a stateless call; a token
// principal of another subject may not.
func TestOAuthTokenNamesOwnDefaultTask(t *testing.T) {
	o := newOAuthGateway(t)
	sign := func(sub string) string {
		c := o.p.Claims(sub)
		c["scope"] = "openid counter:call"
		return o.p.Sign(t, c)
	}
	alice := sign("alice")
	cs, err := connectHTTP(o.url, &headerRT{h: map[string]string{"Authorization": "Bearer " + alice, HeaderTask: "alice@corp-default"}})
	if err != nil {
		t.Fatalf("initialize naming alice@corp-default: %v", err)
	}
	defer cs.Close()
	if res := callTool(t, cs, "counter__echo", map[string]any{"text": "hi"}, ""); res.IsError || res.Meta[MetaTask] != "alice@corp-default" {
		t.Fatalf("call: %v %q; want it in alice@corp-default", res.Meta[MetaTask], textOf(res))
	}
	stateless := connectStatelessHTTP(t, o.url, &headerRT{h: map[string]string{"Authorization": "Bearer " + alice, HeaderTask: "alice@corp-default"}})
	if res := callTool(t, stateless, "counter__echo", map[string]any{"text": "hi"}, ""); res.IsError || o.ft.last(t).update.WorkflowID != "alice@corp-default" {
		t.Fatalf("stateless call: %q; want it in alice@corp-default", textOf(res))
	}
	mallory := connectStatelessHTTP(t, o.url, &headerRT{h: map[string]string{"Authorization": "Bearer " + sign("mallory"), HeaderTask: "alice@corp-default"}})
	if res := callTool(t, mallory, "counter__echo", map[string]any{"text": "hi"}, ""); !res.IsError {
		t.Fatalf("mallory@corp naming alice@corp-default: %q; want it refused", textOf(res))
	}
}
