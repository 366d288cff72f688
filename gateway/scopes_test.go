package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/policy"
)

// rawSession opens a session at 2025-03-26 (the revision that still
// takes batches) by hand, for posting bodies no MCP client would send;
// it returns the session ID.
func (o *oauthGateway) rawSession(t *testing.T, token string) string {
	t.Helper()
	resp, body := o.postWith(t, map[string]string{"Authorization": "Bearer " + token},
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	if resp, body := o.postWith(t, map[string]string{"Authorization": "Bearer " + token, "Mcp-Session-Id": sid},
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode/100 != 2 {
		t.Fatalf("initialized: %d %s", resp.StatusCode, body)
	}
	return sid
}

// postWith posts a body with these headers.
func (o *oauthGateway) postWith(t *testing.T, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", o.url, strings.NewReader(body))
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

// stepUpBypasses are the ways of issue 25 (high item 2) of calling
// counter__echo, which needs the scope counter:call, while a check that
// reads the body with encoding/json sees another tool (airlock_status,
// which needs none) or none. Each is sent over a legacy session
// ("session"), as a 2026-07-28 request with the headers a client sends
// ("2026"), or as a batch in a legacy session.
var stepUpBypasses = []struct {
	name, mode, body string
}{
	{"NAME beside name", "session", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","NAME":"airlock_status","arguments":{"text":"x"}}}`},
	{"Name beside name", "session", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","Name":"airlock_status","arguments":{"text":"x"}}}`},
	{"Method beside method", "session", `{"jsonrpc":"2.0","id":3,"method":"tools/call","Method":"ping","params":{"name":"counter__echo","arguments":{"text":"x"}}}`},
	{"one trailing byte", "session", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"x"}}}x`},
	{"a second object after the JSON", "session", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"x"}}}{"jsonrpc":"2.0","id":4,"method":"ping"}`},
	{"batch with Name beside name", "session", `[{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","Name":"airlock_status","arguments":{"text":"x"}}}]`},
	{"batch with Method beside method", "session", `[{"jsonrpc":"2.0","id":3,"method":"tools/call","Method":"ping","params":{"name":"counter__echo","arguments":{"text":"x"}}}]`},
	{"batch with a trailing byte", "session", `[{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"x"}}}]x`},
	{"2026-07-28, Mcp-Name right, NAME beside name", "2026", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","NAME":"airlock_status","arguments":{"text":"x"},` + meta2026 + `}}`},
	{"2026-07-28, Mcp-Name right, a trailing byte", "2026", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"x"},` + meta2026 + `}}x`},
}

const meta2026 = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`

// headers2026 are a 2026-07-28 tools/call's headers, naming counter__echo.
func headers2026(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token, "Mcp-Protocol-Version": StatelessProtocol, "Mcp-Method": "tools/call", "Mcp-Name": "counter__echo"}
}

// TestStepUpScopesNotBypassed: a token with only "openid" never gets
// counter__echo (tool_scopes: counter:call) to run, whichever way the body
// names it: each trick is refused 400 before anything runs, and nothing
// reaches the task. The same transport with a clean body and a token that
// has the scope does reach it (so the refusals are not the transport
// failing).
func TestStepUpScopesNotBypassed(t *testing.T) {
	o := newOAuthGateway(t)
	c := o.p.Claims("alice")
	c["scope"] = "openid"
	weak := o.p.Sign(t, c)
	c["scope"] = "openid counter:call"
	strong := o.p.Sign(t, c)
	weakSID := o.rawSession(t, weak)
	for _, tc := range stepUpBypasses {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"Authorization": "Bearer " + weak, "Mcp-Session-Id": weakSID}
			if tc.mode == "2026" {
				hdr = headers2026(weak)
			}
			n := o.ft.count()
			resp, body := o.postWith(t, hdr, tc.body)
			if got := o.ft.count(); got != n {
				t.Fatalf("counter__echo ran (%d calls reached the task) for a token without counter:call: %d %s", got-n, resp.StatusCode, body)
			}
			if resp.StatusCode != 400 || !strings.Contains(body, "Nothing ran") || !strings.Contains(body, `"jsonrpc":"2.0"`) {
				t.Fatalf("%d %s; want 400 with a JSON-RPC error saying nothing ran", resp.StatusCode, body)
			}
		})
	}
	// Controls: the same ways in, with clean bodies and the scope, run.
	strongSID := o.rawSession(t, strong)
	clean := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"x"}}}`
	for _, ctl := range []struct {
		name string
		hdr  map[string]string
		body string
	}{
		{"session", map[string]string{"Authorization": "Bearer " + strong, "Mcp-Session-Id": strongSID}, clean},
		{"batch", map[string]string{"Authorization": "Bearer " + strong, "Mcp-Session-Id": strongSID}, "[" + clean + "]"},
		{"2026", headers2026(strong), `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"x"},` + meta2026 + `}}`},
	} {
		n := o.ft.count()
		resp, body := o.postWith(t, ctl.hdr, ctl.body)
		if o.ft.count() != n+1 || resp.StatusCode != 200 {
			t.Errorf("control %s: %d %s, %d calls reached the task; want the call to run", ctl.name, resp.StatusCode, body, o.ft.count()-n)
		}
	}
}

// TestStepUpMcpNameMismatch: a 2026-07-28 tools/call whose Mcp-Name header
// names another tool than its body is refused, whichever the two are.
func TestStepUpMcpNameMismatch(t *testing.T) {
	o := newOAuthGateway(t)
	c := o.p.Claims("alice")
	c["scope"] = "openid counter:call"
	tok := o.p.Sign(t, c)
	hdr := headers2026(tok)
	hdr["Mcp-Name"] = "airlock_status"
	resp, body := o.postWith(t, hdr, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"counter__echo","arguments":{"text":"x"},`+meta2026+`}}`)
	if resp.StatusCode != 400 || !strings.Contains(body, "Mcp-Name") || o.ft.count() != 0 {
		t.Fatalf("%d %s, %d calls reached the task; want 400 naming Mcp-Name and nothing run", resp.StatusCode, body, o.ft.count())
	}
}

