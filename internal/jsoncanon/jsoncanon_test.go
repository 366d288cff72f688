package jsoncanon

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestCheckDuplicates(t *testing.T) {
	tests := []struct {
		name, in  string
		path, key string // want a *DuplicateKeyError with these
		invalid   bool   // want another error
	}{
		{name: "top level", in: `{"path":"secret.env","path":"ok.txt"}`, path: "$", key: "path"},
		{name: "top level, spaced", in: " {\"path\" : 1 ,\n \"a\": 2, \"path\": 3} ", path: "$", key: "path"},
		{name: "escaped spelling of the same key", in: `{"path":"secret.env","\u0070ath":"ok.txt"}`, path: "$", key: "path"},
		{name: "nested object", in: `{"opts":{"mode":"r","mode":"w"}}`, path: "$.opts", key: "mode"},
		{name: "in an array", in: `{"edits":[{"a":1},{"old":"x","old":"y"}]}`, path: "$.edits[1]", key: "old"},
		{name: "deep", in: `[[{"k":[{"x":{"y":1,"y":2}}]}]]`, path: "$[0][0].k[0].x", key: "y"},
		{name: "odd key names in the path", in: `{"a b":{"":{"c":1,"c":1}}}`, path: `$["a b"][""]`, key: "c"},
		{name: "same value twice is still refused", in: `{"a":1,"a":1}`, path: "$", key: "a"},
		{name: "invalid UTF-8 keys decode to the same key", in: "{\"\xff\":1,\"\xfe\":2}", path: "$", key: "\ufffd"},
		{name: "after a nested value", in: `{"a":{"b":[1,{"c":2}]},"d":3,"a":4}`, path: "$", key: "a"},
		{name: "no duplicates", in: `{"path":"ok.txt","opts":{"path":"x"},"list":[{"path":1},{"path":2}]}`},
		{name: "same key in sibling objects", in: `[{"a":1},{"a":2}]`},
		{name: "case differs", in: `{"a":1,"A":2}`},
		{name: "scalar", in: `"x"`},
		{name: "empty object", in: `{}`},
		{name: "big number", in: `{"n":1e400}`},
		{name: "empty", in: ``, invalid: true},
		{name: "truncated", in: `{"a":1`, invalid: true},
		{name: "two values", in: `{} {}`, invalid: true},
		{name: "trailing garbage", in: `{"a":1}x`, invalid: true},
		{name: "not JSON", in: `{a:1}`, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckDuplicates([]byte(tt.in))
			var dup *DuplicateKeyError
			switch {
			case tt.key != "":
				if !errors.As(err, &dup) || dup.Path != tt.path || dup.Key != tt.key {
					t.Fatalf("CheckDuplicates(%s) = %v; want key %q at %s", tt.in, err, tt.key, tt.path)
				}
				if !strings.Contains(err.Error(), tt.path) {
					t.Errorf("error %q does not name the path %s", err, tt.path)
				}
			case tt.invalid:
				if err == nil || errors.As(err, &dup) {
					t.Fatalf("CheckDuplicates(%q) = %v; want a syntax error", tt.in, err)
				}
			default:
				if err != nil {
					t.Fatalf("CheckDuplicates(%s) = %v; want nil", tt.in, err)
				}
			}
		})
	}
}

