package gateway

// The edge's check of a POST body (edge.go): exactly one JSON-RPC message
// or batch that every parser reads alike, whose tools/call requests name
// the tools the MCP SDK will dispatch (RATIONALE.md: why a body that
// parsers could read differently is refused). rpcjson.go reads the JSON.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
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
	s := &scanner{b: body}
	// Room for the members and path of a typical body in the one
	// allocation of the scanner (append grows past it when needed).
	s.keys, s.path = s.keysBuf[:0], s.pathBuf[:0]
	calls, single, err = s.body()
	if err == errSyntax || (err != nil && !json.Valid(body)) {
		// The scanner stops at its first refusal; a body that is not
		// JSON at all is refused as such, with encoding/json's words,
		// whatever else is wrong in it. (Error path only: the cost of
		// re-reading does not matter here.)
		var v json.RawMessage
		reason := "not one JSON value"
		if err := json.Unmarshal(body, &v); err != nil {
			reason = err.Error()
		}
		return nil, false, &RequestError{Code: codeParseError, Reason: "the request body is not exactly one JSON-RPC message or batch (" + reason + "); send one JSON value and nothing after it. Nothing ran"}
	}
	if err != nil {
		return nil, single, err
	}
	return calls, single, nil
}

// errSyntax is the scanner's verdict that the body is not JSON; parseRPC
// turns it into the parse error encoding/json would give.
var errSyntax = errors.New("syntax error")

// body reads the whole body: one message or a batch, then only whitespace.
func (s *scanner) body() (calls []rpcCall, single bool, err error) {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '[' {
		// A batch: each element is a message, at $[i].
		s.i++
		if err := s.enter(); err != nil {
			return nil, false, err
		}
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
		} else {
			for n := 0; ; n++ {
				s.at = "$[" + strconv.Itoa(n) + "]"
				tool, isCall, err := s.message()
				if err != nil {
					return nil, false, err
				}
				if isCall {
					calls = append(calls, rpcCall{Msg: n, Tool: tool})
				}
				if done, err := s.next(']'); err != nil {
					return nil, false, err
				} else if done {
					break
				}
			}
		}
		s.depth--
	} else {
		single = true
		s.at = "$"
		tool, isCall, err := s.message()
		if err != nil {
			return nil, single, err
		}
		if isCall {
			calls = append(calls, rpcCall{Msg: 0, Tool: tool})
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return nil, single, errSyntax // something after the value
	}
	return calls, single, nil
}

// message reads one message and returns its tool when it is a tools/call.
// It refuses what the check before it did (rpcbody_ref_test.go), ranked as it
// ranked them, so the same refusal is reported: a repeated or case-folded
// envelope member first (at once: nothing else in the message outranks
// it), then a method that is not a string, then the first repeated member
// nested in the envelope (params included, unless it is a tools/call);
// for a tools/call then a repeated or case-folded member of params, the
// first one nested in params (the arguments aside), a name that is not a
// string. Which method the message has is known only at its end, so each
// verdict is kept until then.
func (s *scanner) message() (tool string, isCall bool, err error) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		// Not an object: the SDK refuses it; only its syntax matters.
		return "", false, s.value(nil)
	}
	s.i++
	if err := s.enter(); err != nil {
		return "", false, err
	}
	var (
		m        messageSeen
		keyStart = len(s.keys)
		seen     map[string]struct{}
	)
	defer func() { s.keys = s.keys[:keyStart] }()
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
	} else {
		for {
			key, err := s.key()
			if err != nil {
				return "", false, err
			}
			s.path = s.path[:0] // the message itself
			if s.add(keyStart, &seen, key) {
				return "", false, s.repeatHere(key).refusal(s.at, true)
			}
			if k := caseVariant(key, envelope); k != "" {
				return "", false, invalid("the member %q at %s differs from the JSON-RPC/MCP member %q only by case (parsers disagree on whether it is the same); spell it %q", key, s.at, k, k)
			}
			s.path = append(s.path, step{key: key, isKey: true, plain: true})
			s.ws()
			start := s.i
			switch string(key) {
			case "params":
				m.hasParams = true
				m.paramsIsObject = s.i < len(s.b) && s.b[s.i] == '{'
				if m.paramsIsObject {
					m.name, err = s.params(&m.pAll, &m.pLevel, &m.pNested)
				} else {
					err = s.value(&m.pAll)
				}
				first(&m.all, m.pAll)
			default:
				var found *repeat
				err = s.value(&found)
				first(&m.nested, found)
				first(&m.all, found)
				if string(key) == "method" {
					m.method = s.b[start:s.i]
				}
			}
			if err != nil {
				return "", false, err
			}
			if done, err := s.next('}'); err != nil {
				return "", false, err
			} else if done {
				break
			}
		}
	}
	s.depth--
	return m.verdict(s.at)
}

// messageSeen is what message found in a message, kept until its end,
// when verdict ranks it.
type messageSeen struct {
	method, name   []byte // raw values, nil when absent
	hasParams      bool
	paramsIsObject bool
	nested         *repeat       // in an envelope member but params (a tools/call)
	all            *repeat       // in any envelope member (not a tools/call)
	pAll           *repeat       // anywhere in params
	pNested        *repeat       // nested in a member of params but arguments (a tools/call)
	pLevel         *RequestError // of params itself (a tools/call)
}

