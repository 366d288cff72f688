package activities

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/expr"
	"github.com/airlock-run/airlock/plans"
)

// PrepareStep evaluates a step against the results so far. Evaluation
// errors are the step's failure (Error), not the activity's.
func (a *Activities) PrepareStep(_ context.Context, in api.StepInput) (api.StepOutput, error) {
	steps := map[string]any{}
	for id, r := range in.Results {
		steps[id] = map[string]any{"outcome": r.Outcome, "reason": r.Reason, "result": expr.ResultValue(r.Result)}
	}
	state := map[string]any{}
	if v, err := expr.JSONValue(in.State); err == nil {
		if m, ok := v.(map[string]any); ok {
			state = m
		}
	}
	vars := map[string]any{"steps": steps, "vars": orEmpty(in.Vars), "task": map[string]any{"id": in.TaskID, "plan": in.Plan}, "state": state}
	p := &plans.Plan{Name: in.Plan, Steps: []plans.Step{in.Step}}
	if in.Step.When != "" {
		ok, err := p.StepWhen(0, vars)
		if err != nil {
			return api.StepOutput{Error: fmt.Sprintf("when: %v", err)}, nil
		}
		if !ok {
			return api.StepOutput{Skip: true, Reason: fmt.Sprintf("when (%s) is false", in.Step.When)}, nil
		}
	}
	if in.Step.IsProgram() {
		if in.Step.Program == "" {
			return programStepError("the step's program_file %s was not read with the plan", in.Step.ProgramFile), nil
		}
		return a.prepareProgram(in, vars), nil // step_program.go
	}
	args, err := p.StepArgs(0, vars)
	if err != nil {
		return api.StepOutput{Error: fmt.Sprintf("args: %v", err)}, nil
	}
	if plans.StateTool(in.Step.Tool) {
		// task-state: served by the task itself, no upstream.
		return api.StepOutput{Call: &api.ToolCall{Tool: in.Step.Tool, Server: api.StateServer,
			UpstreamTool: strings.TrimPrefix(in.Step.Tool, "airlock_"), Arguments: args, Spec: api.SpecFor(nil)}}, nil
	}
	c, ok := a.judge().Catalog.(*Catalog)
	if !ok || c == nil {
		return api.StepOutput{Error: "this worker has no manifests loaded"}, nil
	}
	e, ok := c.tools[in.Step.Tool]
	if !ok {
		return api.StepOutput{Error: fmt.Sprintf("tool %s is not declared in this worker's manifests", in.Step.Tool)}, nil
	}
	return api.StepOutput{Call: &api.ToolCall{Tool: in.Step.Tool, Server: e.server, UpstreamTool: e.upstream, Arguments: args, Spec: api.SpecFor(e.decl)}}, nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
