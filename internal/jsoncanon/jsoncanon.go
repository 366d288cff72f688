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
// JCS (jcs.go) writes the RFC 8785 form that signed audit records use.
//
// It imports only the standard library; gateway, internal/policy and
// internal/timeline use it.
package jsoncanon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
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
	return Marshal(v)
}

// Marshal encodes v, a value decoded with json.Decoder.UseNumber (or
// Decode), in the canonical form Canonical gives: no insignificant space,
// object keys sorted, no HTML escaping, json.Number as written.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// NumberError reports a number that has no exact value a comparison can
// use: not an integer within 64 bits, and not the number its nearest
// double is (9007199254740993.5, 1e400, 18446744073709551616). Path
// locates it, in JSONPath notation.
type NumberError struct {
	Path    string
	Literal string
}

func (e *NumberError) Error() string {
	return fmt.Sprintf("the number %s at %s cannot be held exactly (it is not a 64-bit integer, and the nearest double is another number), so policy could judge a different value than the one sent; send it as a string, or as an integer within 64 bits", clipNumber(e.Literal), e.Path)
}

func clipNumber(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Decode checks data as CheckDuplicates does and decodes it with every
// number exact (see Number): objects become map[string]any, arrays []any,
// numbers int64, uint64 or float64. A number that none of these holds
// exactly is a *NumberError. Values compared with what Decode gives (CEL
// rules, grants) therefore see the number the upstream is sent, as
// Canonical writes it.
func Decode(data []byte) (any, error) {
	if err := CheckDuplicates(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return Exact(v)
}

// Exact replaces the json.Numbers in v, a value decoded with
// json.Decoder.UseNumber, by their Number values, in place; a number
// without one is a *NumberError. It is Decode for a caller that decodes
// itself (and does not refuse repeated keys).
func Exact(v any) (any, error) {
	if x, ok := exact(v); ok {
		return x, nil
	}
	return nil, badNumber(v, "$")
}

// exact is Exact without paths, for the common case of no bad number.
func exact(v any) (any, bool) {
	switch v := v.(type) {
	case json.Number:
		return Number(string(v))
	case map[string]any:
		for k, e := range v {
			x, ok := exact(e)
			if !ok {
				return nil, false
			}
			v[k] = x
		}
	case []any:
		for i, e := range v {
			x, ok := exact(e)
			if !ok {
				return nil, false
			}
			v[i] = x
		}
	}
	return v, true
}

// badNumber is the *NumberError of the first bad number in v (partly
// converted by exact), object keys in sorted order, so that the one
// reported for several is the same on every run.
func badNumber(v any, path string) error {
	switch v := v.(type) {
	case json.Number:
		if _, ok := Number(string(v)); !ok {
			return &NumberError{Path: path, Literal: string(v)}
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := badNumber(v[k], path+member(k)); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := badNumber(e, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	}
	return nil
}

// Bounds between which a double holds only integers some of which a 64-bit
// integer holds too: a CEL comparison of an int with such a double converts
// the int to a double, rounding it (cel-go common/types/compare.go), so
// 9007199254740993 == 9007199254740992.0 would be true.
const (
	minInexact = 1 << 53 // 2^53: below it, every integer is a double
	maxInexact = 1 << 64 // 2^64: above it, no 64-bit integer compares equal
)

// Number is the exact value of a JSON number literal, and false when it
// has none:
//
//   - an integer (however written: 12, 1.2e1, 9007199254740993.0) that
//     fits an int64 is an int64, one that fits only a uint64 a uint64 —
//     except that an integer below 2^53 written with a fraction or an
//     exponent (1.0, 1e2) stays a float64, as such numbers always were;
//   - any other number is a float64 when the double nearest to it, written
//     in its shortest form, is the number written (0.1, 1.5, 1e300), and
//     lies outside [2^53, 2^64];
//   - anything else (9007199254740993.5, 18446744073709551616, 1e400,
//     1e-400, 0.1000000000000000000001) has no exact value.
//
// Two literals with different values never give the same result, and a
// float64 result never lies where CEL compares it inexactly with an
// integer.
func Number(lit string) (any, bool) {
	if !strings.ContainsAny(lit, ".eE") {
		if i, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return i, true
		}
		if u, err := strconv.ParseUint(lit, 10, 64); err == nil {
			return u, true
		}
	}
	neg, digits, exp, ok := decimal(lit)
	if !ok {
		return nil, false
	}
	if n := len(digits); n > 0 && n <= exp && exp <= 20 { // an integer of at most 20 digits
		s := digits + strings.Repeat("0", exp-n)
		if neg {
			s = "-" + s
		}
		i, ierr := strconv.ParseInt(s, 10, 64)
		if ierr == nil && (i >= minInexact || i <= -minInexact) {
			return i, true
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil && u >= minInexact {
			return u, true
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return nil, false
	}
	if a := math.Abs(f); a >= minInexact && a <= maxInexact {
		return nil, false
	}
	fneg, fdigits, fexp, _ := decimal(strconv.FormatFloat(f, 'e', -1, 64))
	if fdigits != digits || (digits != "" && (fexp != exp || fneg != neg)) {
		return nil, false
	}
	return f, true
}

// decimal splits a JSON number literal into its sign and the significant
// digits and exponent of its value, 0.digits × 10^exp (digits without
// leading or trailing zeros; "" for zero, whose exponent is then 0).
func decimal(lit string) (neg bool, digits string, exp int, ok bool) {
	s := lit
	if neg = strings.HasPrefix(s, "-"); neg {
		s = s[1:]
	}
	mant, e, hasExp := strings.Cut(strings.ToLower(s), "e")
	if hasExp {
		n, err := strconv.Atoi(strings.TrimPrefix(e, "+"))
		if err != nil || n > 1<<30 || n < -(1<<30) {
			return false, "", 0, false
		}
		exp = n
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	all := intPart + frac
	exp += len(intPart)
	trimmed := strings.TrimLeft(all, "0")
	exp -= len(all) - len(trimmed)
	digits = strings.TrimRight(trimmed, "0")
	if digits == "" {
		exp = 0
	}
	return neg, digits, exp, true
}
