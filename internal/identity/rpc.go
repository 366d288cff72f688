package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// JSON-RPC error codes of a refused request body.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
)

// RequestError is a POST body refused at the edge because it is not
// exactly one JSON-RPC message or batch that every parser reads alike.
type RequestError struct {
	Code   int // a JSON-RPC error code
	Reason string
}

func (e *RequestError) Error() string { return e.Reason }

// envelope and callParams are the members the MCP SDK reads, by the exact
// (case-sensitive) names it reads them.
var (
	envelope   = []string{"jsonrpc", "id", "method", "params", "result", "error"}
	callParams = []string{"name", "arguments", "_meta", "inputResponses", "requestState", "task"}
)

// rpcCall is a tools/call of a request body: the index of its message
// (0 for a single message) and the tool it names.
type rpcCall struct {
	Msg  int
	Tool string
}

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
func parseRPC(body []byte) (calls []rpcCall, single bool, err error) {
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
		tool, isCall, err := parseMessage(raw, paths[i])
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
func parseMessage(raw json.RawMessage, at string) (tool string, isCall bool, err error) {
	m, err := members(raw, at, envelope)
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
	for k, v := range m {
		if k == "params" && method == "tools/call" {
			continue
		}
		if err := noDuplicates(v, at+"."+k); err != nil {
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
	p, err := members(params, at+".params", callParams)
	if err != nil {
		return "", false, err
	}
	if p == nil {
		return "", true, nil // null or not an object: the SDK refuses it
	}
	for k, v := range p {
		if k == "arguments" {
			continue // the gateway's call refuses repeated keys in them (gateway/args.go)
		}
		if err := noDuplicates(v, at+".params."+k); err != nil {
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
func members(raw json.RawMessage, at string, known []string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, invalid("%s: %v", at, err)
		}
		key, _ := tok.(string) // the decoder allows only strings here
		if _, dup := out[key]; dup {
			return nil, invalid("the member %q appears more than once in the object at %s (JSON parsers disagree on which one counts); send each member once", key, at)
		}
		for _, k := range known {
			if key != k && strings.EqualFold(key, k) {
				return nil, invalid("the member %q at %s differs from the JSON-RPC/MCP member %q only by case (parsers disagree on whether it is the same); spell it %q", key, at, k, k)
			}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, invalid("%s: %v", at, err)
		}
		out[key] = v
	}
	return out, nil
}

// noDuplicates refuses a value in which any object repeats a key.
func noDuplicates(v json.RawMessage, at string) error {
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

func invalid(format string, a ...any) *RequestError {
	return &RequestError{Code: codeInvalidRequest, Reason: "invalid request: " + fmt.Sprintf(format, a...) + ". Nothing ran"}
}

// headerName is the 2026-07-28 header that repeats the tool a tools/call
// names.
const headerName = "Mcp-Name"

// readRPC reads the body of a POST (putting it back for the MCP handler)
// and parses it with parseRPC. A single tools/call whose Mcp-Name header
// names another tool than its body is refused.
func readRPC(r *http.Request) ([]string, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxInspectedBody+1))
	r.Body.Close()
	if err != nil {
		return nil, &RequestError{Code: codeInvalidRequest, Reason: "reading the request: " + err.Error()}
	}
	if len(body) > maxInspectedBody {
		return nil, errTooLarge
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil // the MCP handler answers that a POST needs a body
	}
	calls, single, err := parseRPC(body)
	if err != nil {
		return nil, err
	}
	tools := make([]string, len(calls))
	for i, c := range calls {
		tools[i] = c.Tool
	}
	if h := r.Header.Values(headerName); len(h) > 0 && single && len(tools) == 1 && (len(h) > 1 || h[0] != tools[0]) {
		return nil, invalid("the %s header %q does not name the tool the body calls, %q; send the same name in both", headerName, strings.Join(h, ", "), tools[0])
	}
	return tools, nil
}

var errTooLarge = &RequestError{Code: codeInvalidRequest, Reason: fmt.Sprintf("request larger than %dMiB", maxInspectedBody>>20)}

// writeRPCError answers a refused body: 400 (413 when too large) with a
// JSON-RPC error response (id null: which request it was is not known).
func writeRPCError(w http.ResponseWriter, e *RequestError) {
	status := http.StatusBadRequest
	if e == errTooLarge {
		status = http.StatusRequestEntityTooLarge
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": e.Code, "message": e.Reason}})
}
