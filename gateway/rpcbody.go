package gateway

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

// maxDepth is encoding/json's nesting limit: json.Valid refuses a body
// nested deeper, so the scanner does too.
const maxDepth = 10000

// scanner reads a body once, byte by byte, following the JSON grammar as
// encoding/json's scanner does (the same whitespace, numbers, escapes and
// depth limit; invalid UTF-8 inside strings is allowed, as json.Valid
// allows it). Before it, each nesting level was re-read by encoding/json
// (json.Valid, Decoder.Token, jsoncanon.CheckDuplicates): ~150 allocations
// for a 1 KB call on every request.
type scanner struct {
	b     []byte
	i     int
	depth int
	at    string // the message being read: "$" or "$[i]"
	// path is where the value being read sits below at, kept so that a
	// refusal can name it; it is turned into text only on refusal.
	path []step
	// keys holds the member names of every open object (decoded), each
	// object's from its own start, so a repeat is found without a map per
	// object (one is made only for an object with many members).
	keys [][]byte

	keysBuf [32][]byte
	pathBuf [8]step
}

// step is one level of a path: a member name or an array index. plain
// marks an envelope member, param a member of params (see refusal).
type step struct {
	key   []byte
	index int
	isKey bool
	plain bool
	param bool
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

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
		method, name   []byte // raw values, nil when absent
		hasParams      bool
		paramsIsObject bool
		nested         *repeat       // in an envelope member but params (a tools/call)
		all            *repeat       // in any envelope member (not a tools/call)
		pAll           *repeat       // anywhere in params
		pNested        *repeat       // nested in a member of params but arguments (a tools/call)
		pLevel         *RequestError // of params itself (a tools/call)
		keyStart       = len(s.keys)
		seen           map[string]struct{}
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
				hasParams = true
				paramsIsObject = s.i < len(s.b) && s.b[s.i] == '{'
				if paramsIsObject {
					name, err = s.params(&pAll, &pLevel, &pNested)
				} else {
					err = s.value(&pAll)
				}
				first(&all, pAll)
			default:
				var found *repeat
				err = s.value(&found)
				first(&nested, found)
				first(&all, found)
				if string(key) == "method" {
					method = s.b[start:s.i]
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
	toolsCall := false
	if method != nil {
		var ok bool
		if toolsCall, ok = stringIs(method, "tools/call"); !ok {
			return "", false, invalid("%s.method is not a string", s.at)
		}
	}
	if !toolsCall {
		if all != nil {
			return "", false, all.refusal(s.at, false)
		}
		return "", false, nil
	}
	if nested != nil {
		return "", false, nested.refusal(s.at, true)
	}
	if !hasParams || !paramsIsObject {
		return "", true, nil // no params, or null or not an object: the SDK refuses it
	}
	if pLevel != nil {
		return "", false, pLevel
	}
	if pNested != nil {
		return "", false, pNested.refusal(s.at, true)
	}
	if name != nil {
		var ok bool
		if tool, ok = stringValue(name); !ok {
			return "", false, invalid("%s.params.name is not a string", s.at)
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

// value reads one JSON value. With found set, an object in it that
// repeats a member is noted there (the first one only) and reading goes
// on; the error returned is errSyntax only.
func (s *scanner) value(found **repeat) error {
	s.ws()
	if s.i >= len(s.b) {
		return errSyntax
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(found)
	case c == '[':
		s.i++
		if err := s.enter(); err != nil {
			return err
		}
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			s.depth--
			return nil
		}
		s.path = append(s.path, step{})
		for n := 0; ; n++ {
			s.path[len(s.path)-1] = step{index: n}
			if err := s.value(found); err != nil {
				return err
			}
			if done, err := s.next(']'); err != nil {
				return err
			} else if done {
				break
			}
		}
		s.path = s.path[:len(s.path)-1]
		s.depth--
		return nil
	case c == '"':
		_, _, err := s.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return errSyntax
}

// object reads an object below the message level.
func (s *scanner) object(found **repeat) error {
	s.i++ // the '{'
	if err := s.enter(); err != nil {
		return err
	}
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	keyStart := len(s.keys)
	defer func() { s.keys = s.keys[:keyStart] }()
	var seen map[string]struct{}
	s.path = append(s.path, step{})
	for {
		key, err := s.key()
		if err != nil {
			return err
		}
		// Once a repeat is found (or when none is looked for) only the
		// syntax is left to check.
		if found != nil && *found == nil {
			if s.add(keyStart, &seen, key) {
				s.path = s.path[:len(s.path)-1] // the path of the object, not of its member
				*found = s.repeatHere(key)
				s.path = append(s.path, step{})
			}
		}
		s.path[len(s.path)-1] = step{key: key, isKey: true}
		if err := s.value(found); err != nil {
			return err
		}
		if done, err := s.next('}'); err != nil {
			return err
		} else if done {
			break
		}
	}
	s.path = s.path[:len(s.path)-1]
	s.depth--
	return nil
}

// manyMembers is the size from which an object's members are kept in a map.
const manyMembers = 16

// enter counts one more open object or array.
func (s *scanner) enter() error {
	s.depth++
	if s.depth > maxDepth {
		return errSyntax
	}
	return nil
}

// next reads the ',' between elements or the closing delimiter; done
// reports the end of the object or array.
func (s *scanner) next(end byte) (done bool, err error) {
	s.ws()
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case ',':
			s.i++
			return false, nil
		case end:
			s.i++
			return true, nil
		}
	}
	return false, errSyntax
}

// key reads a member name and the ':' after it and returns the name as a
// decoder compares it (unescaped).
func (s *scanner) key() ([]byte, error) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, errSyntax
	}
	raw, plain, err := s.str()
	if err != nil {
		return nil, err
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, errSyntax
	}
	s.i++
	if plain {
		return raw[1 : len(raw)-1], nil
	}
	var k string
	_ = json.Unmarshal(raw, &k) // valid: str checked it
	return []byte(k), nil
}

