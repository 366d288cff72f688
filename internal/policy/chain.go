package policy

import (
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
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
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, false
	}
	return &ruleChain{prg: prg, n: len(rules), sizeBound: bound}, true
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
