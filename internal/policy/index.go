package policy

import (
	"slices"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
)

// The rule index: Decide evaluates only the rules that can match the
// called tool, in their configured order.
//
// A rule can be restricted to some tools by the term its condition
// evaluates first: the whole condition, or the first operand of a chain of
// &&. When that term is
//
//	tool.name == "x"    "x" == tool.name    tool.name in ["x", "y"]
//	tool.name.startsWith("x")
//
// or an || of such terms, then for any other tool that term is false, and
// CEL's && stops at its first false operand: the rest of the condition is
// not evaluated, so it can neither match, fail, run out of cost nor time
// out. Skipping the rule is then exactly what evaluating it would do. A
// restriction later in a chain (args.a.contains(args.b) && tool.name ==
// "y") is not used: what comes before it is evaluated first for any tool,
// and while && turns a failure of it into false, running out of cost or
// time stops the whole evaluation, which then denies.

// toolNames are the tool names a rule can match: one of exact, or any name
// that starts with one of prefixes.
type toolNames struct {
	exact    []string
	prefixes []string
}

// ruleToolNames returns the tool names a rule whose condition is e can
// match; ok is false when it can match any tool.
func ruleToolNames(e celast.Expr) (names toolNames, ok bool) {
	if e.Kind() != celast.CallKind {
		return toolNames{}, false
	}
	call := e.AsCall()
	args := call.Args()
	switch call.FunctionName() {
	case operators.LogicalAnd:
		return ruleToolNames(args[0])
	case operators.LogicalOr:
		l, lok := ruleToolNames(args[0])
		r, rok := ruleToolNames(args[1])
		if !lok || !rok {
			return toolNames{}, false
		}
		return toolNames{exact: slices.Concat(l.exact, r.exact), prefixes: slices.Concat(l.prefixes, r.prefixes)}, true
	case operators.Equals:
		for _, side := range [2][2]celast.Expr{{args[0], args[1]}, {args[1], args[0]}} {
			if s, ok := stringLiteral(side[1]); ok && isToolName(side[0]) {
				return toolNames{exact: []string{s}}, true
			}
		}
	case operators.In:
		if isToolName(args[0]) && args[1].Kind() == celast.ListKind {
			list := args[1].AsList()
			if len(list.OptionalIndices()) > 0 {
				return toolNames{}, false
			}
			for _, el := range list.Elements() {
				s, ok := stringLiteral(el)
				if !ok {
					return toolNames{}, false
				}
				names.exact = append(names.exact, s)
			}
			return names, true
		}
	case overloads.StartsWith:
		if call.IsMemberFunction() && isToolName(call.Target()) && len(args) == 1 {
			if s, ok := stringLiteral(args[0]); ok {
				return toolNames{prefixes: []string{s}}, true
			}
		}
	}
	return toolNames{}, false
}

// isToolName reports whether e is tool.name. It is called only outside
// comprehensions, where tool is the variable.
func isToolName(e celast.Expr) bool {
	if e.Kind() != celast.SelectKind {
		return false
	}
	sel := e.AsSelect()
	op := sel.Operand()
	return !sel.IsTestOnly() && sel.FieldName() == "name" && op.Kind() == celast.IdentKind && op.AsIdent() == "tool"
}

func stringLiteral(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// ruleIndex lists the rules (by position) each tool can need.
type ruleIndex struct {
	// general are the rules that can match any tool.
	general []int
	// byName are the rules restricted to names including the key.
	byName map[string][]int
	// prefixed are the rules restricted to names with some prefixes.
	prefixed []prefixedRule
}

type prefixedRule struct {
	prefixes []string
	rule     int
}

func newRuleIndex(rules []compiledRule) ruleIndex {
	x := ruleIndex{byName: map[string][]int{}}
	for i, r := range rules {
		if !r.restricted {
			x.general = append(x.general, i)
			continue
		}
		for _, n := range r.tools.exact {
			// A rule naming a tool twice is listed once.
			if l := x.byName[n]; len(l) == 0 || l[len(l)-1] != i {
				x.byName[n] = append(l, i)
			}
		}
		if len(r.tools.prefixes) > 0 {
			x.prefixed = append(x.prefixed, prefixedRule{prefixes: r.tools.prefixes, rule: i})
		}
	}
	return x
}

// candidates returns the positions of the rules that can match the tool
// named name, in ascending order. It may return a slice of the index
// itself, which the caller must not modify, or append to buf.
func (x *ruleIndex) candidates(name string, buf []int) []int {
	named := x.byName[name]
	var pbuf [16]int
	prefixed := pbuf[:0]
	for _, pr := range x.prefixed {
		if slices.ContainsFunc(pr.prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			prefixed = append(prefixed, pr.rule)
		}
	}
	switch {
	case len(named) == 0 && len(prefixed) == 0:
		return x.general
	case len(x.general) == 0 && len(prefixed) == 0:
		return named
	}
	// Merge the three ascending lists; a rule restricted both by name and
	// by prefix may be in two of them.
	out := buf[:0]
	lists := [3][]int{x.general, named, prefixed}
	for {
		next, from := -1, -1
		for l, list := range lists {
			if len(list) > 0 && (next < 0 || list[0] < next) {
				next, from = list[0], l
			}
		}
		if from < 0 {
			return out
		}
		for l := range lists {
			if len(lists[l]) > 0 && lists[l][0] == next {
				lists[l] = lists[l][1:]
			}
		}
		out = append(out, next)
	}
}