// TestStepUpThroughCallTool: airlock_call_tool (catalog: search) checks
// the tool it calls like a direct call: a token without counter:call gets
// a tool error naming the scope, and nothing reaches the task; with the
// scope it runs.
func TestStepUpThroughCallTool(t *testing.T) {
	o := newOAuthGatewayWith(t, Options{Catalog: CatalogSearch})
	c := o.p.Claims("alice")
	c["scope"] = "openid"
	weak, err := connectHTTP(o.url, &headerRT{h: map[string]string{"Authorization": "Bearer " + o.p.Sign(t, c)}})
	if err != nil {
		t.Fatal(err)
	}
	defer weak.Close()
	res := callTool(t, weak, ToolCallTool, map[string]any{"name": "counter__echo", "arguments": map[string]any{"text": "x"}}, "")
	if !res.IsError || !strings.Contains(textOf(res), "needs scope counter:call") || !strings.Contains(textOf(res), "Nothing ran") || o.ft.count() != 0 {
		t.Fatalf("isError=%v %q, %d calls reached the task; want a tool error naming counter:call and nothing run", res.IsError, textOf(res), o.ft.count())
	}
	audited := false
	for _, l := range o.audit.lines(t) {
		if r, _ := l["reason"].(string); l["event"] == auditstream.EventAuthFailed && l["status"] == float64(403) && l["principal"] == "alice@corp" && strings.Contains(r, "needs scope counter:call") {
			audited = true
		}
	}
	if !audited {
		t.Errorf("no auth_failed line for the refused inner call: %s", o.audit)
	}
	c["scope"] = "openid counter:call"
	strong, err := connectHTTP(o.url, &headerRT{h: map[string]string{"Authorization": "Bearer " + o.p.Sign(t, c)}})
	if err != nil {
		t.Fatal(err)
	}
	defer strong.Close()
	if res := callTool(t, strong, ToolCallTool, map[string]any{"name": "counter__echo", "arguments": map[string]any{"text": "x"}}, ""); res.IsError || o.ft.count() != 1 {
		t.Fatalf("with the scope: isError=%v %q", res.IsError, textOf(res))
	}
}