// str reads a string, returning it quoted as written; plain reports that
// its bytes are what it decodes to (no escape, valid UTF-8), so it needs
// no decoding.
func (s *scanner) str() (raw []byte, plain bool, err error) {
	start := s.i
	s.i++ // the '"'
	plain = true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			raw = s.b[start:s.i]
			if plain && !utf8.Valid(raw) {
				plain = false // decoding replaces invalid UTF-8 by U+FFFD
			}
			return raw, plain, nil
		case c < 0x20:
			return nil, false, errSyntax
		case c == '\\':
			plain = false
			s.i++
			if s.i >= len(s.b) {
				return nil, false, errSyntax
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for j := 0; j < 4; j++ {
					if s.i >= len(s.b) || !isHex(s.b[s.i]) {
						return nil, false, errSyntax
					}
					s.i++
				}
			default:
				return nil, false, errSyntax
			}
		default:
			s.i++
		}
	}
	return nil, false, errSyntax
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return errSyntax
	}
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return errSyntax
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return errSyntax
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return errSyntax
		}
	}
	return nil
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *scanner) literal(word string) error {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return errSyntax
	}
	s.i += len(word)
	return nil
}

// add notes key as a member of the innermost object, whose members read
// so far are keys[from:], and reports whether it was one already. The
// few members of an object are compared one by one (no allocation); an
// object with many gets a map (*seen), so that a large one costs linear
// time, not quadratic.
func (s *scanner) add(from int, seen *map[string]struct{}, key []byte) bool {
	if *seen == nil && len(s.keys)-from < manyMembers {
		for _, k := range s.keys[from:] {
			if bytes.Equal(k, key) {
				return true
			}
		}
		s.keys = append(s.keys, key)
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*manyMembers)
		for _, k := range s.keys[from:] {
			(*seen)[string(k)] = struct{}{}
		}
	}
	if _, ok := (*seen)[string(key)]; ok {
		return true
	}
	(*seen)[string(key)] = struct{}{}
	return false
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
