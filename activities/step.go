package activities

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/airlock-run/airlock/internal/expr"
	"github.com/airlock-run/airlock/plans"
)

// PrepareStepName is the wire name of the local activity that evaluates a
// plan step's when and arguments and resolves its tool on the worker.
const PrepareStepName = "PrepareStep"

// StepResult is what later steps see of an earlier one (steps.<id>).
type StepResult struct {
	Outcome string
	Reason  string          `json:",omitempty"`
	Result  json.RawMessage `json:",omitempty"` // CallToolResult JSON
}

// StepInput is one step to prepare.
type StepInput struct {
	TaskID  string
	Plan    string
	Step    plans.Step
	Vars    map[string]any        `json:",omitempty"`
	Results map[string]StepResult `json:",omitempty"`
}

// StepOutput is the prepared call, or why the step is skipped or failed.
type StepOutput struct {
	Call   *ToolCall `json:",omitempty"`
	Skip   bool      `json:",omitempty"`
	Reason string    `json:",omitempty"`
	Error  string    `json:",omitempty"`
}

// PrepareStep evaluates a step against the results so far. Evaluation
// errors are the step's failure (Error), not the activity's.
func (a *Activities) PrepareStep(_ context.Context, in StepInput) (StepOutput, error) {
	steps := map[string]any{}
	for id, r := range in.Results {
		steps[id] = map[string]any{"outcome": r.Outcome, "reason": r.Reason, "result": expr.ResultValue(r.Result)}
	}
	vars := map[string]any{"steps": steps, "vars": orEmpty(in.Vars), "task": map[string]any{"id": in.TaskID, "plan": in.Plan}}
	p := &plans.Plan{Name: in.Plan, Steps: []plans.Step{in.Step}}
	if in.Step.When != "" {
		ok, err := p.StepWhen(0, vars)
		if err != nil {
			return StepOutput{Error: fmt.Sprintf("when: %v", err)}, nil
		}
		if !ok {
			return StepOutput{Skip: true, Reason: fmt.Sprintf("when (%s) is false", in.Step.When)}, nil
		}
	}
	args, err := p.StepArgs(0, vars)
	if err != nil {
		return StepOutput{Error: fmt.Sprintf("args: %v", err)}, nil
	}
	c, ok := a.Catalog.(*Catalog)
	if !ok || c == nil {
		return StepOutput{Error: "this worker has no manifests loaded"}, nil
	}
	e, ok := c.tools[in.Step.Tool]
	if !ok {
		return StepOutput{Error: fmt.Sprintf("tool %s is not declared in this worker's manifests", in.Step.Tool)}, nil
	}
	return StepOutput{Call: &ToolCall{Tool: in.Step.Tool, Server: e.server, UpstreamTool: e.upstream, Arguments: args, Spec: SpecFor(e.decl)}}, nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
