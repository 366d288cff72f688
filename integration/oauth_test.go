package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oauth2-proxy/mockoidc"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/oauth/oauthtest"
	"github.com/airlock-run/airlock/manifests"
)

// TestOAuthTokenThroughStack: an MCP client signed in at a real OpenID
// provider (authorization code flow) calls a tool through the gateway, the
// embedded Temporal and the worker; the task's history names the caller
// sub@issuer-name and holds no trace of the token.
func TestOAuthTokenThroughStack(t *testing.T) {
	t.Parallel()
	const resource = "https://airlock.test/mcp"
	p := oauthtest.Start(t, resource)
	dir := identity.New(&config.Config{
		Roles: map[string]*config.Role{"all": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}}},
		PrincipalsFromTokens: &config.Tokens{Resource: resource,
			Issuers: []config.TokenIssuer{{Issuer: p.Issuer(), Name: "corp"}},
			Roles:   []config.TokenRole{{Roles: []string{"all"}, When: `claims.sub != ""`}}},
	})
	m := testupstreamManifest(t, filepath.Join(t.TempDir(), "effects.log"))
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir})

	token := p.Token(t, &mockoidc.MockUser{Subject: "alice", Email: "alice@example.com"})
	cs := connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + token})
	waitTools(t, cs, "counter__echo")
	res := call(t, cs, "counter__echo", map[string]any{"text": "signed in"}, "")
	if res.IsError || !strings.Contains(text(res), "signed in") {
		t.Fatalf("call: %s", text(res))
	}
	taskID, _ := res.Meta[gateway.MetaTask].(string)

	ctx := context.Background()
	it := s.client.GetWorkflowHistory(ctx, taskID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var hist strings.Builder
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		// The text form shows payload bytes as (escaped) text.
		hist.WriteString(ev.String())
	}
	h := hist.String()
	if !strings.Contains(h, "alice@corp") {
		t.Fatalf("the history does not name alice@corp")
	}
	for _, part := range strings.Split(token, ".") {
		if strings.Contains(h, part) {
			t.Fatal("the history holds the token")
		}
	}
	desc, err := s.client.DescribeWorkflowExecution(ctx, taskID, "")
	if err != nil {
		t.Fatal(err)
	}
	if sa := desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()["AirlockPrincipal"]; sa == nil || !strings.Contains(string(sa.GetData()), "alice@corp") {
		t.Fatalf("AirlockPrincipal search attribute: %v", sa)
	}

	// An expired token of the same provider is refused at the edge.
	c := p.Claims("alice")
	c["exp"] = 1
	bad := connectErr(t, s.url, p.Sign(t, c))
	if bad == nil || !strings.Contains(bad.Error(), "Unauthorized") {
		t.Fatalf("expired token connected: %v", bad)
	}
}

func connectErr(t *testing.T, url, token string) error {
	t.Helper()
	req := newHeaderClient(map[string]string{"Authorization": "Bearer " + token})
	resp, err := req.Post(url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return &statusError{resp.Status}
	}
	return nil
}

type statusError struct{ s string }

func (e *statusError) Error() string { return e.s }

// TestOAuthNoTokenPassthrough: a caller signed in with a token calls a tool
// of an HTTP upstream that wants its own bearer token. airlock obtains that
// token from the upstream's authorization server with its client
// credentials; the upstream sees only those tokens, never the caller's.
func TestOAuthNoTokenPassthrough(t *testing.T) {
	const resource = "https://airlock.test/mcp"
	p := oauthtest.Start(t, resource)

	var mu sync.Mutex
	issued := map[string]bool{}
	var seen []string
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, _ := r.BasicAuth()
		if id != "airlock" || secret != "upstream-secret" || r.PostFormValue("grant_type") != "client_credentials" {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		mu.Lock()
		tok := fmt.Sprintf("upstream-token-%d", len(issued)+1)
		issued[tok] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, tok)
	}))
	t.Cleanup(as.Close)
	t.Setenv("TICKETS_CLIENT_SECRET", "upstream-secret")

	srv := mcp.NewServer(&mcp.Implementation{Name: "tickets", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echo it."}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		tok, _ := strings.CutPrefix(auth, "Bearer ")
		mu.Lock()
		seen = append(seen, auth)
		ok := issued[tok]
		mu.Unlock()
		if !ok {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)

	m := &manifests.Manifest{File: "tickets.yaml",
		Server: manifests.Server{Name: "tickets", HTTP: &manifests.HTTPServer{URL: up.URL, OAuth: &manifests.ClientCredentials{
			TokenURL: as.URL, ClientID: "airlock", ClientSecretEnv: "TICKETS_CLIENT_SECRET"}}},
		Tools: map[string]*manifests.Tool{"echo": {Description: "Echo it.", SideEffects: []manifests.SideEffect{manifests.SideEffectNone},
			DataAccessLevel: manifests.DataPublic, Risk: manifests.RiskLow, Idempotent: true, Timeout: manifests.Duration(10 * time.Second)}}}
	dir := identity.New(&config.Config{
		Roles: map[string]*config.Role{"all": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}}},
		PrincipalsFromTokens: &config.Tokens{Resource: resource,
			Issuers: []config.TokenIssuer{{Issuer: p.Issuer(), Name: "corp"}},
			Roles:   []config.TokenRole{{Roles: []string{"all"}, When: "true"}}},
	})
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir})

	token := p.Token(t, &mockoidc.MockUser{Subject: "alice"})
	cs := connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + token})
	waitTools(t, cs, "tickets__echo")
	res := call(t, cs, "tickets__echo", map[string]any{"text": "through"}, "")
	if res.IsError || text(res) != "through" {
		t.Fatalf("call: %s", text(res))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("the upstream saw no request")
	}
	for _, a := range seen {
		if strings.Contains(a, token) || !strings.HasPrefix(a, "Bearer upstream-token-") {
			t.Fatalf("the upstream got Authorization %q; want only airlock's own client-credentials tokens", a)
		}
	}
}

