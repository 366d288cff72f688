package gateway

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/seal"
)

// TestDeliverHeldResult: an approved held result is opened with the key
// derived from the session key, by any gateway sharing it; one sealed to
// another key, tampered with, or cut short is not delivered, and the
// answer says the call ran, never showing the redacted copy as if it were
// the result.
func TestDeliverHeldResult(t *testing.T) {
	g := &Gateway{sessionKey: []byte(strings.Repeat("k", 64)), log: zerolog.Nop()}
	replica := &Gateway{sessionKey: []byte(strings.Repeat("k", 64)), log: zerolog.Nop()}
	other := &Gateway{sessionKey: []byte(strings.Repeat("x", 64)), log: zerolog.Nop()}
	k, err := g.heldKey()
	if err != nil {
		t.Fatal(err)
	}
	clear := []byte(`{"content":[{"type":"text","text":"the clear result"}]}`)
	peer, sealed, err := seal.Seal(k.PublicKey().Bytes(), clear)
	if err != nil {
		t.Fatal(err)
	}
	res := api.CallResult{CallID: "c1", Tool: "fs__read", Outcome: api.OutcomeOK,
		Result: []byte(`{"content":[{"type":"text","text":"[REDACTED:github-token]"}]}`), Held: &api.SealedResult{Peer: peer, Sealed: sealed}}
	for name, gw := range map[string]*Gateway{"the gateway": g, "a replica sharing its session key": replica} {
		if r := gw.deliver("t1", res); r.IsError || resultText(r) != "the clear result" {
			t.Errorf("%s delivers isError=%v %q", name, r.IsError, resultText(r))
		}
	}
	tampered := append([]byte(nil), sealed...)
	tampered[0] ^= 1
	for name, c := range map[string]struct {
		gw   *Gateway
		held *api.SealedResult
	}{
		"another session key": {other, res.Held},
		"tampered":            {g, &api.SealedResult{Peer: peer, Sealed: tampered}},
		"cut short":           {g, &api.SealedResult{Peer: peer, Sealed: sealed[:5]}},
		"no peer":             {g, &api.SealedResult{Sealed: sealed}},
	} {
		r2 := res
		r2.Held = c.held
		r := c.gw.deliver("t1", r2)
		if got := resultText(r); !r.IsError || strings.Contains(got, "REDACTED") || strings.Contains(got, "clear result") || !strings.Contains(got, "the call ran") {
			t.Errorf("%s: isError=%v %q", name, r.IsError, got)
		}
	}
	// Nothing held: as toMCP.
	plain := api.CallResult{CallID: "c2", Tool: "fs__read", Outcome: api.OutcomeOK, Result: []byte(`{"content":[{"type":"text","text":"hi"}]}`)}
	if r := g.deliver("t1", plain); r.IsError || resultText(r) != "hi" {
		t.Errorf("plain: %v %q", r.IsError, resultText(r))
	}
}

// resultText is the text of r's text contents.
func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestGuardMetaNotForgeable: what an upstream writes under the guard's
// _meta key is dropped, findings or not; its other keys stay.
func TestGuardMetaNotForgeable(t *testing.T) {
	forged := mcp.Meta{metaGuard: map[string]any{"findings": []any{}}, "x": 1}
	if got := guardMeta(forged, nil); got[metaGuard] != nil || got["x"] != 1 {
		t.Errorf("no findings: %v", got)
	}
	mine := mcp.Meta{metaGuard: "ours"}
	if got := guardMeta(forged, mine); got[metaGuard] != "ours" || got["x"] != 1 {
		t.Errorf("findings: %v", got)
	}
	if got := guardMeta(mcp.Meta{"x": 1}, nil); len(got) != 1 {
		t.Errorf("clean: %v", got)
	}
	texts := []guardText{{path: "description"}, {path: "messages[0].content.text"}}
	for in, want := range map[string]string{"content[1].text": "messages[0].content.text", "content[0].text": "description",
		"content[2].text": "content[2].text", "content[-1].text": "content[-1].text", "content[1]x": "content[1]x", "structuredContent.a": "structuredContent.a"} {
		if got := passthroughPath(in, texts); got != want {
			t.Errorf("passthroughPath(%q) = %q, want %q", in, got, want)
		}
	}
}
