package gateway

// The edge check as it was before the single-pass scanner (rpcbody.go): each
// nesting level re-read with encoding/json's Decoder, json.Valid and
// jsoncanon.CheckDuplicates. Slow but plainly right; kept only as the
// reference FuzzParseRPCMatchesReference compares the scanner with. One
// change: members are checked in the order they are written, not in a
// map's random order, so that which of several refusals is reported is
// deterministic and can be compared (the scanner reports the first).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// parseRPC reads a POST body the way the MCP SDK will dispatch it, or
// refuses it: it returns its tools/call requests in order. The SDK's decoder reads member names case-sensitively, keeps the
// last of a repeated member and ignores whatever follows the first value,
// while encoding/json folds case and refuses trailing data; a check that
// read the body with either could judge another tool than the one that
// runs. So the body must be exactly one JSON value (a message or a batch
// of them), no object in it may repeat a member (the tool arguments
// aside: the gateway refuses those in a tool result, as for a call by any
// transport), and no member may differ from one the SDK reads only by
// case; what is left reads the same to every decoder, and the names
// returned are the ones the SDK reads.
func parseRPCRef(body []byte) (calls []rpcCall, single bool, err error) {
	if !json.Valid(body) {
		var v json.RawMessage
		reason := "not one JSON value"
		if err := json.Unmarshal(body, &v); err != nil {
			reason = err.Error()
		}
		return nil, false, &RequestError{Code: codeParseError, Reason: "the request body is not exactly one JSON-RPC message or batch (" + reason + "); send one JSON value and nothing after it. Nothing ran"}
	}
	trimmed := bytes.TrimSpace(body)
	msgs := []json.RawMessage{trimmed}
	paths := []string{"$"}
	if len(trimmed) > 0 && trimmed[0] == '[' {
		single = false
		msgs = nil
		if err := json.Unmarshal(trimmed, &msgs); err != nil {
			return nil, false, invalid("a batch is an array of JSON-RPC messages: %v", err)
		}
		paths = make([]string, len(msgs))
		for i := range msgs {
			paths[i] = fmt.Sprintf("$[%d]", i)
		}
	} else {
		single = true
	}
	for i, raw := range msgs {
		tool, isCall, err := parseMessageRef(raw, paths[i])
		if err != nil {
			return nil, single, err
		}
		if isCall {
			calls = append(calls, rpcCall{Msg: i, Tool: tool})
		}
	}
	return calls, single, nil
}

// parseMessage checks one message and returns its tool when it is a
// tools/call.
func parseMessageRef(raw json.RawMessage, at string) (tool string, isCall bool, err error) {
	m, order, err := membersRef(raw, at, envelope)
	if err != nil {
		return "", false, err
	}
	if m == nil {
		return "", false, nil // not an object: the SDK refuses it
	}
	method := ""
	if v, ok := m["method"]; ok {
		if err := json.Unmarshal(v, &method); err != nil {
			return "", false, invalid("%s.method is not a string", at)
		}
	}
	for _, k := range order {
		v := m[k]
		if k == "params" && method == "tools/call" {
			continue
		}
		if err := noDuplicatesRef(v, at+"."+k); err != nil {
			return "", false, err
		}
	}
	if method != "tools/call" {
		return "", false, nil
	}
	params, ok := m["params"]
	if !ok {
		return "", true, nil
	}
	p, porder, err := membersRef(params, at+".params", callParams)
	if err != nil {
		return "", false, err
	}
	if p == nil {
		return "", true, nil // null or not an object: the SDK refuses it
	}
	for _, k := range porder {
		v := p[k]
		if k == "arguments" {
			continue // the gateway's call refuses repeated keys in them (gateway/args.go)
		}
		if err := noDuplicatesRef(v, at+".params."+k); err != nil {
			return "", false, err
		}
	}
	if v, ok := p["name"]; ok {
		if err := json.Unmarshal(v, &tool); err != nil {
			return "", false, invalid("%s.params.name is not a string", at)
		}
	}
	return tool, true, nil
}

// members returns the members of the object raw (nil when raw is not an
// object), refusing one that appears twice or that differs from one of
// known only by case.
func membersRef(raw json.RawMessage, at string, known []string) (map[string]json.RawMessage, []string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, nil
	}
	out := map[string]json.RawMessage{}
	var order []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, invalid("%s: %v", at, err)
		}
		key, _ := tok.(string) // the decoder allows only strings here
		if _, dup := out[key]; dup {
			return nil, nil, invalid("the member %q appears more than once in the object at %s (JSON parsers disagree on which one counts); send each member once", key, at)
		}
		for _, k := range known {
			if key != k && strings.EqualFold(key, k) {
				return nil, nil, invalid("the member %q at %s differs from the JSON-RPC/MCP member %q only by case (parsers disagree on whether it is the same); spell it %q", key, at, k, k)
			}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, invalid("%s: %v", at, err)
		}
		out[key] = v
		order = append(order, key)
	}
	return out, order, nil
}