// verdict is message's answer for the message at at, once it is read.
func (m *messageSeen) verdict(at string) (tool string, isCall bool, err error) {
	toolsCall := false
	if m.method != nil {
		var ok bool
		if toolsCall, ok = stringIs(m.method, "tools/call"); !ok {
			return "", false, invalid("%s.method is not a string", at)
		}
	}
	if !toolsCall {
		if m.all != nil {
			return "", false, m.all.refusal(at, false)
		}
		return "", false, nil
	}
	if m.nested != nil {
		return "", false, m.nested.refusal(at, true)
	}
	if !m.hasParams || !m.paramsIsObject {
		return "", true, nil // no params, or null or not an object: the SDK refuses it
	}
	if m.pLevel != nil {
		return "", false, m.pLevel
	}
	if m.pNested != nil {
		return "", false, m.pNested.refusal(at, true)
	}
	if m.name != nil {
		var ok bool
		if tool, ok = stringValue(m.name); !ok {
			return "", false, invalid("%s.params.name is not a string", at)
		}
	}
	return tool, true, nil
}

// params reads the object params of a message, keeping the first repeated
// member anywhere in it (*all: what counts when the message is not a
// tools/call), and for a tools/call the first repeated or case-folded
// member of params itself (*level) and the first repeated member nested
// in one of its members but arguments (*nested: the gateway's call
// refuses repeated keys in arguments itself, gateway/args.go). It returns
// the raw value of name.
func (s *scanner) params(all **repeat, level **RequestError, nested **repeat) (name []byte, err error) {
	s.i++ // the '{'
	if err := s.enter(); err != nil {
		return nil, err
	}
	keyStart := len(s.keys)
	defer func() { s.keys = s.keys[:keyStart] }()
	var seen map[string]struct{}
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil, nil
	}
	for {
		key, err := s.key()
		if err != nil {
			return nil, err
		}
		s.path = s.path[:1] // params itself
		if s.add(keyStart, &seen, key) {
			d := s.repeatHere(key)
			first(all, d)
			first(level, d.refusal(s.at, true))
		} else if k := caseVariant(key, callParams); k != "" {
			first(level, invalid("the member %q at %s.params differs from the JSON-RPC/MCP member %q only by case (parsers disagree on whether it is the same); spell it %q", key, s.at, k, k))
		}
		s.path = append(s.path, step{key: key, isKey: true, param: true})
		s.ws()
		start := s.i
		var found *repeat
		if err := s.value(&found); err != nil {
			return nil, err
		}
		first(all, found)
		if string(key) != "arguments" {
			first(nested, found)
		}
		if string(key) == "name" {
			name = s.b[start:s.i]
		}
		if done, err := s.next('}'); err != nil {
			return nil, err
		} else if done {
			break
		}
	}
	s.depth--
	return name, nil
}

// first keeps e in *slot unless a refusal is there already.
func first[T any](slot **T, e *T) {
	if *slot == nil {
		*slot = e
	}
}

// repeat is a member found twice in an object: its name and the path of
// the object, worded only when it is the refusal reported.
type repeat struct {
	key  []byte
	path []step
}

// repeatHere notes key repeated in the object at the current path.
func (s *scanner) repeatHere(key []byte) *repeat {
	return &repeat{key: key, path: slices.Clone(s.path)}
}

// refusal words r as the check before the scanner did, in the message at:
// the envelope member is written ".name", and so is a member of the params
// of a tools/call (these were named one by one); below them, and for the
// params of any other method (checked as a whole), steps are JSONPath as
// jsoncanon writes them (".name", or ["name"] when not a plain name, "[i]"
// for an element). Which method it is is known only at the message's end.
func (r *repeat) refusal(at string, toolsCall bool) *RequestError {
	var b strings.Builder
	b.WriteString(at)
	for _, p := range r.path {
		switch {
		case !p.isKey:
			b.WriteString("[" + strconv.Itoa(p.index) + "]")
		case p.plain || (p.param && toolsCall) || plainName(p.key):
			b.WriteString("." + string(p.key))
		default:
			b.WriteString("[" + strconv.Quote(string(p.key)) + "]")
		}
	}
	return invalid("the member %q appears more than once in the object at %s (JSON parsers disagree on which one counts); send each member once", r.key, b.String())
}

// plainName reports whether key matches ^[A-Za-z_][A-Za-z0-9_]*$, written
// ".key" in a path (as jsoncanon writes paths).
func plainName(key []byte) bool {
	for i, c := range key {
		if !(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9')) {
			return false
		}
	}
	return len(key) > 0
}

// caseVariant returns the member of known that key differs from only by
// case (Unicode folding, as strings.EqualFold), or "".
func caseVariant(key []byte, known []string) string {
	for _, k := range known {
		if string(key) != k && bytes.EqualFold(key, []byte(k)) {
			return k
		}
	}
	return ""
}

// stringValue decodes a JSON value into a string as json.Unmarshal would
// (null is ""); ok is false for any other kind of value.
func stringValue(raw []byte) (string, bool) {
	if plainString(raw) {
		return string(raw[1 : len(raw)-1]), true // nothing to decode
	}
	var v string
	err := json.Unmarshal(raw, &v)
	return v, err == nil
}

// stringIs reports whether the JSON value raw decodes to the string want
// (is), and whether it is a string or null at all (ok), without
// allocating for a plain string.
func stringIs(raw []byte, want string) (is, ok bool) {
	if plainString(raw) {
		return string(raw[1:len(raw)-1]) == want, true
	}
	v, ok := stringValue(raw)
	return ok && v == want, ok
}

// plainString reports whether raw is a string whose bytes between the
// quotes are what it decodes to (no escape, valid UTF-8).
func plainString(raw []byte) bool {
	return len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw)
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
