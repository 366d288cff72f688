package timeline

import (
	"strconv"
	"strings"

	"github.com/airlock-run/airlock/internal/redact"
)

// maskSource masks, in a program's source, the string literals passed at
// a redact path: for each call of a tool with redact paths (written
// module.function(...), attempt(module.function, ...) or
// call("tool", ...)), the literals in the value of each keyword argument
// named like a path's first member. It reads the source with a small
// lexer (strings, comments, brackets), not a parser: it masks a literal
// the program passes straight to the tool; a value built elsewhere in the
// program is masked only where the history recorded it (MaskValues).
// paths maps module.function and the exposed name to the tool's paths.
// It also returns the values of the literals it masked, to be masked
// where a call's result or the program's output echoes them.
func maskSource(src string, paths map[string][]string) (string, []string) {
	if len(paths) == 0 {
		return src, nil
	}
	toks := lex(src)
	// group[i] is the index of the bracket closing toks[i] (an opener).
	closing := make([]int, len(toks))
	var stack []int
	for i, t := range toks {
		closing[i] = -1
		switch t.text {
		case "(", "[", "{":
			stack = append(stack, i)
		case ")", "]", "}":
			if n := len(stack); n > 0 {
				closing[stack[n-1]] = i
				stack = stack[:n-1]
			}
		}
	}
	masked := map[int]bool{} // token indexes of literals to mask
	groupFor := func(open int, rp []string) {
		if open < 0 || open >= len(toks) || toks[open].text != "(" || closing[open] < 0 {
			return
		}
		maskKeywords(toks, closing, open, rp, masked)
	}
	for i, t := range toks {
		switch {
		case t.kind == tokIdent && i+2 < len(toks) && toks[i+1].text == "." && toks[i+2].kind == tokIdent:
			rp := paths[t.text+"."+toks[i+2].text]
			if rp == nil {
				continue
			}
			groupFor(i+3, rp) // module.function(...)
			if i >= 2 && toks[i-1].text == "(" && toks[i-2].text == "attempt" {
				groupFor(i-1, rp) // attempt(module.function, ...)
			}
		case t.text == "call" && i+2 < len(toks) && toks[i+1].text == "(" && toks[i+2].kind == tokString:
			if name, err := strconv.Unquote(toks[i+2].text); err == nil && paths[name] != nil {
				groupFor(i+1, paths[name])
			}
		}
	}
	if len(masked) == 0 {
		return src, nil
	}
	var b strings.Builder
	var values []string
	last := 0
	for i, t := range toks {
		if masked[i] {
			b.WriteString(src[last:t.start])
			b.WriteString(strconv.Quote(redact.Mask))
			last = t.end
			values = append(values, literalValue(t.text))
		}
	}
	b.WriteString(src[last:])
	return b.String(), values
}

// literalValue is the value of a string literal: exact for a plain
// double-quoted one, its text between the quotes otherwise (what a tool
// would echo back, near enough to mask).
func literalValue(lit string) string {
	if v, err := strconv.Unquote(lit); err == nil && lit[0] == '"' {
		return v
	}
	lit = strings.TrimLeft(lit, "rRbB")
	if len(lit) >= 6 && (strings.HasPrefix(lit, strings.Repeat(`"`, 3)) || strings.HasPrefix(lit, strings.Repeat("'", 3))) {
		return lit[3 : len(lit)-3]
	}
	if len(lit) >= 2 {
		return lit[1 : len(lit)-1]
	}
	return lit
}

// maskKeywords marks the string literals in the values of the keyword
// arguments of the call group opened at open whose names are a path's
// first member.
func maskKeywords(toks []token, closing []int, open int, rp []string, masked map[int]bool) {
	names := map[string]bool{}
	for _, p := range rp {
		first, _, _ := strings.Cut(strings.TrimSpace(p), ".")
		names[first] = true
	}
	end := closing[open]
	for i := open + 1; i < end; i++ {
		if o := closing[i]; o >= 0 {
			i = o // skip nested groups: only this call's own keywords
			continue
		}
		if !(toks[i].kind == tokIdent && names[toks[i].text] && i+1 < end && toks[i+1].text == "=") {
			continue
		}
		for j := i + 2; j < end; j++ {
			if toks[j].text == "," {
				i = j
				break
			}
			if toks[j].kind == tokString {
				masked[j] = true
			}
			if o := closing[j]; o >= 0 {
				for k := j + 1; k < o; k++ {
					if toks[k].kind == tokString && toks[k+1].text != ":" { // a dict's key stays
						masked[k] = true
					}
				}
				j = o
			}
			i = j
		}
	}
}

type tokKind int

const (
	tokOther tokKind = iota
	tokIdent
	tokString
)

type token struct {
	kind       tokKind
	text       string
	start, end int
}

// lex splits Starlark source into identifiers, string literals (with
// their prefix and quotes) and single punctuation characters, skipping
// spaces and comments. Text it cannot read (an unterminated string) ends
// the tokens.
func lex(src string) []token {
	var out []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\\':
			i++
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || (isPrefix(c) && stringAfterPrefix(src, i)):
			j := i
			for j < len(src) && isPrefix(src[j]) {
				j++
			}
			end := stringEnd(src, j)
			if end < 0 {
				return out
			}
			out = append(out, token{kind: tokString, text: src[i:end], start: i, end: end})
			i = end
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80:
			j := i
			for j < len(src) && (src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9' || src[j] >= 0x80) {
				j++
			}
			out = append(out, token{kind: tokIdent, text: src[i:j], start: i, end: j})
			i = j
		default:
			kind := tokOther
			if c == '=' && i+1 < len(src) && src[i+1] == '=' { // ==, not a keyword's =
				out = append(out, token{kind: kind, text: "==", start: i, end: i + 2})
				i += 2
				continue
			}
			out = append(out, token{kind: kind, text: src[i : i+1], start: i, end: i + 1})
			i++
		}
	}
	return out
}

func isPrefix(c byte) bool { return c == 'r' || c == 'R' || c == 'b' || c == 'B' }

// stringAfterPrefix: src[i:] is a string prefix (r, b, rb, br) and a quote.
func stringAfterPrefix(src string, i int) bool {
	for n := 0; n < 2 && i < len(src) && isPrefix(src[i]); n++ {
		i++
	}
	return i < len(src) && (src[i] == '"' || src[i] == '\'')
}

// stringEnd is the index after the string literal whose quote is at
// src[i], or -1 when it does not end.
func stringEnd(src string, i int) int {
	q := src[i]
	triple := strings.HasPrefix(src[i:], strings.Repeat(string(q), 3))
	j := i + 1
	if triple {
		j = i + 3
	}
	for j < len(src) {
		switch {
		case src[j] == '\\':
			j += 2
		case triple && strings.HasPrefix(src[j:], strings.Repeat(string(q), 3)):
			return j + 3
		case !triple && src[j] == q:
			return j + 1
		case !triple && src[j] == '\n':
			return -1
		default:
			j++
		}
	}
	return -1
}
