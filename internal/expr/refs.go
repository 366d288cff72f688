package expr

import (
	"slices"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// refs records how an expression uses its variables, for the checks a
// loader makes beyond type-checking: a compensation that reads before needs
// a capture, and a plan step may read only earlier steps and declared vars.
type refs struct {
	// idents counts the uses of each variable name.
	idents map[string]int
	// selects counts the uses that select a constant field or key
	// (steps.a, steps["a"], steps.?a, steps[?"a"]); fields lists those
	// names, sorted and without repeats.
	selects map[string]int
	fields  map[string][]string
}

func collectRefs(a *celast.AST) refs {
	r := refs{idents: map[string]int{}, selects: map[string]int{}, fields: map[string][]string{}}
	if a == nil {
		return r
	}
	// A comprehension variable that shadows a top-level one (steps.map(s,
	// …) is fine, [1].map(steps, …) is not) is counted as a use of the
	// variable: a false alarm in a loader is better than a missed reference.
	celast.PreOrderVisit(a.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.IdentKind:
			r.idents[e.AsIdent()]++
		case celast.SelectKind:
			s := e.AsSelect()
			if op := s.Operand(); op.Kind() == celast.IdentKind {
				r.field(op.AsIdent(), s.FieldName())
			}
		case celast.CallKind:
			c := e.AsCall()
			switch c.FunctionName() {
			case operators.Index, operators.OptIndex, operators.OptSelect:
			default:
				return
			}
			args := c.Args()
			if len(args) != 2 || args[0].Kind() != celast.IdentKind || args[1].Kind() != celast.LiteralKind {
				return
			}
			if key, ok := args[1].AsLiteral().(types.String); ok {
				r.field(args[0].AsIdent(), string(key))
			}
		}
	}))
	for name, fs := range r.fields {
		slices.Sort(fs)
		r.fields[name] = slices.Compact(fs)
	}
	return r
}

func (r refs) field(variable, name string) {
	r.selects[variable]++
	r.fields[variable] = append(r.fields[variable], name)
}
