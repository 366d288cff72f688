package redact

import (
	"fmt"
	"strings"
	"unicode"
)

// Visible escapes control and invisible formatting characters (ANSI
// escapes, bidi overrides, zero-width characters, line and paragraph
// separators) as \uXXXX, so text from agents and tools cannot rewrite a
// terminal or hide part of itself. Newlines and tabs stay.
func Visible(s string) string { return visible(s, true) }

// VisibleLine is Visible for text that must stay on one line: newlines are
// escaped too. Tabs stay.
func VisibleLine(s string) string { return visible(s, false) }

func visible(s string, newlines bool) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n' && newlines:
			b.WriteRune(r)
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) || r == unicode.ReplacementChar:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
