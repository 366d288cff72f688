package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// maxDepth bounds the nesting of a value crossing the guest boundary in
// either direction: a tool result nested deeper, or an argument or result
// list that contains itself, is refused with an error instead of
// exhausting the (capped) stack.
const maxDepth = 512

// maxIntDigits bounds a JSON integer's length (as Python does): reading a
// huge one exactly costs more than quadratic time.
const maxIntDigits = 4300

// encoder turns a Starlark value into JSON. Tool arguments keep a dict's
// insertion order (what the program wrote); the program's result sorts
// dict keys, so two equal results always encode to the same bytes.
type encoder struct {
	buf      bytes.Buffer
	sortKeys bool
	// where names the value in errors ("fs.read_file argument path").
	where string
}

func (e *encoder) encode(v starlark.Value, path string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%s%s is nested deeper than %d levels (does a list or dict contain itself?)", e.where, path, maxDepth)
	}
	switch v := v.(type) {
	case starlark.NoneType:
		e.buf.WriteString("null")
	case starlark.Bool:
		if v {
			e.buf.WriteString("true")
		} else {
			e.buf.WriteString("false")
		}
	case starlark.Int:
		// Int.String is exact at any size: JSON integers past 2^53 stay
		// exact (the receiving side decides how to read them).
		e.buf.WriteString(v.String())
	case starlark.Float:
		f := float64(v)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("%s%s is %s, which JSON cannot hold", e.where, path, v.String())
		}
		e.buf.WriteString(formatFloat(f))
	case starlark.String:
		writeString(&e.buf, string(v))
	case *starlark.Dict:
		e.buf.WriteByte('{')
		items := v.Items()
		if e.sortKeys {
			keys := make([]string, len(items))
			for i, kv := range items {
				k, ok := kv[0].(starlark.String)
				if !ok {
					return fmt.Errorf("%s%s has a key of type %s; JSON object keys must be strings (use str(key))", e.where, path, kv[0].Type())
				}
				keys[i] = string(k)
			}
			sort.Sort(byKey{keys, items})
		}
		for i, kv := range items {
			k, ok := kv[0].(starlark.String)
			if !ok {
				return fmt.Errorf("%s%s has a key of type %s; JSON object keys must be strings (use str(key))", e.where, path, kv[0].Type())
			}
			if i > 0 {
				e.buf.WriteByte(',')
			}
			writeString(&e.buf, string(k))
			e.buf.WriteByte(':')
			if err := e.encode(kv[1], path+"["+strconv.Quote(string(k))+"]", depth+1); err != nil {
				return err
			}
		}
		e.buf.WriteByte('}')
	case *starlarkstruct.Struct:
		// AttrNames is sorted, so a struct encodes the same way each time.
		e.buf.WriteByte('{')
		for i, name := range v.AttrNames() {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			writeString(&e.buf, name)
			e.buf.WriteByte(':')
			f, _ := v.Attr(name)
			if err := e.encode(f, path+"."+name, depth+1); err != nil {
				return err
			}
		}
		e.buf.WriteByte('}')
	case *starlark.List, starlark.Tuple:
		l := v.(starlark.Indexable)
		e.buf.WriteByte('[')
		for i := 0; i < l.Len(); i++ {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			if err := e.encode(l.Index(i), path+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
				return err
			}
		}
		e.buf.WriteByte(']')
	case *starlark.Set:
		return fmt.Errorf("%s%s is a set, which JSON cannot hold: use list(...) (sorted(...) for a stable order)", e.where, path)
	default:
		return fmt.Errorf("%s%s is a %s, which JSON cannot hold: pass only None, bools, numbers, strings, lists, tuples, dicts and structs", e.where, path, v.Type())
	}
	return nil
}

type byKey struct {
	keys  []string
	items []starlark.Tuple
}

func (b byKey) Len() int           { return len(b.keys) }
func (b byKey) Less(i, j int) bool { return b.keys[i] < b.keys[j] }
func (b byKey) Swap(i, j int) {
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
	b.items[i], b.items[j] = b.items[j], b.items[i]
}

