// Package jsontool is the logic of json.wasm: querying a JSON value with a
// small path syntax (Query) and turning CSV into JSON rows (CSVToJSON).
// Tools wires both to the native-tool protocol (package guest). It is pure
// Go over the standard library, tested natively.
package jsontool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/airlock-run/airlock/wasm/internal/guest"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Query selects from doc, a JSON text, the value(s) that path names. The
// path syntax:
//
//	(empty)      the whole value; a leading "$" is allowed and ignored
//	.name  name  a field of an object (a bare name runs to the next . or [)
//	["a.b"]      a field whose name needs quoting (a JSON string)
//	[2]          an element of an array, from 0; [-1] is the last
//	[*]  .*      every element of an array, or every field value of an
//	             object in document order
//
// Without a wildcard the result is the one value selected, and a missing
// field or index is an error that says what is there instead. With a
// wildcard the result is an array of every match, in document order;
// branches that do not have the rest of the path are left out, so it may
// be empty. Values come back as they were written (key order, number
// digits).
func Query(doc json.RawMessage, path string) (json.RawMessage, error) {
	steps, err := parsePath(path)
	if err != nil {
		return nil, err
	}
	wild := false
	for _, s := range steps {
		wild = wild || s.kind == stepWild
	}
	var out []json.RawMessage
	if err := walk(bytes.TrimSpace(doc), steps, 0, wild, &out); err != nil {
		return nil, err
	}
	if !wild {
		return out[0], nil
	}
	var list bytes.Buffer
	list.WriteByte('[')
	for i, v := range out {
		if i > 0 {
			list.WriteByte(',')
		}
		list.Write(v)
	}
	list.WriteByte(']')
	return list.Bytes(), nil
}

type stepKind int

const (
	stepField stepKind = iota
	stepIndex
	stepWild
)

type step struct {
	kind  stepKind
	name  string // stepField
	index int    // stepIndex
	text  string // the path up to and including this step, for messages
}

// parsePath splits a path into steps.
func parsePath(path string) ([]step, error) {
	p := strings.TrimPrefix(path, "$")
	if p == "." {
		p = "" // jq's identity
	}
	off := len(path) - len(p)
	var steps []step
	i := 0
	bad := func(why string) error {
		return fmt.Errorf("path %q: %s at character %d; write fields as a.b, indexes as [0], every element as [*], odd field names as [\"a.b\"]", path, why, off+i+1)
	}
	for i < len(p) {
		switch {
		case p[i] == '[' && strings.HasPrefix(p[i+1:], `"`):
			// A quoted name may itself contain "]": let the JSON decoder
			// find the end of the string.
			dec := json.NewDecoder(strings.NewReader(p[i+1:]))
			var name string
			if err := dec.Decode(&name); err != nil {
				return nil, bad("the quoted field name is not a JSON string")
			}
			j := i + 1 + int(dec.InputOffset())
			if j >= len(p) || p[j] != ']' {
				i = j
				return nil, bad(`"]" is missing after the quoted field name`)
			}
			i = j + 1
			steps = append(steps, step{kind: stepField, name: name, text: p[:i]})
		case p[i] == '[':
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				return nil, bad(`"[" is not closed`)
			}
			inner := strings.TrimSpace(p[i+1 : i+end])
			if inner == "*" {
				i += end + 1
				steps = append(steps, step{kind: stepWild, text: p[:i]})
				continue
			}
			n, err := strconv.Atoi(inner)
			if err != nil {
				return nil, bad(fmt.Sprintf("[%s] is not an index (a whole number) or [*]", inner))
			}
			i += end + 1
			steps = append(steps, step{kind: stepIndex, index: n, text: p[:i]})
		case p[i] == '.' || i == 0:
			if p[i] == '.' {
				i++
			}
			j := i
			for j < len(p) && p[j] != '.' && p[j] != '[' && p[j] != ']' {
				j++
			}
			if j == i {
				return nil, bad("a field name is missing")
			}
			name := p[i:j]
			i = j
			if name == "*" {
				steps = append(steps, step{kind: stepWild, text: p[:i]})
			} else {
				steps = append(steps, step{kind: stepField, name: name, text: p[:i]})
			}
		default:
			r, _ := utf8.DecodeRuneInString(p[i:])
			return nil, bad(fmt.Sprintf(`%q where "." or "[" should be`, string(r)))
		}
	}
	return steps, nil
}

// walk appends to out what steps[k:] select from v. Under a wildcard a
// mismatch only drops the branch; otherwise it is the error.
func walk(v json.RawMessage, steps []step, k int, wild bool, out *[]json.RawMessage) error {
	if k == len(steps) {
		*out = append(*out, v)
		return nil
	}
	s := steps[k]
	at := "the value"
	if k > 0 {
		at = steps[k-1].text
	}
	miss := func(format string, a ...any) error {
		if wild {
			return nil
		}
		return fmt.Errorf("path %q: %s", s.text, fmt.Sprintf(format, a...))
	}
	switch s.kind {
	case stepField:
		if guest.KindOf(v) != "an object" {
			return miss("%s is %s, not an object, so it has no field %q", at, guest.KindOf(v), s.name)
		}
		ms, err := members(v)
		if err != nil {
			return err
		}
		// The last of duplicate keys wins, as in encoding/json.
		for i := len(ms) - 1; i >= 0; i-- {
			if ms[i].key == s.name {
				return walk(ms[i].value, steps, k+1, wild, out)
			}
		}
		return miss("%s has no field %q (it has %s)", at, s.name, listKeys(ms))
	case stepIndex:
		if guest.KindOf(v) != "an array" {
			return miss("%s is %s, not an array, so it has no index [%d]", at, guest.KindOf(v), s.index)
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			return err
		}
		i := s.index
		if i < 0 {
			i += len(elems)
		}
		if i < 0 || i >= len(elems) {
			return miss("%s has %d elements, so there is no index [%d]", at, len(elems), s.index)
		}
		return walk(elems[i], steps, k+1, wild, out)
	default: // stepWild
		var children []json.RawMessage
		switch guest.KindOf(v) {
		case "an array":
			if err := json.Unmarshal(v, &children); err != nil {
				return err
			}
		case "an object":
			ms, err := members(v)
			if err != nil {
				return err
			}
			for _, m := range ms {
				children = append(children, m.value)
			}
		default:
			return nil // a wildcard over a scalar selects nothing
		}
		for _, c := range children {
			if err := walk(c, steps, k+1, wild, out); err != nil {
				return err
			}
		}
		return nil
	}
}

type member struct {
	key   string
	value json.RawMessage
}

// members lists an object's fields in document order (a map would lose
// it).
func members(obj json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var ms []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var m member
		m.key, _ = tok.(string)
		if err := dec.Decode(&m.value); err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// listKeys names an object's fields for an error message, a few at most.
func listKeys(ms []member) string {
	if len(ms) == 0 {
		return "no fields"
	}
	const most = 10
	var names []string
	for i, m := range ms {
		if i == most {
			names = append(names, fmt.Sprintf("and %d more", len(ms)-most))
			break
		}
		names = append(names, strconv.Quote(m.key))
	}
	return "fields " + strings.Join(names, ", ")
}
