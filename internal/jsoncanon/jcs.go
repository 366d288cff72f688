package jsoncanon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// JCS encodes v in the JSON Canonicalization Scheme of RFC 8785: object
// members sorted by the UTF-16 code units of their names, no insignificant
// space, strings with only the escapes RFC 8785 §3.2.2.2 names (\b \t \n
// \f \r \" \\ and \u00XX, lowercase, for the other control characters),
// numbers in the shortest ECMAScript form (§3.2.2.3).
//
// v is what Decode gives (map[string]any, []any, string, bool, nil,
// int64, uint64, float64) or json.Number. It differs from Canonical, which
// keeps numbers as written, sorts keys by UTF-8 bytes and escapes U+2028
// and U+2029 as encoding/json does: a signature over JCS bytes verifies in
// any RFC 8785 implementation. A number that no IEEE 754 double holds
// exactly (an integer beyond 2^53) is an error rather than rounded, and so
// is a string that is not valid UTF-8.
func JCS(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := jcs(&buf, v, "$"); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func jcs(buf *bytes.Buffer, v any, path string) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(x))
	case string:
		return jcsString(buf, x, path)
	case json.Number:
		n, ok := Number(string(x))
		if !ok {
			return &NumberError{Path: path, Literal: string(x)}
		}
		return jcs(buf, n, path)
	case int64:
		if x > 1<<53 || x < -(1<<53) {
			return fmt.Errorf("the integer %d at %s has no exact IEEE 754 double, which RFC 8785 numbers are; write it as a string", x, path)
		}
		buf.WriteString(strconv.FormatInt(x, 10))
	case int:
		return jcs(buf, int64(x), path)
	case uint64:
		if x > 1<<53 {
			return fmt.Errorf("the integer %d at %s has no exact IEEE 754 double, which RFC 8785 numbers are; write it as a string", x, path)
		}
		buf.WriteString(strconv.FormatUint(x, 10))
	case float64:
		s, err := es6Number(x)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		buf.WriteString(s)
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := jcs(buf, e, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := jcsString(buf, k, path); err != nil {
				return err
			}
			buf.WriteByte(':')
			if err := jcs(buf, x[k], path+member(k)); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return fmt.Errorf("%s: a %T is not a JSON value JCS encodes", path, v)
	}
	return nil
}

// compareUTF16 orders strings by their UTF-16 code units (RFC 8785
// §3.2.3), which differs from UTF-8 byte order for characters above
// U+FFFF against those in U+E000–U+FFFF.
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

func jcsString(buf *bytes.Buffer, s, path string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s: a string that is not valid UTF-8", path)
	}
	buf.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			buf.WriteString(`\"`)
		case '\\':
			buf.WriteString(`\\`)
		case '\b':
			buf.WriteString(`\b`)
		case '\f':
			buf.WriteString(`\f`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		case '\t':
			buf.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(buf, `\u%04x`, r)
			} else {
				buf.WriteRune(r)
			}
		}
	}
	buf.WriteByte('"')
	return nil
}

// es6Number is ECMAScript's Number.prototype.toString for a finite double
// (RFC 8785 §3.2.2.3): integers and numbers in [1e-6, 1e21) in plain
// decimals, others as d.ddde±x, each with the fewest digits that read
// back as the same double.
func es6Number(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("%v is not a JSON number", f)
	}
	if f == 0 {
		return "0", nil // -0 too
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // 1e+21, 1.5e-07
	mant, exp, _ := strings.Cut(s, "e")
	sign := exp[0]
	digits := exp[1:]
	for len(digits) > 1 && digits[0] == '0' {
		digits = digits[1:]
	}
	return mant + "e" + string(sign) + digits, nil
}