func TestCanonical(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{ "b" : 1, "a" : [ 1 , 2 ] }`, `{"a":[1,2],"b":1}`},
		{`{"n": 9007199254740993, "f": 1.50, "e": 1E+2}`, `{"e":1E+2,"f":1.50,"n":9007199254740993}`},
		{`{"s": "<a&b>", "u": "\u00e9"}`, `{"s":"<a&b>","u":"é"}`},
		{"{\"bad\": \"\xff\"}", `{"bad":"` + "\ufffd" + `"}`},
		{`null`, `null`},
		{`[]`, `[]`},
	}
	for _, tt := range tests {
		got, err := Canonical([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonical(%q) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	if _, err := Canonical([]byte(`{"path":"secret.env","path":"ok.txt"}`)); err == nil {
		t.Error("Canonical accepted a duplicate key")
	}
}

// FuzzCanonical: CheckDuplicates and Canonical never panic; what Canonical
// accepts has no duplicate key, decodes (with encoding/json, as policy
// decodes) to what the input decodes to, and is its own canonical form;
// what it refuses for a duplicate key really repeats a key.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"path":"secret.env","path":"ok.txt"}`,
		`{"path":"ok.txt","path":"secret.env"}`,
		`{"path":"secret.env","\u0070ath":"ok.txt"}`,
		`{"opts":{"mode":"r","mode":"w"}}`,
		`{"edits":[{"old":"x","old":"y"}]}`,
		`{"a":1,"A":2}`,
		"{\"\xff\":1,\"\xfe\":2}",
		`{"n":1e400,"m":9007199254740993}`,
		`{"s":"<>&\u2028"}`,
		`[[[[{"a":{"b":{"c":[1,2,{"d":null,"d":true}]}}}]]]]`,
		`{} {}`, `{"a":1`, ``, `null`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dupErr := CheckDuplicates(data)
		canon, err := Canonical(data)
		if (err == nil) != (dupErr == nil) {
			t.Fatalf("CheckDuplicates = %v but Canonical = %v", dupErr, err)
		}
		var dup *DuplicateKeyError
		if errors.As(err, &dup) {
			if !json.Valid(data) {
				t.Fatalf("duplicate key reported in invalid JSON %q", data)
			}
			return
		}
		if err != nil {
			if json.Valid(data) {
				t.Fatalf("Canonical refused valid JSON %q without a duplicate key: %v", data, err)
			}
			return
		}
		var a, b any
		if err := json.Unmarshal(data, &a); err != nil {
			return // e.g. a number encoding/json cannot hold as float64: policy denies it either way
		}
		if err := json.Unmarshal(canon, &b); err != nil {
			t.Fatalf("canonical form %s does not decode: %v", canon, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%q decodes to %#v, its canonical form %s to %#v", data, a, canon, b)
		}
		// Exact values too (as policy decodes): the same numbers, or the
		// same refusal.
		da, errA := Decode(data)
		db, errB := Decode(canon)
		if (errA == nil) != (errB == nil) || !reflect.DeepEqual(da, db) {
			t.Fatalf("Decode(%q) = %#v, %v but Decode of its canonical form %s = %#v, %v", data, da, errA, canon, db, errB)
		}
		again, err := Canonical(canon)
		if err != nil || string(again) != string(canon) {
			t.Fatalf("Canonical is not idempotent: %s -> %s, %v", canon, again, err)
		}
	})
}

// TestNumber: integers are exact to 64 bits, 2^53±1 and 19-digit IDs
// included; other numbers are doubles only when the double is the number
// written, and never where CEL compares doubles with integers inexactly.
func TestNumber(t *testing.T) {
	tests := []struct {
		in   string
		want any // nil: no exact value
	}{
		{"0", int64(0)},
		{"-0", int64(0)},
		{"42", int64(42)},
		{"-7", int64(-7)},
		{"9007199254740991", int64(9007199254740991)},
		{"9007199254740992", int64(9007199254740992)},
		{"9007199254740993", int64(9007199254740993)},
		{"-9007199254740993", int64(-9007199254740993)},
		{"1234567890123456789", int64(1234567890123456789)},
		{"1234567890123456700", int64(1234567890123456700)},
		{"9223372036854775807", int64(9223372036854775807)},
		{"-9223372036854775808", int64(-9223372036854775808)},
		{"9223372036854775808", uint64(9223372036854775808)},
		{"18446744073709551615", uint64(18446744073709551615)},
		// integers written with a fraction or an exponent
		{"9007199254740993.0", int64(9007199254740993)},
		{"9.007199254740993e15", int64(9007199254740993)},
		{"1.0", 1.0},
		{"1e2", 100.0},
		{"1E+2", 100.0},
		// other numbers
		{"1.5", 1.5},
		{"1.50", 1.5},
		{"0.1", 0.1},
		{"-0.25", -0.25},
		{"0.0", 0.0},
		{"1e300", 1e300},
		{"1e-300", 1e-300},
		{"123456789012345678901234567890e10", nil},
		{"100000000000000000000", 1e20},
		// no exact value
		{"9007199254740993.5", nil},
		{"18446744073709551616", nil},
		{"18446744073709552000", nil}, // the double 2^64 is printed so
		{"-9223372036854775809", nil},
		{"1e400", nil},
		{"-1e400", nil},
		{"1e-400", nil},
		{"0.1000000000000000000001", nil},
		{"12345678901234567890123", nil},
	}
	for _, tt := range tests {
		got, ok := Number(tt.in)
		if tt.want == nil {
			if ok {
				t.Errorf("Number(%s) = %#v; want no exact value", tt.in, got)
			}
			continue
		}
		if !ok || got != tt.want {
			t.Errorf("Number(%s) = %#v, %v; want %#v", tt.in, got, ok, tt.want)
		}
	}
}

