// Package jsoncanon refuses JSON that parsers can read differently and
// re-encodes the rest in one canonical form.
//
// A JSON object with a key twice ({"path":"secret.env","path":"ok.txt"}) is
// valid to encoding/json, which keeps the last value, while other parsers
// keep the first: if policy judged one and an upstream acted on the other,
// a deny rule would be bypassed. Arguments are therefore refused when any
// object in them, at any depth, repeats a key (compared after unescaping,
// as a decoder compares them), and what is accepted is re-encoded so that
// what is recorded, judged and sent are the same bytes.
//
// It imports only the standard library; gateway and internal/policy use it.
package jsoncanon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
)

// DuplicateKeyError reports an object that has Key more than once. Path
// locates the object, in JSONPath notation ("$" is the value itself).
type DuplicateKeyError struct {
	Path string
	Key  string
}

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("the key %q appears more than once in the object at %s", e.Key, e.Path)
}

// frame is one open object or array while walking tokens.
type frame struct {
	path   string
	object bool
	keys   map[string]struct{} // object: keys seen
	key    string              // object: the key whose value comes next
	isKey  bool                // object: the next string token is a key
	index  int                 // array: index of the next element
}

// CheckDuplicates returns a *DuplicateKeyError for the first object in
// data (one JSON value) that repeats a key, a syntax error when data is
// not one JSON value, and nil otherwise.
func CheckDuplicates(data []byte) error {
	if !json.Valid(data) { // first, so a syntax error is reported as such
		var raw json.RawMessage
		if err := json.Unmarshal(data, &raw); err != nil {
			return err
		}
		return errors.New("not one JSON value")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []*frame
	// child is the path of the value that starts at the current token.
	child := func() string {
		if len(stack) == 0 {
			return "$"
		}
		top := stack[len(stack)-1]
		if top.object {
			return top.path + member(top.key)
		}
		return top.path + "[" + strconv.Itoa(top.index) + "]"
	}
	// done records that a value ended in the innermost container.
	done := func() {
		if len(stack) == 0 {
			return
		}
		top := stack[len(stack)-1]
		if top.object {
			top.isKey = true
		} else {
			top.index++
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) > 0 {
				return io.ErrUnexpectedEOF
			}
			return errors.New("empty input: want one JSON value")
		}
		if err != nil {
			return err
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].isKey {
			top := stack[n-1]
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				done()
			} else {
				key, _ := tok.(string) // the decoder allows only strings here
				if _, dup := top.keys[key]; dup {
					return &DuplicateKeyError{Path: top.path, Key: key}
				}
				top.keys[key] = struct{}{}
				top.key, top.isKey = key, false
			}
		} else {
			switch tok {
			case json.Delim('{'):
				stack = append(stack, &frame{path: child(), object: true, keys: map[string]struct{}{}, isKey: true})
			case json.Delim('['):
				stack = append(stack, &frame{path: child()})
			case json.Delim(']'):
				stack = stack[:len(stack)-1]
				done()
			default:
				done()
			}
		}
		if len(stack) == 0 {
			break
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("invalid character after the top-level value")
	}
	return nil
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// member is the JSONPath step to key.
func member(key string) string {
	if plainKey.MatchString(key) {
		return "." + key
	}
	return "[" + strconv.Quote(key) + "]"
}

// Canonical checks data as CheckDuplicates does and returns it re-encoded:
// no insignificant space, object keys sorted, strings as encoding/json
// writes them (invalid UTF-8 replaced by U+FFFD, as every decoder of the
// original reading it through encoding/json saw it), numbers as written.
// Decoding the result with encoding/json gives what decoding data gives.
func Canonical(data []byte) (json.RawMessage, error) {
	if err := CheckDuplicates(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers pass as written: no float rounding
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
