package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"
)

// sdkUnmarshal decodes as the MCP SDK's internal/json does (go-sdk
// v1.8.0): segmentio's decoder, member names matched case-sensitively,
// the first value read and whatever follows it ignored.
func sdkUnmarshal(data []byte, v any) error {
	dec := segjson.NewDecoder(bytes.NewReader(data))
	dec.DontMatchCaseInsensitiveStructFields()
	return dec.Decode(v)
}

// sdkDispatched returns the tools/call requests the MCP SDK dispatches
// for a POST body: its readBatch (mcp/transport.go) and jsonrpc
// DecodeMessage, then the tools/call params decoded into
// mcp.CallToolParamsRaw as its method table does (mcp/shared.go).
func sdkDispatched(body []byte) []rpcCall {
	var msgs []jsonrpc.Message
	var batch []json.RawMessage
	if err := sdkUnmarshal(body, &batch); err == nil {
		if len(batch) == 0 {
			return nil
		}
		for _, raw := range batch {
			m, err := jsonrpc.DecodeMessage(raw)
			if err != nil {
				return nil // the SDK refuses the whole batch
			}
			msgs = append(msgs, m)
		}
	} else {
		m, err := jsonrpc.DecodeMessage(body)
		if err != nil {
			return nil
		}
		msgs = append(msgs, m)
	}
	var out []rpcCall
	for i, m := range msgs {
		r, ok := m.(*jsonrpc.Request)
		if !ok || r.Method != "tools/call" || r.Params == nil {
			continue
		}
		var p *mcp.CallToolParamsRaw
		if err := sdkUnmarshal(r.Params, &p); err != nil || p == nil {
			continue // refused: invalid params
		}
		out = append(out, rpcCall{Msg: i, Tool: p.Name})
	}
	return out
}

// scopeAttacks are the bodies of issue 25 (high item 2) and their kin;
// the first 12 are refused outright.
var scopeAttacks = []string{
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__write","NAME":"raw__read","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__write","Name":"raw__read","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"Name":"raw__read","name":"raw__write"}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","Method":"ping","params":{"name":"raw__write"}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__write"}}x`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__write"}}{"jsonrpc":"2.0","id":4,"method":"ping"}`,
	`[{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__write","Name":"raw__read"}}]`,
	`[{"jsonrpc":"2.0","id":3,"method":"tools/call","Method":"ping","params":{"name":"raw__write"}}]`,
	`[{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__write"}}]x`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__read","name":"raw__write"}}`,
	`{"jsonrpc":"2.0","id":3,"method":"ping","method":"tools/call","params":{"name":"raw__write"}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__read"},"params":{"name":"raw__write"}}`,
	`[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"raw__write"}}]`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"n\u0061me":"raw__write"}}`,
	`{"jsonrpc":"2.0","id":3,"m\u0065thod":"tools/call","params":{"name":"raw__write"}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools\/call","params":{"name":"raw\u005f_write"}}`,
	"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"raw__write\xff\"}}",
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__write\ud800"}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__write","arguments":{"a":1,"a":2}}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__write","_meta":{"k":1,"k":2}}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__write","ARGUMENTS":{}}}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":null}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":[]}`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":7}}`,
	`{"jsonrpc":"2.0","id":3,"method":7,"params":{"name":"raw__write"}}`,
	`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"raw__write"}}`,
	`{"jsonrpc":"2.0","id":3,"result":{},"method":"tools/call","params":{"name":"raw__write"}}`,
	` [ ] `, `[]`, `{}`, `null`, `"x"`, `[1]`, `[[]]`,
	`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw__read"}}`,
}

// FuzzScopeDifferential: for any body the edge check accepts, the tools/call
// requests the MCP SDK dispatches are exactly the ones the check judged, the
// same tool at the same place; what it refuses is a *RequestError.
func FuzzScopeDifferential(f *testing.F) {
	for _, s := range scopeAttacks {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		judged, _, err := parseRPC(body)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || !strings.HasSuffix(re.Reason, "Nothing ran") {
				t.Fatalf("refusal %v (%T) is not a RequestError saying nothing ran", err, err)
			}
			return
		}
		dispatched := sdkDispatched(body)
		for _, d := range dispatched {
			found := false
			for _, j := range judged {
				if j == d {
					found = true
				}
			}
			if !found {
				t.Fatalf("body %q: the SDK dispatches %+v, the check judged %+v", body, d, judged)
			}
		}
	})
}

// TestParseRPCRefusesTheAttacks: each attack body of issue 25 that once
// passed the check is refused outright; clean bodies name their tool.
func TestParseRPCRefusesTheAttacks(t *testing.T) {
	for _, body := range scopeAttacks[:12] {
		if calls, _, err := parseRPC([]byte(body)); err == nil {
			t.Errorf("%s: accepted, judged %+v", body, calls)
		}
	}
	calls, single, err := parseRPC([]byte(` [{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"raw__write","arguments":{"a":1,"a":2}}}] `))
	if err != nil || single || len(calls) != 1 || calls[0] != (rpcCall{Msg: 1, Tool: "raw__write"}) {
		t.Fatalf("batch: %+v %v %v", calls, single, err)
	}
}

// BenchmarkParseRPC: the edge's cost for a typical tools/call.
func BenchmarkParseRPC(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"filesystem__write_file","arguments":{"path":"/srv/sandbox/notes.md","content":"` + strings.Repeat("x", 1000) + `"},"_meta":{"progressToken":7,"airlock.dev/idempotency-key":"k-1"}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := parseRPC(body); err != nil {
			b.Fatal(err)
		}
	}
}
