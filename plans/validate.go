package plans

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/airlock-run/airlock/internal/expr"
	"github.com/airlock-run/airlock/manifests"
)

var (
	planNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	stepIDRE   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	varNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// celReserved are words CEL does not accept as a field name after a dot
// (steps.in is a syntax error).
var celReserved = []string{"as", "break", "const", "continue", "else", "false", "for", "function", "if",
	"import", "in", "let", "loop", "namespace", "null", "package", "return", "true", "var", "void", "while"}

// Validate checks the plan and returns every problem found, in file order
// (nil if none). tools, when not nil, are the exposed tool names
// ("server__tool") the plan may call; a step naming another is a problem
// that suggests the closest. Every expression is compiled, and must use
// only steps before its own and only declared vars.
func (p *Plan) Validate(tools []string) []manifests.Problem {
	if p == nil {
		return []manifests.Problem{{Msg: "no plan"}}
	}
	v := &validator{file: p.File, lines: p.Lines, vars: p.Vars}
	switch {
	case p.Name == "":
		v.add("name", "name", `is required; name the plan, e.g. "seed-project" (lowercase letters, digits, '-' and '_')`)
	case !planNameRE.MatchString(p.Name):
		v.add("name", "name", "%q is not a valid plan name; start with a lowercase letter or digit, then up to 63 lowercase letters, digits, '-' or '_'", p.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Vars)) {
		if !varNameRE.MatchString(k) {
			v.add("vars."+k, "vars."+k, "%q cannot be read as vars.%s; use letters, digits and '_', starting with a letter or '_'", k, k)
		}
	}
	if l := p.Limits; l != nil {
		if l.MaxCalls < 0 || (l.MaxCalls == 0 && p.Lines.Has("limits.max_calls")) {
			v.add("limits.max_calls", "limits.max_calls", "must be at least 1, got %d; omit it for the command line's default", l.MaxCalls)
		}
		if l.Deadline < 0 || (l.Deadline == 0 && p.Lines.Has("limits.deadline")) {
			v.add("limits.deadline", "limits.deadline", `must be positive, got %s; write how long the plan may run, e.g. "30m"`, l.Deadline)
		}
	}
	switch {
	case len(p.Steps) == 0:
		v.add("steps", "steps", "is required; list at least one step (id, tool, args)")
	case len(p.Steps) > MaxSteps:
		v.add("steps", "steps", "has %d steps, more than %d; split the plan", len(p.Steps), MaxSteps)
	}
	ids := map[string]int{} // id -> index+1
	for i, s := range p.Steps {
		if s.ID != "" && ids[s.ID] == 0 {
			ids[s.ID] = i + 1
		}
	}
	for i := range p.Steps {
		v.step(p, i, ids, tools)
	}
	sort.SliceStable(v.problems, func(i, j int) bool { return v.problems[i].Line < v.problems[j].Line })
	return v.problems
}

type validator struct {
	file     string
	lines    manifests.Lines
	vars     map[string]any
	problems []manifests.Problem
}

// add reports a problem on field at the line of linePath (the field path
// as the loader recorded it, without step IDs).
func (v *validator) add(field, linePath, format string, args ...any) {
	v.problems = append(v.problems, manifests.Problem{File: v.file, Line: v.lines.Line(linePath), Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) step(p *Plan, i int, ids map[string]int, tools []string) {
	s := p.Steps[i]
	at := fmt.Sprintf("steps[%d]", i) // for lines
	name := at                        // for messages
	if s.ID != "" {
		name = fmt.Sprintf("%s (%s)", at, s.ID)
	}
	switch {
	case s.ID == "":
		v.add(name+".id", at+".id", "is required; name the step, e.g. write_readme, so later steps can use its result as steps.<id>")
	case !stepIDRE.MatchString(s.ID):
		v.add(name+".id", at+".id", "%q is not a valid step id; start with a lowercase letter, then lowercase letters, digits or '_' (it is used as steps.<id> in expressions)", s.ID)
	case slices.Contains(celReserved, s.ID):
		v.add(name+".id", at+".id", "%q is a reserved word in CEL, so steps.%s could not be written; choose another id", s.ID, s.ID)
	case ids[s.ID] != i+1:
		v.add(name+".id", at+".id", "%q is already the id of steps[%d]; step ids must be unique", s.ID, ids[s.ID]-1)
	}
	if s.IsProgram() {
		v.program(s, name, at) // program.go
	} else {
		v.tool(name+".tool", at+".tool", s.Tool, tools)
		if s.Atomic {
			v.add(name+".atomic", at+".atomic", "only a program step may be atomic (one tool call is undone as a whole by rollback); remove atomic, or make the step a program")
		}
		if s.Limits != nil {
			v.add(name+".limits", at+".limits", "only a program step takes limits; remove them (the plan's limits bound its task)")
		}
	}
	switch s.OnFailure {
	case "", OnFailureRollback, OnFailureStop, OnFailureContinue:
	default:
		v.add(name+".on_failure", at+".on_failure", "%q is not a failure mode; use one of %s", s.OnFailure, joinOnFailures())
	}

	// The steps this one may use: those before it.
	earlier := make([]string, 0, i)
	for _, e := range p.Steps[:i] {
		if e.ID != "" {
			earlier = append(earlier, e.ID)
		}
	}
	refs := func(field, linePath, prefix string, prg *expr.Program) {
		fields, dynamic := prg.Fields("steps")
		for _, id := range fields {
			if msg := v.stepRef(id, s.ID, i, ids, earlier); msg != "" {
				v.add(field, linePath, "%s%s", prefix, msg)
			}
		}
		if dynamic {
			v.add(field, linePath, "%ssteps is used other than as steps.<id>; name the step, so that it can be checked to come before this one", prefix)
		}
		names, _ := prg.Fields("vars")
		for _, n := range names {
			if _, ok := v.vars[n]; !ok {
				v.add(field, linePath, "%svars.%s is not declared; %s", prefix, n, varHint(n, v.vars))
			}
		}
	}

	if s.When != "" || v.lines.Has(at+".when") {
		src := s.When
		if inner, ok := expr.IsPlaceholder(src); ok {
			src = inner
		}
		field, lp := name+".when", at+".when"
		if strings.TrimSpace(src) == "" {
			v.add(field, lp, "is empty; write a CEL condition, e.g. steps.write_readme.outcome == \"ok\", or remove when")
		} else if prg, err := expr.CompileBool(expr.Step, src); err != nil {
			v.add(field, lp, "%v%s", err, celHint(err))
		} else {
			refs(field, lp, "", prg)
		}
	}

	if s.Args == nil {
		return
	}
	tpl, err := expr.CompileTemplate(expr.Step, map[string]any(s.Args))
	var tes expr.TemplateErrors
	switch {
	case errors.As(err, &tes):
		for _, te := range tes {
			prefix := ""
			if te.Expr != "" {
				prefix = "${{ " + te.Expr + " }}: "
			}
			v.add(name+".args."+te.Path, at+".args."+te.Path, "%s%v%s", prefix, te.Err, celHint(te.Err))
		}
		return
	case err != nil:
		v.add(name+".args", at+".args", "%v", err)
		return
	}
	for _, ph := range tpl.Placeholders() {
		refs(name+".args."+ph.Path, at+".args."+ph.Path, "${{ "+ph.Program.Source()+" }}: ", ph.Program)
	}
}

// stepRef explains why step i (self) may not use steps.<id>; "" when it
// may.
func (v *validator) stepRef(id, self string, i int, ids map[string]int, earlier []string) string {
	const rule = "a step can use only the results of steps before it"
	switch n := ids[id]; {
	case id == self:
		return fmt.Sprintf("step %q is this step; %s", id, rule)
	case n == 0:
		if len(earlier) == 0 {
			return fmt.Sprintf("there is no step %q, and no step before this one; %s", id, rule)
		}
		return fmt.Sprintf("there is no step %q; %s", id, suggest(id, earlier, "earlier steps are"))
	case n-1 > i:
		return fmt.Sprintf("step %q is not an earlier step; %s", id, rule)
	}
	return ""
}

func (v *validator) tool(field, linePath, tool string, tools []string) {
	switch {
	case tool == "":
		v.add(field, linePath, `is required; name an exposed tool, "server__tool", e.g. "filesystem__write_file", or give the step a program (program: or program_file:) instead`)
		return
	case StateTool(tool):
		return // built in (task-scoped state)
	case tools == nil:
		if !strings.Contains(tool, "__") {
			v.add(field, linePath, `%q is not an exposed tool name; write "server__tool", e.g. "filesystem__%s"`, tool, tool)
		}
		return
	case slices.Contains(tools, tool):
		return
	case len(tools) == 0:
		v.add(field, linePath, "%q is not a tool of the loaded manifests, which declare none", tool)
		return
	}
	// A bare upstream name: suggest the exposed names that end in it.
	var same []string
	for _, t := range tools {
		if strings.HasSuffix(t, "__"+tool) {
			same = append(same, t)
		}
	}
	if !strings.Contains(tool, "__") && len(same) > 0 {
		v.add(field, linePath, `%q is not an exposed tool name; write "server__tool": %s`, tool, strings.Join(quoteAll(same), " or "))
		return
	}
	if best := manifests.Closest(tool, tools); best != "" {
		v.add(field, linePath, "%q is not a tool of the loaded manifests; did you mean %q?", tool, best)
		return
	}
	server, _, _ := strings.Cut(tool, "__")
	var ofServer []string
	servers := map[string]bool{}
	for _, t := range tools {
		s, _, _ := strings.Cut(t, "__")
		servers[s] = true
		if s == server {
			ofServer = append(ofServer, t)
		}
	}
	if len(ofServer) > 0 {
		sort.Strings(ofServer)
		v.add(field, linePath, "%q is not a tool of the loaded manifests; server %q has %s", tool, server, strings.Join(ofServer, ", "))
		return
	}
	v.add(field, linePath, "%q is not a tool of the loaded manifests, whose servers are %s", tool, strings.Join(slices.Sorted(maps.Keys(servers)), ", "))
}

// celHint adds a hint to a compile error of a step expression.
func celHint(err error) string {
	switch {
	case errors.Is(err, expr.ErrUndeclaredReference):
		return "; a step may use only " + strings.Join(expr.Step.Variables(), ", ")
	case errors.Is(err, expr.ErrUndefinedField):
		return "; a step's entry has result, outcome and reason, task has id and plan"
	}
	return ""
}

func varHint(name string, vars map[string]any) string {
	if len(vars) == 0 {
		return "declare it under vars:"
	}
	return suggest(name, slices.Sorted(maps.Keys(vars)), "declared are")
}

// suggest names the closest of known to name, or lists them.
func suggest(name string, known []string, listed string) string {
	if best := manifests.Closest(name, known); best != "" {
		return fmt.Sprintf("did you mean %q?", best)
	}
	return listed + " " + strings.Join(known, ", ")
}

func declared(vars map[string]any) string {
	if len(vars) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(vars)), ", ")
}

func joinOnFailures() string {
	s := make([]string, len(onFailures))
	for i, o := range onFailures {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// StateTool reports whether tool is one of the built-in task-state tools a
// step may call: airlock_state_get, airlock_state_set, airlock_state_delete
// (the same names api declares; plans cannot import api).
func StateTool(tool string) bool {
	switch tool {
	case "airlock_state_get", "airlock_state_set", "airlock_state_delete":
		return true
	}
	return false
}
