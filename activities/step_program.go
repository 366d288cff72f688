package activities

// A plan's program step (issue 27 §6): PrepareStep resolves it into the
// whole ProgramRequest, tool table and effective limits included, so the
// request is in history as this local activity's result.

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
)

// prepareProgram builds a program step's request: its source, atomic and
// limits from the step, and as its tools every tool of the worker's
// manifests the principal may use (what the gateway would list to it),
// plus the task-state tools.
func (a *Activities) prepareProgram(in api.StepInput, scope map[string]any) api.StepOutput {
	j := a.judge()
	c, ok := j.Catalog.(*Catalog)
	if !ok || c == nil || j.Policy == nil {
		return api.StepOutput{Error: "this worker has no manifests or policy loaded, so the program has no tools"}
	}
	pr := api.Principal{}
	if in.Principal != nil {
		pr = *in.Principal
	}
	var tools []api.ProgramTool
	for _, name := range []string{api.ToolStateDelete, api.ToolStateGet, api.ToolStateSet} {
		tools = append(tools, api.ProgramTool{Name: name, Server: api.StateServer,
			UpstreamTool: strings.TrimPrefix(name, "airlock_"), Spec: api.SpecFor(nil)})
	}
	for name, e := range c.tools {
		tool := policy.Tool{Name: name, Server: e.server, Upstream: e.upstream, Decl: e.decl, PathRoots: e.roots}
		if !j.Policy.Visible(pr, policy.Task{ID: in.TaskID, AllowTools: in.AllowTools}, tool) {
			continue
		}
		tools = append(tools, api.ProgramTool{Name: name, Server: e.server, UpstreamTool: e.upstream, Spec: api.SpecFor(e.decl)})
	}
	req := api.ProgramRequest{ProgramID: api.PlanProgramID(in.Step.ID), Source: in.Step.Program,
		Tools: programTable(tools), Limits: api.PlanProgramLimits(in.Step.Limits), Atomic: in.Step.Atomic}
	if in.Principal != nil {
		req.Principal = in.Principal.Name
	}
	// The program reads the step's vars, the earlier steps' outcomes and
	// results and the task as the global inputs (what a tool step's args
	// expressions see, less state: a program reads that with
	// airlock_state_get, in history as its call).
	inputs, err := json.Marshal(map[string]any{"vars": scope["vars"], "steps": scope["steps"], "task": scope["task"]})
	switch {
	case err != nil:
		return programStepError("the step's inputs (vars, steps) are not JSON: %v", err)
	case len(inputs) > api.MaxProgramInputBytes:
		return programStepError("the step's inputs (vars and earlier steps' results) are %d bytes, more than the %d a program may get; have the earlier steps return less", len(inputs), api.MaxProgramInputBytes)
	}
	req.Inputs = inputs
	return api.StepOutput{Program: &req}
}

// programTable is the tools named as the gateway names them
// (api.NameProgramTools): sorted by name, collisions told apart.
func programTable(tools []api.ProgramTool) []api.ProgramTool { return api.NameProgramTools(tools) }

// programStepError is a program step that cannot be prepared.
func programStepError(format string, args ...any) api.StepOutput {
	return api.StepOutput{Error: fmt.Sprintf(format, args...)}
}