func TestDecode(t *testing.T) {
	v, err := Decode([]byte(`{"a":9007199254740993,"b":[1.5,{"c":1234567890123456789}],"s":"x"}`))
	want := map[string]any{"a": int64(9007199254740993), "b": []any{1.5, map[string]any{"c": int64(1234567890123456789)}}, "s": "x"}
	if err != nil || !reflect.DeepEqual(v, want) {
		t.Fatalf("Decode = %#v, %v; want %#v", v, err, want)
	}
	_, err = Decode([]byte(`{"ok":1,"list":[0,{"id":9007199254740993.5}]}`))
	var ne *NumberError
	if !errors.As(err, &ne) || ne.Path != "$.list[1].id" || ne.Literal != "9007199254740993.5" ||
		!strings.Contains(err.Error(), "$.list[1].id") || !strings.Contains(err.Error(), "send it as a string") {
		t.Fatalf("Decode of an inexact number: %v; want a *NumberError naming $.list[1].id", err)
	}
	var dup *DuplicateKeyError
	if _, err := Decode([]byte(`{"a":1,"a":2}`)); !errors.As(err, &dup) {
		t.Fatalf("Decode of a duplicate key: %v", err)
	}
}

// FuzzNumber: whatever Number accepts has the literal's value exactly (an
// integer) or is the double whose shortest form has it, and no double lies
// in [2^53, 2^64], where CEL compares doubles with integers inexactly.
func FuzzNumber(f *testing.F) {
	for _, s := range []string{"0", "-0", "1.5", "9007199254740993", "9007199254740993.0", "9.007199254740993e15", "1e2", "1e400",
		"18446744073709551615", "18446744073709551616", "18446744073709552000", "0.1", "1e-400", "-9223372036854775808", "123e-330"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		var n json.Number
		if json.Unmarshal([]byte(lit), &n) != nil || string(n) != lit || len(lit) > 400 {
			return // not one JSON number literal
		}
		v, ok := Number(lit)
		if !ok {
			return
		}
		want, okW := new(big.Rat).SetString(lit)
		if !okW {
			t.Fatalf("big.Rat cannot read %s", lit)
		}
		var got *big.Rat
		switch v := v.(type) {
		case int64:
			got = new(big.Rat).SetInt64(v)
		case uint64:
			got = new(big.Rat).SetInt(new(big.Int).SetUint64(v))
		case float64:
			if a := math.Abs(v); a >= 1<<53 && a <= 1<<64 {
				t.Fatalf("Number(%s) = %v, a double CEL compares inexactly with integers", lit, v)
			}
			got, _ = new(big.Rat).SetString(strconv.FormatFloat(v, 'g', -1, 64))
		default:
			t.Fatalf("Number(%s) = %T", lit, v)
		}
		if got.Cmp(want) != 0 {
			t.Fatalf("Number(%s) = %#v, another number", lit, v)
		}
	})
}
