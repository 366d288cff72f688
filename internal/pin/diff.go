package pin

import (
	"bytes"
	"encoding/json"
	"strings"
)

// diffContext is how many unchanged lines Diff shows around each change.
const diffContext = 3

// Diff shows how a new canonical definition differs from an old one, as a
// unified-style line diff of the indented JSON: "-" lines were removed, "+"
// lines added, and up to three unchanged lines ("  ") surround each change;
// "@@" separates distant changes. It is "" when they are equal.
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

// lines indents canonical JSON, one line per member.
func lines(def []byte) []string {
	if len(bytes.TrimSpace(def)) == 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, def, "", "  "); err != nil {
		return strings.Split(string(def), "\n")
	}
	return strings.Split(buf.String(), "\n")
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
