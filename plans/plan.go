// Package plans defines plan files: a multi-step task, declared in YAML and
// run by `airlock run PLAN.yaml` through the same policy, approvals and
// rollback as an agent's calls.
//
// A plan names its steps, each one tool call ("server__tool") whose
// arguments may compute values from the plan's vars and from the results
// of earlier steps with ${{ expr }} placeholders (CEL, see internal/expr),
// and from the task's state (state.<key>: the JSON document that the
// built-in tools airlock_state_get, airlock_state_set and
// airlock_state_delete keep, which a step may call like any tool; see
// StateTool):
//
//	name: seed-project
//	vars: {dir: /srv/sandbox/x}
//	steps:
//	  - id: write_readme
//	    tool: filesystem__write_file
//	    args:
//	      path: "${{ vars.dir }}/README.md"
//	      content: hello
//	  - id: remember
//	    tool: memory__add_observations
//	    when: steps.write_readme.outcome == "ok"
//	    args: …
//
// A step may instead run a Starlark program (program: inline, or
// program_file: next to the plan, read when the plan is parsed) that calls
// the tools the plan's principal may use; see program.go.
//
// Loading is two steps, as for manifests: Parse decodes strictly (unknown
// fields, durations without a unit are problems) and Validate checks the
// values, compiles every expression, and checks that a step uses only the
// results of steps before it and only declared vars. Load does both.
// Problems are manifests.Problem values with the file, line and field
// ("steps[1] (write_readme).args.path"). Defaults live in Effective*
// methods, so a loaded plan still says what its file said.
//
// A Plan is also a workflow input (it has json tags). Vars and args hold
// decoded JSON only (numbers are float64), whether they came from YAML or
// JSON, so expressions see the same values either way. StepArgs and
// StepWhen evaluate a step's expressions at run time.
//
// This package is a leaf: it imports manifests (YAML decoding and
// problems), internal/expr and the standard library, and never logs.
package plans

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/airlock-run/airlock/manifests"
)

// Plan is one plan file.
type Plan struct {
	// File is the path the plan was loaded from, and Lines locates its
	// fields (set by the loader; for problems only).
	File  string          `yaml:"-" json:"-"`
	Lines manifests.Lines `yaml:"-" json:"-"`

	// Name identifies the plan (task.plan in expressions): lowercase
	// letters, digits, '-' and '_'.
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// Principal is who the plan runs as; empty leaves it to the command
	// line.
	Principal string `yaml:"principal,omitempty" json:"principal,omitempty"`
	// Vars are values the expressions read as vars.<name>. The command
	// line may override them (with strings; see ResolveVars).
	Vars   map[string]any `yaml:"vars,omitempty" json:"vars,omitempty"`
	Limits *Limits        `yaml:"limits,omitempty" json:"limits,omitempty"`
	// RollbackOnDeny rolls the whole plan back when a step is denied by
	// policy or by an approver (otherwise the step's on_failure decides).
	RollbackOnDeny bool   `yaml:"rollback_on_deny,omitempty" json:"rollback_on_deny,omitempty"`
	Steps          []Step `yaml:"steps" json:"steps"`
}

// Limits bound a plan's task. Zero fields leave the limit to the command
// line's task defaults.
type Limits struct {
	// MaxCalls bounds the tool calls the task may make.
	MaxCalls int `yaml:"max_calls,omitempty" json:"max_calls,omitempty"`
	// Deadline is how long the task may run, from its start.
	Deadline manifests.Duration `yaml:"deadline,omitempty" json:"deadline,omitempty"`
}

// Step is one tool call of a plan.
type Step struct {
	// ID names the step for later steps (steps.<id>): a lowercase letter,
	// then lowercase letters, digits and '_'.
	ID string `yaml:"id" json:"id"`
	// Tool is the exposed tool name, "server__tool". A step calls one
	// tool or runs one program (Program), never both.
	Tool string `yaml:"tool,omitempty" json:"tool,omitempty"`
	// Args are the call's arguments: any JSON value whose strings may hold
	// ${{ expr }} placeholders (expr.Template, kind expr.Step).
	Args map[string]any `yaml:"args,omitempty" json:"args,omitempty"`
	// When, a CEL condition over steps, vars and task (written bare or as
	// one ${{ }}), skips the step when false.
	When string `yaml:"when,omitempty" json:"when,omitempty"`
	// OnFailure is what a failed step does to the plan (default rollback;
	// see EffectiveOnFailure).
	OnFailure OnFailure `yaml:"on_failure,omitempty" json:"on_failure,omitempty"`

	// Program is a Starlark program (code mode, issue 27) the step runs
	// instead of one tool call: it may call every tool the plan's
	// principal may use, each through the task's pipeline; the step is ok
	// when the program ends ok. Written inline, or read at load from
	// ProgramFile (see program.go).
	Program string `yaml:"program,omitempty" json:"program,omitempty"`
	// ProgramFile is the file Program was read from, relative to the plan
	// file's directory and inside it.
	ProgramFile string `yaml:"program_file,omitempty" json:"program_file,omitempty"`
	// Atomic rolls the program's own compensable calls back, newest first,
	// when it does not end ok (whatever on_failure then does).
	Atomic bool `yaml:"atomic,omitempty" json:"atomic,omitempty"`
	// Limits override the program's limits (zero fields: the defaults).
	Limits *ProgramLimits `yaml:"limits,omitempty" json:"limits,omitempty"`
}