// formatFloat writes a float the way Starlark prints it where that is
// valid JSON, always with a fraction or exponent so it reads back as a
// float.
func formatFloat(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// writeString writes s as a JSON string. Unlike encoding/json it does not
// escape <, > and &: the text goes to a model, not into HTML. Invalid
// UTF-8 becomes U+FFFD, as encoding/json does.
func writeString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b.WriteString(s[start:i])
			switch c {
			case '"', '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			default:
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString(s[start:i])
			b.WriteString(`\ufffd`)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript readers.
		if r == '\u2028' || r == '\u2029' {
			b.WriteString(s[start:i])
			b.WriteString(`\u202`)
			b.WriteByte(hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

// toJSON encodes v; where prefixes errors.
func toJSON(v starlark.Value, sortKeys bool, where string) ([]byte, error) {
	e := &encoder{sortKeys: sortKeys, where: where}
	if err := e.encode(v, "", 0); err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

// fromJSON decodes a tool's JSON result. Objects become dicts in document
// order; a key that repeats keeps its first position and its last value
// (as encoding/json and JavaScript do), so the outcome is the same on
// every run. Integers are exact at any size; null is None. The data is
// validated first (json.Valid), then read by a small parser that can
// trust its syntax: encoding/json's token API costs ~80 allocations a
// call.
func fromJSON(data []byte) (starlark.Value, error) {
	if len(bytes.Trim(data, " \t\n\r")) == 0 { // JSON whitespace only
		return starlark.None, nil
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v) // for the error's text
		if err == nil {
			err = errors.New("not valid JSON")
		}
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	p := &parser{data: data}
	return p.value(0)
}

// parser reads JSON already known to be valid.
type parser struct {
	data []byte
	i    int
}

func (p *parser) skip() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (starlark.Value, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("the value is nested deeper than %d levels", maxDepth)
	}
	p.skip()
	switch c := p.data[p.i]; {
	case c == 'n':
		p.i += 4
		return starlark.None, nil
	case c == 't':
		p.i += 4
		return starlark.True, nil
	case c == 'f':
		p.i += 5
		return starlark.False, nil
	case c == '"':
		s, err := p.str()
		return starlark.String(s), err
	case c == '[':
		p.i++
		var elems []starlark.Value
		for {
			p.skip()
			if p.data[p.i] == ']' {
				p.i++
				return starlark.NewList(elems), nil
			}
			if p.data[p.i] == ',' {
				p.i++
			}
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			elems = append(elems, v)
		}
	case c == '{':
		p.i++
		d := starlark.NewDict(0)
		for {
			p.skip()
			if p.data[p.i] == '}' {
				p.i++
				return d, nil
			}
			if p.data[p.i] == ',' {
				p.i++
				p.skip()
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.skip()
			p.i++ // ':'
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if err := d.SetKey(starlark.String(k), v); err != nil {
				return nil, err
			}
		}
	default:
		j := p.i
		for j < len(p.data) && strings.IndexByte("+-0123456789.eE", p.data[j]) >= 0 {
			j++
		}
		num := string(p.data[p.i:j])
		p.i = j
		return numberValue(num)
	}
}

// str reads a string at p.i (its opening quote).
func (p *parser) str() (string, error) {
	j := p.i + 1
	escaped := false
	for ; p.data[j] != '"'; j++ {
		if p.data[j] == '\\' {
			escaped = true
			j++
		}
	}
	raw := p.data[p.i : j+1]
	p.i = j + 1
	if !escaped && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1]), nil
	}
	// Escapes or invalid UTF-8: let encoding/json decode it (it also turns
	// invalid UTF-8 into U+FFFD).
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("invalid JSON: %v", err)
	}
	return s, nil
}

// numberValue reads a JSON number: an integer literal exactly (as a big
// Int past int64), anything else as a float.
func numberValue(s string) (starlark.Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if len(s) > maxIntDigits {
			return nil, fmt.Errorf("an integer with %d digits, more than the %d allowed", len(s), maxIntDigits)
		}
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return starlark.MakeInt64(i), nil
		}
		b, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, fmt.Errorf("invalid JSON number %q", s)
		}
		return starlark.MakeBigInt(b), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		// Past ±1.8e308 (as encoding/json refuses it).
		return nil, fmt.Errorf("the number %.20s is out of range", s)
	}
	return starlark.Float(f), nil
}
