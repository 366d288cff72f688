package pin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// diffContext is how many unchanged lines Diff shows around each change.
const diffContext = 3

// Diff shows how a new canonical definition differs from an old one, as a
// unified-style line diff of the indented JSON: "-" lines were removed, "+"
// lines added, and up to three unchanged lines ("  ") surround each change;
// "@@" separates distant changes. It is "" when they are equal.
//
// Every character outside printable ASCII is shown by its code point, as
// \uXXXX (\UXXXXXXXX above U+FFFF): a Cyrillic a (U+0430) in place of a
// Latin one, a zero-width space or a bidi override would otherwise look unchanged, or
// reorder the line. Since JSON writes a backslash in a string as "\\", an
// escape here always stands for one character.
func Diff(oldDef, newDef []byte) string {
	a, b := lines(oldDef), lines(newDef)
	ops := diffLines(a, b)
	changed := false
	for _, op := range ops {
		if op.kind != ' ' {
			changed = true
			break
		}
	}
	if !changed {
		return ""
	}
	// Keep the lines within diffContext of a change.
	keep := make([]bool, len(ops))
	for i, op := range ops {
		if op.kind == ' ' {
			continue
		}
		for j := max(0, i-diffContext); j <= min(len(ops)-1, i+diffContext); j++ {
			keep[j] = true
		}
	}
	var sb strings.Builder
	gap := false
	for i, op := range ops {
		if !keep[i] {
			gap = true
			continue
		}
		if gap && sb.Len() > 0 {
			sb.WriteString("@@\n")
		}
		gap = false
		sb.WriteByte(op.kind)
		sb.WriteByte(' ')
		sb.WriteString(op.line)
		sb.WriteByte('\n')
	}
	return sb.String()
}

// lines indents canonical JSON, one line per member, with every character
// outside printable ASCII escaped. The JSON is encoded afresh first: a
// definition read back from the pins file has "<" written as "\u003c"
// (the file is written with HTML escaping), which must not show as a change.
func lines(def []byte) []string {
	if len(bytes.TrimSpace(def)) == 0 {
		return nil
	}
	var buf bytes.Buffer
	var v any
	if json.Unmarshal(def, &v) == nil {
		if b, err := encode(v); err == nil {
			def = b
		}
	}
	if err := json.Indent(&buf, def, "", "  "); err != nil {
		buf.Reset()
		buf.Write(def)
	}
	out := strings.Split(buf.String(), "\n")
	for i, l := range out {
		out[i] = escapeNonASCII(l)
	}
	return out
}

// escapeNonASCII writes every character outside printable ASCII (and the
// bytes of invalid UTF-8) as its code point.
func escapeNonASCII(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7F {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&sb, "\\x%02x", s[i]) // not UTF-8: the byte
		case r >= 0x20 && r < 0x7F:
			sb.WriteRune(r)
		case r <= 0xFFFF:
			fmt.Fprintf(&sb, "\\u%04x", r)
		default:
			fmt.Fprintf(&sb, "\\U%08x", r)
		}
		i += size
	}
	return sb.String()
}

type diffOp struct {
	kind byte // ' ', '-', '+'
	line string
}

// diffLines is a longest-common-subsequence line diff (definitions are a
// few hundred lines; huge ones are shown whole).
func diffLines(a, b []string) []diffOp {
	n, m := len(a), len(b)
	if n*m > 4_000_000 {
		// Too large to align cheaply: show all of both.
		ops := make([]diffOp, 0, n+m)
		for _, l := range a {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, diffOp{'+', l})
		}
		return ops
	}
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			ops = append(ops, diffOp{'-', a[i]})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, diffOp{'-', a[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, diffOp{'+', b[j]})
	}
	return ops
}