// TestHiddenToolAnswersAsUnknown (issue 25, low): a direct call of a tool
// the principal may not call (outside its allowlist) gets exactly the
// answer of a name that does not exist, the same JSON-RPC error code and
// message, and nothing reaches the task.
func TestHiddenToolAnswersAsUnknown(t *testing.T) {
	pol, err := policy.Compile(policy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ft := &fakeTemporal{}
	g := newTestGateway(t, ft, Options{Principal: "alice", Policy: pol})
	g.open.AllowTools = []string{"other__*"}
	cs := connectMemory(t, g)
	callErr := func(name string) *jsonrpc.Error {
		t.Helper()
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": "x"}})
		var we *jsonrpc.Error
		if !errors.As(err, &we) {
			t.Fatalf("calling %s: %v; want a JSON-RPC error", name, err)
		}
		return we
	}
	hidden, unknown := callErr("counter__echo"), callErr("counter__ehco")
	if hidden.Code != unknown.Code || hidden.Message != strings.ReplaceAll(unknown.Message, "counter__ehco", "counter__echo") {
		t.Fatalf("hidden tool: %d %q; unknown name: %d %q; want the same answer", hidden.Code, hidden.Message, unknown.Code, unknown.Message)
	}
	if n := ft.count(); n != 0 {
		t.Fatalf("%d calls reached the task", n)
	}
	// Allowed, it runs.
	g.open.AllowTools = []string{"counter__*"}
	if res := callTool(t, cs, "counter__echo", map[string]any{"text": "x"}, ""); res.IsError || ft.count() != 1 {
		t.Fatalf("allowed: isError=%v %q", res.IsError, textOf(res))
	}
}

// TestCallToolRefusesDuplicateArgumentKeys (issue 25, low): arguments for
// airlock_call_tool's target that repeat a key are refused with the same
// error as a direct call with those arguments, and nothing reaches the
// task; a key repeated in the meta-tool's own arguments (two names) is
// refused too.
func TestCallToolRefusesDuplicateArgumentKeys(t *testing.T) {
	for _, args := range []string{
		`{"text":"secret","text":"ok"}`,
		`{"text":"x","opts":{"path":"secret.env","path":"ok.txt"}}`,
	} {
		ft := &fakeTemporal{}
		cs := connectMemory(t, newTestGateway(t, ft, Options{Principal: "alice", Catalog: CatalogSearch}))
		direct := callTool(t, cs, "counter__echo", json.RawMessage(args), "")
		meta := callTool(t, cs, ToolCallTool, json.RawMessage(`{"name":"counter__echo","arguments":`+args+`}`), "")
		if !direct.IsError || !meta.IsError || textOf(meta) != textOf(direct) {
			t.Errorf("%s: direct isError=%v %q; through %s isError=%v %q; want the same refusal", args, direct.IsError, textOf(direct), ToolCallTool, meta.IsError, textOf(meta))
		}
		if n := ft.count(); n != 0 {
			t.Errorf("%s: %d calls reached the task", args, n)
		}
	}
	ft := &fakeTemporal{}
	cs := connectMemory(t, newTestGateway(t, ft, Options{Principal: "alice", Catalog: CatalogSearch}))
	for _, outer := range []string{
		`{"name":"counter__nope","name":"counter__echo","arguments":{"text":"x"}}`,
		`{"name":"counter__echo","arguments":{"text":"a"},"arguments":{"text":"b"}}`,
		`{"name":"counter__echo","NAME":"counter__nope","arguments":{"text":"x"}}`,
	} {
		if res := callTool(t, cs, ToolCallTool, json.RawMessage(outer), ""); !res.IsError {
			t.Errorf("%s: accepted: %q", outer, textOf(res))
		}
	}
	if n := ft.count(); n != 0 {
		t.Errorf("%d calls reached the task", n)
	}
}
