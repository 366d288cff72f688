package activities

// A plan's program step (issue 27 §6): PrepareStep resolves it into the
// whole ProgramRequest, tool table and effective limits included, so the
// request is in history as this local activity's result.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
)

// programKeywords are Starlark's keywords and reserved words, which cannot
// name a module or function (workflows refuses a table holding one).
var programKeywords = map[string]bool{
	"and": true, "break": true, "continue": true, "def": true, "elif": true, "else": true, "for": true, "if": true,
	"in": true, "lambda": true, "load": true, "not": true, "or": true, "pass": true, "return": true, "while": true,
	"as": true, "assert": true, "async": true, "await": true, "class": true, "del": true, "except": true, "finally": true,
	"from": true, "global": true, "import": true, "is": true, "nonlocal": true, "raise": true, "try": true, "with": true, "yield": true,
}

// prepareProgram builds a program step's request: its source, atomic and
// limits from the step, and as its tools every tool of the worker's
// manifests the principal may use (what the gateway would list to it),
// plus the task-state tools.
func (a *Activities) prepareProgram(in api.StepInput) api.StepOutput {
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
	return api.StepOutput{Program: &req}
}

// programTable sorts tools by name and names each module.function
// (api.ProgramToolName); a keyword gets a '_' suffix, and a tool whose
// name (or module.function), case folded, is an earlier one's is left out,
// so the table is one the workflow accepts.
func programTable(tools []api.ProgramTool) []api.ProgramTool {
	slices.SortFunc(tools, func(x, y api.ProgramTool) int { return strings.Compare(x.Name, y.Name) })
	seen := map[string]bool{}
	out := tools[:0]
	for _, tl := range tools {
		tl.Module, tl.Function = api.ProgramToolName(tl.Name)
		if programKeywords[tl.Module] {
			tl.Module += "_"
		}
		if programKeywords[tl.Function] {
			tl.Function += "_"
		}
		name, fn := "n:"+fold(tl.Name), "f:"+fold(tl.Module+"."+tl.Function)
		if seen[name] || seen[fn] {
			continue
		}
		seen[name], seen[fn] = true, true
		out = append(out, tl)
	}
	return out
}

// fold is the case folding the workflow compares names under.
func fold(s string) string { return strings.ToLower(strings.ToUpper(s)) }

// programStepError is a program step that cannot be prepared.
func programStepError(format string, args ...any) api.StepOutput {
	return api.StepOutput{Error: fmt.Sprintf(format, args...)}
}
