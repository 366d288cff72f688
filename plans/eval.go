package plans

import (
	"encoding/json"
	"fmt"

	"github.com/airlock-run/airlock/internal/expr"
)

// StepArgs evaluates the arguments of step i, and returns them as the JSON
// object to pass to the tool ({} when the step has none). vars is what the
// expressions see (kind expr.Step): "steps" (step id -> expr.StepState, or
// a map with result, outcome and reason), "vars" (ResolveVars) and "task"
// (expr.Task, or a map with id and plan).
//
// The expressions are compiled on first use and cached (by expr), so a
// plan decoded from a workflow input needs no preparation. Evaluation is
// deterministic except for expr's timeout, which only a runaway expression
// reaches; inside a workflow, call this from a (local) activity.
func (p *Plan) StepArgs(i int, vars map[string]any) (json.RawMessage, error) {
	s, err := p.step(i)
	if err != nil {
		return nil, err
	}
	if len(s.Args) == 0 {
		return json.RawMessage(`{}`), nil
	}
	tpl, err := expr.CompileTemplate(expr.Step, map[string]any(s.Args))
	if err != nil {
		return nil, err
	}
	v, err := tpl.Eval(vars)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// StepWhen evaluates the when of step i over vars (as StepArgs); a step
// without when runs, so that is true.
func (p *Plan) StepWhen(i int, vars map[string]any) (bool, error) {
	s, err := p.step(i)
	if err != nil {
		return false, err
	}
	if s.When == "" {
		return true, nil
	}
	src := s.When
	if inner, ok := expr.IsPlaceholder(src); ok {
		src = inner
	}
	prg, err := expr.CompileBool(expr.Step, src)
	if err != nil {
		return false, err
	}
	return prg.EvalBool(vars)
}

func (p *Plan) step(i int) (*Step, error) {
	if p == nil || i < 0 || i >= len(p.Steps) {
		return nil, fmt.Errorf("no step %d in the plan", i)
	}
	return &p.Steps[i], nil
}
