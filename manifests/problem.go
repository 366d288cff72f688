package manifests

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a manifest or configuration file, located
// as precisely as the loader can: the file, the line (0 when unknown, e.g.
// for a manifest built in code) and the field path ("tools.write_file.risk").
// Msg says what is wrong and how to fix it.
type Problem struct {
	File  string
	Line  int
	Field string
	Msg   string
}

// Error formats the problem as "file:line: field: msg", the shape editors and
// CI annotators recognise; parts that are unknown are left out.
func (p Problem) Error() string {
	var b strings.Builder
	switch {
	case p.File != "" && p.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", p.File, p.Line)
	case p.File != "":
		b.WriteString(p.File + ": ")
	case p.Line > 0:
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems is every problem found in one load. It is the error the loaders
// return, so a caller can print all of them at once instead of fixing one
// per run; use errors.As to get at the list.
type Problems []Problem

var _ error = Problems(nil)

// Error returns the problems one per line.
func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Error()
	}
	return strings.Join(s, "\n")
}