// TestOAuthDevBinary: the real `airlock dev` with principals_from_tokens
// serves the Protected Resource Metadata, challenges with it, accepts a
// provider's token beside the dev key, and audits a refused token.
func TestOAuthDevBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := buildBinary(t, "./cmd/airlock")
	upstreamBin := buildBinary(t, "./integration/testupstream")
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	base := "http://" + listen
	p := oauthtest.Start(t, base+"/mcp")
	effects := newEffectsLog(t)
	writeFile(t, filepath.Join(dir, "counter.yaml"), fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env: {SIDE_EFFECT_LOG: %s}
%stools:
  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
`, upstreamBin, effects, effectsSandbox(effects)))
	auditFile := filepath.Join(dir, "audit.jsonl")
	writeFile(t, filepath.Join(dir, "airlock.yaml"), "manifests: [counter.yaml]\naudit: {log: "+auditFile+"}\n"+identityYAML+fmt.Sprintf(`principals_from_tokens:
  resource: %s/mcp
  issuers:
    - {issuer: %s, name: corp}
  roles:
    - {roles: [all], when: 'claims.sub != ""'}
`, base, p.Issuer()))
	dev := startDev(t, bin, "--config", filepath.Join(dir, "airlock.yaml"), "--data-dir", filepath.Join(dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(freePort(t)), "--log-format", "json")
	dev.waitHealthy(t, base)

	resp, err := http.Get(base + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var md struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	err = json.NewDecoder(resp.Body).Decode(&md)
	resp.Body.Close()
	if err != nil || md.Resource != base+"/mcp" || len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != p.Issuer() {
		t.Fatalf("metadata: %+v %v", md, err)
	}
	resp, err = http.Post(base+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ch := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != 401 || !strings.Contains(ch, `resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`) {
		t.Fatalf("no credentials: %d %q", resp.StatusCode, ch)
	}

	cs := connectURL(t, base+"/mcp", map[string]string{"Authorization": "Bearer " + p.Token(t, &mockoidc.MockUser{Subject: "alice"})})
	waitTools(t, cs, "counter__echo")
	if res := call(t, cs, "counter__echo", map[string]any{"text": "by token"}, ""); res.IsError || text(res) != "by token" {
		t.Fatalf("token call: %s", text(res))
	}
	keyed := connectURL(t, base+"/mcp", nil) // the dev key
	if res := call(t, keyed, "counter__echo", map[string]any{"text": "by key"}, ""); res.IsError {
		t.Fatalf("key call: %s", text(res))
	}

	c := p.Claims("alice")
	c["exp"] = 1
	if err := connectErr(t, base+"/mcp", p.Sign(t, c)); err == nil {
		t.Fatal("an expired token was accepted")
	}
	waitFor(t, "the auth_failed line", 10*time.Second, func() bool {
		b, _ := os.ReadFile(auditFile)
		for _, ln := range strings.Split(string(b), "\n") {
			if strings.Contains(ln, `"event":"auth_failed"`) && strings.Contains(ln, `"channel":"mcp"`) && strings.Contains(ln, "token expired") {
				return true
			}
		}
		return false
	})
	if b, _ := os.ReadFile(auditFile); strings.Contains(string(b), strings.Split(p.Sign(t, c), ".")[1]) {
		t.Fatal("the audit stream holds the token")
	}
}

// TestOAuthStepUpBypassesDevBinary (issue 25, high item 2): against the
// real `airlock dev` with tool_scopes (counter__put needs raw:write), a
// token with only mcp:tools never gets counter__put to run, by the tricks
// that once passed the step-up check: a "NAME" member beside "name", one
// trailing byte after a 2026-07-28 request with the right Mcp-Name
// header, a "Method" member in a batch, and airlock_call_tool. The
// upstream's own effect log stays empty; the same call with raw:write
// writes it.
func TestOAuthStepUpBypassesDevBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := buildBinary(t, "./cmd/airlock")
	upstreamBin := buildBinary(t, "./integration/testupstream")
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	base := "http://" + listen
	p := oauthtest.Start(t, base+"/mcp")
	effects := newEffectsLog(t)
	writeFile(t, filepath.Join(dir, "counter.yaml"), fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env: {SIDE_EFFECT_LOG: %s}
%stools:
  put: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
`, upstreamBin, effects, effectsSandbox(effects)))
	writeFile(t, filepath.Join(dir, "airlock.yaml"), "manifests: [counter.yaml]\ncatalog: search\n"+identityYAML+fmt.Sprintf(`principals_from_tokens:
  resource: %s/mcp
  issuers:
    - {issuer: %s, name: corp}
  roles:
    - {roles: [all], when: 'claims.sub != ""'}
  tool_scopes:
    - {tools: counter__put, scopes: [raw:write]}
`, base, p.Issuer()))
	dev := startDev(t, bin, "--config", filepath.Join(dir, "airlock.yaml"), "--data-dir", filepath.Join(dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(freePort(t)), "--log-format", "json")
	dev.waitHealthy(t, base)
	c := p.Claims("alice")
	c["scope"] = "mcp:tools"
	weak := p.Sign(t, c)
	c["scope"] = "mcp:tools raw:write"
	strong := p.Sign(t, c)

	post := func(hdr map[string]string, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	// A legacy session (2025-03-26 takes batches), opened by hand.
	resp, body := post(map[string]string{"Authorization": "Bearer " + weak},
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	session := map[string]string{"Authorization": "Bearer " + weak, "Mcp-Session-Id": sid}
	post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	h2026 := map[string]string{"Authorization": "Bearer " + weak, "Mcp-Protocol-Version": gateway.StatelessProtocol, "Mcp-Method": "tools/call", "Mcp-Name": "counter__put"}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		body string
	}{
		{"NAME beside name", session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__put","NAME":"airlock_status","arguments":{"key":"k1"}}}`},
		{"2026-07-28 with a trailing byte", h2026, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__put","arguments":{"key":"k2"},` + meta + `}}x`},
		{"batch with Method beside method", session, `[{"jsonrpc":"2.0","id":3,"method":"tools/call","Method":"ping","params":{"name":"counter__put","arguments":{"key":"k3"}}}]`},
	} {
		resp, body := post(tc.hdr, tc.body)
		if resp.StatusCode != 400 || !strings.Contains(body, "Nothing ran") {
			t.Errorf("%s: %d %s; want 400 saying nothing ran", tc.name, resp.StatusCode, body)
		}
	}
	cs := connectURL(t, base+"/mcp", map[string]string{"Authorization": "Bearer " + weak})
	waitTools(t, cs, gateway.ToolCallTool)
	if res := call(t, cs, gateway.ToolCallTool, map[string]any{"name": "counter__put", "arguments": map[string]any{"key": "k4"}}, ""); !res.IsError || !strings.Contains(text(res), "needs scope raw:write") {
		t.Errorf("airlock_call_tool: isError=%v %q; want a tool error naming raw:write", res.IsError, text(res))
	}
	if b, _ := os.ReadFile(effects); len(b) != 0 {
		t.Fatalf("counter__put ran for a token without raw:write:\n%s", b)
	}

	// With the scope, the same call runs and the log shows it.
	cs2 := connectURL(t, base+"/mcp", map[string]string{"Authorization": "Bearer " + strong})
	waitTools(t, cs2, gateway.ToolCallTool)
	if res := call(t, cs2, gateway.ToolCallTool, map[string]any{"name": "counter__put", "arguments": map[string]any{"key": "ok"}}, ""); res.IsError {
		t.Fatalf("with raw:write: %s", text(res))
	}
	if b, _ := os.ReadFile(effects); string(b) != "put ok\n" {
		t.Fatalf("effect log %q, want the one allowed call", b)
	}
}
