package policy

import (
	"slices"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/operators"
)

// A rule is evaluated without runtime cost tracking when its cost is
// bounded before it runs. When a rule compiles, cel-go's cost estimator
// computes the most the rule can cost if no string, list or map it reads
// (a field of principal, tool or task, args or anything inside args) has a
// size over a bound B; the rule keeps the largest B of a ladder for which
// that estimate is within ruleCostLimit. Each decision measures the largest
// size its input can present (inputSizeBound) and evaluates a rule without
// tracking only when that size is within the rule's B. The runtime tracker
// could then never reach the limit, so both programs decide alike; any
// other input, and any rule the estimator cannot bound (nested
// comprehensions over args, a string search of one argument in another),
// is evaluated with the tracker and its limit as before.

// Bounds tried for a rule, as powers of two: from 256 up to 4 MiB, which is
// above the largest size arguments of MaxArgBytesLimit can present
// (argSizeFactor times 1 MiB).
const (
	minSizeBoundLog2 = 8
	maxSizeBoundLog2 = 22
)

// argSizeFactor bounds the size of any value decoded from JSON arguments by
// a multiple of their length in bytes. A decoded string has at most 3 bytes
// per byte of JSON (an invalid byte becomes U+FFFD), and at most one code
// point per byte; a list or an object has fewer elements than bytes.
const argSizeFactor = 3

// staticSizeBound returns the largest bound B (see above) for which the
// estimated cost of the rule is within ruleCostLimit, or 0 when there is
// none, so that the rule is always evaluated with cost tracking.
func staticSizeBound(env *cel.Env, ast *cel.Ast) uint64 {
	est := sizeEstimator{roots: unshadowedVariables(ast.NativeRep())}
	fits := func(log2 int) bool {
		est.max = 1 << log2
		c, err := env.EstimateCost(ast, est)
		return err == nil && c.Max <= ruleCostLimit
	}
	// The estimate grows with the bound, so the largest fitting bound is
	// found by bisection; the bound returned has itself been checked.
	lo, hi := minSizeBoundLog2, maxSizeBoundLog2
	if !fits(lo) {
		return 0
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return 1 << lo
}

// ruleVariables are the variables of a rule, the roots of everything it
// reads from the call.
var ruleVariables = []string{"principal", "tool", "task", "args", "findings"}

// sizeEstimator tells cel-go's estimator that every value reachable from a
// variable (a field, an element, a key, a value of a map) has a size of at
// most max. It leaves the sizes of computed values (concatenations, list
// literals) and the costs of functions to cel-go's own model, the one its
// runtime tracker applies.
type sizeEstimator struct {
	max uint64
	// roots are the variables whose names no comprehension of the rule
	// rebinds, so that an identifier with one of these names is the
	// variable.
	roots []string
}

func (e sizeEstimator) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	inner := cost.SizeEstimate{Max: e.max}
	sz := cost.SizeEstimate{Max: e.max, Key: &inner, Elem: &inner}
	if len(n.Path()) > 0 {
		return &sz
	}
	// cel-go records no path for an optional field selection (args.?path),
	// so the size of the value it may hold would be unknown, and so would
	// the cost of anything done with args.?path.orValue(""). The value is
	// read from a variable all the same.
	if x := n.Expr(); x != nil && x.Kind() == celast.CallKind && x.AsCall().FunctionName() == operators.OptSelect {
		if root := chainRoot(x); root.Kind() == celast.IdentKind && slices.Contains(e.roots, root.AsIdent()) {
			return &cost.SizeEstimate{Min: 1, Max: 1 + e.max, Elem: &sz}
		}
	}
	return nil
}

func (e sizeEstimator) EstimateCallCost(function, overload string, _ *cost.AstNode, _ []cost.AstNode) *cost.CallEstimate {
	if function == "paths" && overload == pathsOverload {
		// paths(tool, args) costs one at run time (a function without a
		// cost of its own) and lists strings taken from args: fewer than
		// its bytes, each one of its values.
		inner := cost.SizeEstimate{Max: e.max}
		return &cost.CallEstimate{CostEstimate: cost.CostEstimate{Min: 1, Max: 1}, ResultSize: &cost.SizeEstimate{Max: e.max, Elem: &inner}}
	}
	return nil
}

// chainRoot is the expression a chain of selections and index operations
// (a.b, a[k], a.?b, a[?k]) starts from.
func chainRoot(x celast.Expr) celast.Expr {
	for {
		switch x.Kind() {
		case celast.SelectKind:
			x = x.AsSelect().Operand()
		case celast.CallKind:
			switch c := x.AsCall(); c.FunctionName() {
			case operators.Index, operators.OptIndex, operators.OptSelect:
				x = c.Args()[0]
			default:
				return x
			}
		default:
			return x
		}
	}
}

// unshadowedVariables are the ruleVariables that no comprehension of a
// rebinds (["a"].exists(args, ...) is valid CEL).
func unshadowedVariables(a *celast.AST) []string {
	bound := map[string]bool{}
	for _, c := range celast.MatchDescendants(celast.NavigateAST(a), celast.KindMatcher(celast.ComprehensionKind)) {
		comp := c.AsComprehension()
		bound[comp.IterVar()], bound[comp.IterVar2()], bound[comp.AccuVar()] = true, true, true
	}
	var roots []string
	for _, v := range ruleVariables {
		if !bound[v] {
			roots = append(roots, v)
		}
	}
	return roots
}

// inputSizeBound is the largest size any value the rules can read has in
// this call: a string's length in bytes (at least its size in code points)
// or a list's length, for the fields of principal, tool and task, and a
// bound derived from the arguments' length for args.
func inputSizeBound(in Input, facts toolFacts) uint64 {
	n := argSizeFactor * len(in.Args)
	grow := func(ss ...string) {
		for _, s := range ss {
			n = max(n, len(s))
		}
	}
	grow(in.Principal.Name, string(in.Principal.DataLevel), in.Principal.SlackUserID,
		in.Tool.Name, in.Tool.Server, in.Tool.Upstream, string(facts.level), string(facts.risk),
		in.Task.ID)
	var egress []string
	if l := in.Task.Labels; l != nil {
		grow(l.ReadLevel)
		egress = l.Egress
	}
	for _, l := range [][]string{in.Principal.Roles, in.Principal.Permissions, facts.sideEffects, facts.perms, facts.pathArgs, egress} {
		n = max(n, len(l))
		grow(l...)
	}
	n = max(n, len(in.Findings), 4) // a finding is a map of four
	for _, f := range in.Findings {
		grow(f.Rule, f.Path, f.Action, f.Where)
	}
	return uint64(n)
}