// noDuplicates refuses a value in which any object repeats a key.
func noDuplicatesRef(v json.RawMessage, at string) error {
	if t := bytes.TrimSpace(v); len(t) == 0 || (t[0] != '{' && t[0] != '[') {
		return nil // a scalar has no members (and the body is valid JSON)
	}
	err := jsoncanon.CheckDuplicates(v)
	var dup *jsoncanon.DuplicateKeyError
	if errors.As(err, &dup) {
		return invalid("the member %q appears more than once in the object at %s%s (JSON parsers disagree on which one counts); send each member once", dup.Key, at, strings.TrimPrefix(dup.Path, "$"))
	}
	if err != nil {
		return invalid("%s: %v", at, err)
	}
	return nil
}

// refBodies are bodies beyond the attacks that reach the scanner's
// corners: the syntax json.Valid refuses, escaped and invalid-UTF-8 member
// names, paths that need quoting, nested repeats ranked against other
// refusals, objects large enough to be kept in a map.
var refBodies = []string{
	``, ` `, `[`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[,1]`, `01`, `-`, `-0`, `1.`, `1.5e`, `1e+7`, `-0.0E-3`,
	`tru`, `nul`, `"\x"`, "\"a\x1fb\"", "\"\x7f\"", `"\u12g4"`, "\"a\tb\"", `"\ud800\udc00"`, `{"a":1} `, "\t\r\n{}\n",
	`{"jsonrpc":"2.0","id":{"a":1,"a":2},"method":"ping"}`,
	`{"jsonrpc":"2.0","id":[{"x-y":{"b":1,"b":2}}],"method":"ping"}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"arguments":{"a":1,"a":2}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"q":1,"q":2},"result":{"r":1,"r":2}}`,
	`{"jsonrpc":"2.0","id":{"a":1,"a":2},"method":7}`,
	`{"jsonrpc":"2.0","id":{"a":1,"a":2},"method":"tools/call","params":{"name":"x","Name":"y"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"k":[1,{"z":1,"z":2}]},"name":7}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7,"NAME":"y"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"task":{"\u00e9":1,"é":2}}}`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"_meta\":{\"\xff\":1,\"\xfe\":2}}}",
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"tas\u212a":1}}`,
	`{"jsonrpc":"2.0","id":1,"method":null,"params":{"a":1,"a":1}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":null}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}`,
	`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},[{"a":1,"a":2}],{"id":2,"method":"tools/call","params":{"name":"b"}}]`,
	`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},{"id":2,"id":3}]x`,
	`{"id":1,"id":2} x`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","params":{` + manyKeys(40, false) + `}}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","params":{` + manyKeys(40, true) + `}}`,
	`{` + manyKeys(40, true) + `}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t",` + manyKeys(40, true) + `}}`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
}

// manyKeys is n distinct members, the last repeating the first when dup.
func manyKeys(n int, dup bool) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		k := i
		if dup && i == n-1 {
			k = 0
		}
		b.WriteString(`"k` + strconv.Itoa(k) + `":` + strconv.Itoa(i))
	}
	return b.String()
}

// FuzzParseRPCMatchesReference: the single-pass scanner gives, for any
// body, the verdict of the check it replaced (parseRPCRef): the same
// calls and tool names, the same single/batch reading, and the same
// refusal, word for word.
func FuzzParseRPCMatchesReference(f *testing.F) {
	for _, s := range append(append([]string{}, scopeAttacks...), refBodies...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotSingle, gotErr := parseRPC(body)
		want, wantSingle, wantErr := parseRPCRef(body)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) || gotSingle != wantSingle {
			t.Fatalf("body %q:\n scanner   %+v single=%v %v\n reference %+v single=%v %v", body, got, gotSingle, gotErr, want, wantSingle, wantErr)
		}
		var g, w *RequestError
		if errors.As(gotErr, &g) != errors.As(wantErr, &w) || (g != nil && g.Code != w.Code) {
			t.Fatalf("body %q: refusal %#v, the reference's %#v", body, gotErr, wantErr)
		}
	})
}