// IsProgram reports whether the step runs a program rather than a tool.
func (s Step) IsProgram() bool { return s.Program != "" || s.ProgramFile != "" }

// OnFailure is what a failed step does to its plan.
type OnFailure string

const (
	// OnFailureRollback stops the plan and undoes the steps that ran, in
	// reverse order (the default).
	OnFailureRollback OnFailure = "rollback"
	// OnFailureStop stops the plan and keeps what the steps before did.
	OnFailureStop OnFailure = "stop"
	// OnFailureContinue goes on with the next step.
	OnFailureContinue OnFailure = "continue"
)

var onFailures = []OnFailure{OnFailureRollback, OnFailureStop, OnFailureContinue}

// MaxSteps bounds the steps of one plan.
const MaxSteps = 200

// EffectiveOnFailure is the declared on_failure, or rollback.
func (s Step) EffectiveOnFailure() OnFailure {
	if s.OnFailure == "" {
		return OnFailureRollback
	}
	return s.OnFailure
}

// MaxCalls is limits.max_calls, 0 when the plan sets none.
func (p *Plan) MaxCalls() int {
	if p == nil || p.Limits == nil {
		return 0
	}
	return p.Limits.MaxCalls
}

// Deadline is limits.deadline, 0 when the plan sets none.
func (p *Plan) Deadline() time.Duration {
	if p == nil || p.Limits == nil {
		return 0
	}
	return p.Limits.Deadline.D()
}

// Parse decodes one plan from data without validating it (Validate does
// that). file is used in problems only. The error, if any, is
// manifests.Problems.
func Parse(file string, data []byte) (*Plan, error) {
	p, ps := parse(file, data)
	if len(ps) > 0 {
		return nil, manifests.Problems(ps)
	}
	return p, nil
}

// parse returns what could be decoded along with the problems; the plan is
// nil only when the YAML is malformed.
func parse(file string, data []byte) (*Plan, []manifests.Problem) {
	p := &Plan{}
	lines, ps := manifests.DecodeYAML(file, data, p)
	if lines == nil {
		return nil, ps
	}
	p.File, p.Lines = file, lines
	ps = append(ps, p.normalize()...)
	return p, append(ps, p.readPrograms()...) // program.go
}

// Load reads, decodes and validates the plan at path, without checking its
// tools (call Validate with the tool names for that). The error, if any,
// is manifests.Problems listing everything wrong with the file.
func Load(path string) (*Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, manifests.Problems{manifests.ReadProblem(path, err)}
	}
	p, decoded := parse(path, data)
	if p == nil {
		return nil, manifests.Problems(decoded)
	}
	ps := append(decoded, manifests.WithoutDecoded(p.Validate(nil), decoded)...)
	if len(ps) > 0 {
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].Line < ps[j].Line })
		return nil, manifests.Problems(ps)
	}
	return p, nil
}

// normalize turns the YAML values of vars and args into decoded JSON, as a
// plan read from JSON holds, and reports values JSON cannot hold.
func (p *Plan) normalize() []manifests.Problem {
	var ps []manifests.Problem
	conv := func(m map[string]any, path string) {
		for k, v := range m {
			kp := path + "." + k
			nv, err := jsonValue(v)
			if err != nil {
				ps = append(ps, manifests.Problem{File: p.File, Line: p.Lines.Line(kp + err.at), Field: kp + err.at, Msg: err.msg})
				delete(m, k)
				continue
			}
			m[k] = nv
		}
	}
	conv(p.Vars, "vars")
	for i := range p.Steps {
		conv(p.Steps[i].Args, fmt.Sprintf("steps[%d].args", i))
	}
	return ps
}

type valueError struct{ at, msg string }

// jsonValue converts a decoded YAML value to decoded JSON.
func jsonValue(v any) (any, *valueError) {
	switch v := v.(type) {
	case nil, bool, string:
		return v, nil
	case int:
		return float64(v), nil
	case int64:
		return float64(v), nil
	case uint64:
		return float64(v), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, &valueError{msg: fmt.Sprintf("%v is not a JSON number; write a number, or quote it for a string", v)}
		}
		return v, nil
	case time.Time:
		return nil, &valueError{msg: "YAML reads this as a timestamp; quote it to pass it as a string"}
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, el := range v {
			nv, err := jsonValue(el)
			if err != nil {
				err.at = "." + k + err.at
				return nil, err
			}
			out[k] = nv
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, el := range v {
			nv, err := jsonValue(el)
			if err != nil {
				err.at = fmt.Sprintf("[%d]%s", i, err.at)
				return nil, err
			}
			out[i] = nv
		}
		return out, nil
	}
	return nil, &valueError{msg: fmt.Sprintf("a %T is not a JSON value", v)}
}

// ErrNoVar is wrapped by ResolveVars for an override of a var the plan
// does not declare.
var ErrNoVar = errors.New("the plan declares no such var")

// ResolveVars returns the plan's vars with overrides (from the command
// line, name=value) applied as strings. Only declared vars may be
// overridden, so that a misspelt name is an error rather than ignored.
func (p *Plan) ResolveVars(overrides map[string]string) (map[string]any, error) {
	out := make(map[string]any, len(p.Vars))
	for k, v := range p.Vars {
		out[k] = v
	}
	names := make([]string, 0, len(overrides))
	for k := range overrides {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if _, ok := p.Vars[k]; !ok {
			return nil, fmt.Errorf("--var %s: %w; declared: %s", k, ErrNoVar, declared(p.Vars))
		}
		out[k] = overrides[k]
	}
	return out, nil
}
