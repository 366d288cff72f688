package policy

import (
	"fmt"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// Rule chains: consecutive rules evaluated as one CEL program.
//
// Evaluating a rule has a fixed cost beside its condition (an execution
// frame, its release, the conversion of the result), which for short
// conditions is a good part of the whole. A run of consecutive rules that
// can match any tool (not restricted by the index), have no comprehension
// (so no context to check) and a static cost bound (so they can run
// untracked) is compiled a second time as one conditional expression,
//
//	(c0) ? 0 : (c1) ? 1 : ... : -1
//
// which yields the position of the first rule whose condition is true, or
// -1. CEL's conditional evaluates its condition first and stops there when
// it is an error, so the chain evaluates exactly the conditions the loop
// over the rules would, in the same order, and matches where it would. A
// chain is used only when the input's size is within every one of its
// rules' bounds (each rule alone is then within the cost limit, as
// untracked evaluation requires); when it yields anything but a position
// (an error, a panic), the rules are evaluated again one by one, which
// names the failing rule and says why exactly as before.

// Chains are at most maxChainRules rules and their text at most
// ruleMaxExprBytes, the parser's limit.
const maxChainRules = 32

type ruleChain struct {
	prg cel.Program
	// n is the number of rules, from the one holding the chain.
	n         int
	sizeBound uint64
	// shared counts the argument reads the chain makes once for all its
	// rules (see sharedArg).
	shared int
}

// chainable reports whether a rule can be part of a chain.
func (r *compiledRule) chainable() bool {
	return !r.restricted && !r.loops && r.fast != nil
}

// buildChains gives the first rule of each run of chainable rules its
// chain. A run whose chain does not compile (it should) is simply left to
// the loop.
func buildChains(env *cel.Env, rules []compiledRule) {
	for i := 0; i < len(rules); {
		if !rules[i].chainable() {
			i++
			continue
		}
		j, size := i, 0
		for j < len(rules) && j-i < maxChainRules && rules[j].chainable() {
			// Parentheses, newlines (a condition may end in a comment)
			// and the branches: well under 64 bytes per rule.
			if size+len(rules[j].When)+64 > ruleMaxExprBytes {
				break
			}
			size += len(rules[j].When) + 64
			j++
		}
		if j-i >= 2 {
			if c, ok := compileChain(env, rules[i:j]); ok {
				rules[i].chain = c
			}
		}
		i = max(j, i+1)
	}
}

func compileChain(env *cel.Env, rules []compiledRule) (*ruleChain, bool) {
	var b strings.Builder
	bound := rules[0].sizeBound
	for k, r := range rules {
		b.WriteString("(\n")
		b.WriteString(r.When)
		b.WriteString("\n) ? ")
		b.WriteString(strconv.Itoa(k))
		b.WriteString(" : ")
		bound = min(bound, r.sizeBound)
	}
	b.WriteString("-1")
	ast, iss := env.Compile(b.String())
	if iss.Err() != nil || !ast.OutputType().IsExactType(cel.IntType) {
		return nil, false
	}
	// Read each optional argument the rules share once (see sharedArg);
	// a chain that cannot be so rewritten is used as written.
	passes := make([]any, maxSharedArgs)
	for i := range passes {
		passes[i] = &sharedArgOptimizer{pass: i}
	}
	shared := 0
	if opt, err := cel.NewStaticOptimizer(passes...); err == nil {
		if a, iss := opt.Optimize(env, ast); iss.Err() == nil && a.OutputType().IsExactType(cel.IntType) {
			ast = a
			shared = len(celast.MatchDescendants(celast.NavigateAST(a.NativeRep()), celast.KindMatcher(celast.ComprehensionKind)))
		}
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, false
	}
	return &ruleChain{prg: prg, n: len(rules), sizeBound: bound, shared: shared}, true
}

// eval returns the position in the chain of the first rule that matched,
// -1 when none did, and ok false when the rules must be evaluated one by
// one instead.
func (c *ruleChain) eval(vars *ruleActivation) (k int, ok bool) {
	defer func() {
		if recover() != nil {
			k, ok = 0, false
		}
	}()
	out, _, err := c.prg.Eval(vars)
	if err != nil {
		return 0, false
	}
	n, isInt := out.(types.Int)
	if !isInt || n < -1 || int(n) >= c.n {
		return 0, false
	}
	return int(n), true
}

// Shared argument reads. The conditions of a chain often read the same
// optional argument with the same default, args.?path.orValue(""), which
// cel-go evaluates in every rule (an optional allocated each time). Such
// a read cannot fail and has no effect: an optional selection on the
// arguments' map yields an optional, orValue its value or the default.
// So the chain reads it once, first, into a variable (cel.bind) the
// conditions use instead: every condition sees the same value, evaluated
// in the same order, with the same outcome. Only these reads are shared;
// anything that can fail (args.path, a missing key) is left in place.
const maxSharedArgs = 8

// sharedArg reports whether e is args.?NAME.orValue(LITERAL), and a key
// naming the read.
func sharedArg(e celast.Expr) (key string, name string, def ref.Val, ok bool) {
	if e.Kind() != celast.CallKind {
		return "", "", nil, false
	}
	call := e.AsCall()
	if call.FunctionName() != "orValue" || !call.IsMemberFunction() || len(call.Args()) != 1 || call.Args()[0].Kind() != celast.LiteralKind {
		return "", "", nil, false
	}
	sel := call.Target()
	if sel.Kind() != celast.CallKind || sel.AsCall().FunctionName() != operators.OptSelect || len(sel.AsCall().Args()) != 2 {
		return "", "", nil, false
	}
	operand, field := sel.AsCall().Args()[0], sel.AsCall().Args()[1]
	if operand.Kind() != celast.IdentKind || operand.AsIdent() != "args" || field.Kind() != celast.LiteralKind {
		return "", "", nil, false
	}
	f, isString := field.AsLiteral().(types.String)
	if !isString {
		return "", "", nil, false
	}
	def = call.Args()[0].AsLiteral()
	return fmt.Sprintf("%q %T %v", string(f), def, def.Value()), string(f), def, true
}

// sharedArgOptimizer binds the first argument read that occurs at least
// twice in the chain and not yet bound; one per pass, as binding replaces
// the expression the matches were found in.
type sharedArgOptimizer struct{ pass int }

func (o *sharedArgOptimizer) Optimize(ctx *cel.OptimizerContext, a *celast.AST) *celast.AST {
	root := celast.NavigateAST(a)
	groups := map[string][]celast.NavigableExpr{}
	var order []string
	for _, m := range celast.MatchDescendants(root, func(e celast.NavigableExpr) bool {
		_, _, _, ok := sharedArg(e)
		return ok
	}) {
		key, _, _, _ := sharedArg(m)
		if len(groups[key]) == 0 {
			order = append(order, key)
		}
		groups[key] = append(groups[key], m)
	}
	for _, key := range order {
		ms := groups[key]
		if len(ms) < 2 {
			continue
		}
		_, name, def, _ := sharedArg(ms[0])
		alias := fmt.Sprintf("@airlock_arg%d", o.pass)
		init := ctx.NewMemberCall("orValue", ctx.NewCall(operators.OptSelect, ctx.NewIdent("args"), ctx.NewLiteral(types.String(name))), ctx.NewLiteral(def))
		for _, m := range ms {
			ctx.UpdateExpr(m, ctx.NewIdent(alias))
		}
		bound, macro := ctx.NewBindMacro(root.ID(), alias, init, root)
		ctx.UpdateExpr(root, bound)
		ctx.SetMacroCall(root.ID(), macro)
		return a
	}
	return a
}
