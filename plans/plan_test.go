package plans_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlock-run/airlock/internal/expr"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
)

var testTools = []string{"filesystem__create_directory", "filesystem__read_text_file", "filesystem__write_file", "memory__create_entities"}

// head is the start of most test plans: name on line 1, vars on 2-3,
// "steps:" on line 4, so the first step starts on line 5.
const head = `name: p
vars:
  dir: /x
steps:
`

// stepA is a valid first step, lines 5-8 after head.
const stepA = `  - id: a
    tool: filesystem__write_file
    args:
      path: "${{ vars.dir }}/a"
`

// problemsOf parses and validates src as plan.yaml and returns every
// problem as its formatted string.
func problemsOf(t *testing.T, src string, tools []string) []string {
	t.Helper()
	p, err := plans.Parse("plan.yaml", []byte(src))
	if err != nil {
		return errorLines(t, err)
	}
	var out []string
	for _, pr := range p.Validate(tools) {
		out = append(out, pr.Error())
	}
	return out
}

func errorLines(t *testing.T, err error) []string {
	t.Helper()
	var ps manifests.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error is %T, want manifests.Problems: %v", err, err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.Error())
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		tools   []string // nil: testTools
		noTools bool     // validate with nil tools
		want    []string
	}{
		{name: "valid", src: head + stepA},
		{
			name: "the example of the design: a later step",
			src: head + stepA + `  - id: write_readme
    tool: filesystem__write_file
    args:
      path: ${{ steps.later.result }}
      content: hello
  - id: later
    tool: filesystem__read_text_file
    args: {path: /x/a}
`,
			want: []string{`plan.yaml:12: steps[1] (write_readme).args.path: ${{ steps.later.result }}: step "later" is not an earlier step; a step can use only the results of steps before it`},
		},
		{
			name: "earlier steps, vars and task are fine",
			src: head + stepA + `  - id: b
    tool: memory__create_entities
    when: steps.a.outcome == "ok" && vars.dir != ""
    args:
      entities:
        - name: ${{ task.plan }}-${{ task.id }}
          observations: ["${{ steps.a.result.content }}", "${{ steps['a'].reason }}"]
`,
		},
		{
			name: "name missing",
			src:  "steps:\n" + stepA,
			want: []string{
				`plan.yaml:1: name: is required; name the plan, e.g. "seed-project" (lowercase letters, digits, '-' and '_')`,
				`plan.yaml:5: steps[0] (a).args.path: ${{ vars.dir }}: vars.dir is not declared; declare it under vars:`,
			},
		},
		{
			name: "name invalid",
			src:  strings.Replace(head, "name: p", "name: My Plan", 1) + stepA,
			want: []string{`plan.yaml:1: name: "My Plan" is not a valid plan name; start with a lowercase letter or digit, then up to 63 lowercase letters, digits, '-' or '_'`},
		},
		{
			name: "no steps",
			src:  "name: p\n",
			want: []string{`plan.yaml:1: steps: is required; list at least one step (id, tool, args)`},
		},
		{
			name: "step ids",
			src: head + stepA + `  - tool: filesystem__write_file
  - id: Write
    tool: filesystem__write_file
  - id: in
    tool: filesystem__write_file
  - id: a
    tool: filesystem__write_file
`,
			want: []string{
				`plan.yaml:9: steps[1].id: is required; name the step, e.g. write_readme, so later steps can use its result as steps.<id>`,
				`plan.yaml:10: steps[2] (Write).id: "Write" is not a valid step id; start with a lowercase letter, then lowercase letters, digits or '_' (it is used as steps.<id> in expressions)`,
				`plan.yaml:12: steps[3] (in).id: "in" is a reserved word in CEL, so steps.in could not be written; choose another id`,
				`plan.yaml:14: steps[4] (a).id: "a" is already the id of steps[0]; step ids must be unique`,
			},
		},
		{
			name: "tools",
			src: head + `  - id: a
  - id: b
    tool: filesystem__write_fil
  - id: c
    tool: write_file
  - id: d
    tool: filesystem__delete_file
  - id: e
    tool: github__create_issue
`,
			want: []string{
				`plan.yaml:5: steps[0] (a).tool: is required; name an exposed tool, "server__tool", e.g. "filesystem__write_file", or give the step a program (program: or program_file:) instead`,
				`plan.yaml:7: steps[1] (b).tool: "filesystem__write_fil" is not a tool of the loaded manifests; did you mean "filesystem__write_file"?`,
				`plan.yaml:9: steps[2] (c).tool: "write_file" is not an exposed tool name; write "server__tool": "filesystem__write_file"`,
				`plan.yaml:11: steps[3] (d).tool: "filesystem__delete_file" is not a tool of the loaded manifests; server "filesystem" has filesystem__create_directory, filesystem__read_text_file, filesystem__write_file`,
				`plan.yaml:13: steps[4] (e).tool: "github__create_issue" is not a tool of the loaded manifests, whose servers are filesystem, memory`,
			},
		},
		{
			name:    "tools unchecked without a list, except for their form",
			src:     head + "  - id: a\n    tool: any__thing\n  - id: b\n    tool: write_file\n",
			noTools: true,
			want:    []string{`plan.yaml:8: steps[1] (b).tool: "write_file" is not an exposed tool name; write "server__tool", e.g. "filesystem__write_file"`},
		},
		{
			name:  "no tools loaded",
			src:   head + "  - id: a\n    tool: any__thing\n",
			tools: []string{},
			want:  []string{`plan.yaml:6: steps[0] (a).tool: "any__thing" is not a tool of the loaded manifests, which declare none`},
		},
		{
			name: "on_failure",
			src:  head + stepA + "    on_failure: retry\n",
			want: []string{`plan.yaml:9: steps[0] (a).on_failure: "retry" is not a failure mode; use one of rollback, stop, continue`},
		},
		{
			name: "references to itself, to nothing, and computed",
			src: head + stepA + `  - id: b
    tool: filesystem__write_file
    args:
      path: ${{ steps.b.result }}
      content: "${{ steps.aa.result }} ${{ steps[vars.dir].result }}"
`,
			want: []string{
				`plan.yaml:12: steps[1] (b).args.path: ${{ steps.b.result }}: step "b" is this step; a step can use only the results of steps before it`,
				`plan.yaml:13: steps[1] (b).args.content: ${{ steps.aa.result }}: there is no step "aa"; did you mean "a"?`,
				`plan.yaml:13: steps[1] (b).args.content: ${{ steps[vars.dir].result }}: steps is used other than as steps.<id>; name the step, so that it can be checked to come before this one`,
			},
		},
		{
			name: "a first step cannot use steps",
			src:  head + "  - id: a\n    tool: filesystem__write_file\n    when: steps.x.outcome == 'ok'\n",
			want: []string{`plan.yaml:7: steps[0] (a).when: there is no step "x", and no step before this one; a step can use only the results of steps before it`},
		},
		{
			name: "undeclared vars",
			src:  head + "  - id: a\n    tool: filesystem__write_file\n    args:\n      path: ${{ vars.dri }}\n      content: ${{ vars.owner }}\n",
			want: []string{
				`plan.yaml:8: steps[0] (a).args.path: ${{ vars.dri }}: vars.dri is not declared; did you mean "dir"?`,
				`plan.yaml:9: steps[0] (a).args.content: ${{ vars.owner }}: vars.owner is not declared; declared are dir`,
			},
		},
		{
			name: "expressions that do not compile",
			src: head + `  - id: a
    tool: filesystem__write_file
    when: vars.dir
    args:
      path: ${{ steps.x.result. }}
      list: ["${{ args.path }}", "${{ steps.a.outcom }}", "${{ vars.dir"]
`,
			want: []string{
				`plan.yaml:9: steps[0] (a).args.path: ${{ steps.x.result. }}: Syntax error: no viable alternative at input '.'`,
				`plan.yaml:10: steps[0] (a).args.list[0]: ${{ args.path }}: undeclared reference to 'args'; a step may use only steps, vars, task, state`,
				`plan.yaml:10: steps[0] (a).args.list[1]: ${{ steps.a.outcom }}: undefined field 'outcom'; a step's entry has result, outcome and reason, task has id and plan`,
				`plan.yaml:10: steps[0] (a).args.list[2]: "${{ vars.dir" has no closing }}; end the expression with }} (write $${{ for a literal ${{)`,
			},
		},
		{
			name: "when not bool, and when as a placeholder",
			src: head + stepA + `    when: vars.dir + "x"
  - id: b
    tool: filesystem__write_file
    when: ${{ steps.c.outcome == "ok" }}
  - id: c
    tool: filesystem__write_file
    when: "   "
`,
			want: []string{
				`plan.yaml:9: steps[0] (a).when: the condition is of type string, not bool; compare it, e.g. steps.write.outcome == "ok"`,
				`plan.yaml:12: steps[1] (b).when: step "c" is not an earlier step; a step can use only the results of steps before it`,
				`plan.yaml:15: steps[2] (c).when: is empty; write a CEL condition, e.g. steps.write_readme.outcome == "ok", or remove when`,
			},
		},
		{
			name: "limits",
			src:  "name: p\nlimits:\n  max_calls: 0\n  deadline: 0s\nsteps:\n  - {id: a, tool: filesystem__write_file}\n",
			want: []string{
				`plan.yaml:3: limits.max_calls: must be at least 1, got 0; omit it for the command line's default`,
				`plan.yaml:4: limits.deadline: must be positive, got 0s; write how long the plan may run, e.g. "30m"`,
			},
		},
		{
			name: "var names",
			src:  "name: p\nvars:\n  my-dir: /x\n  ok_1: 2\nsteps:\n  - {id: a, tool: filesystem__write_file}\n",
			want: []string{`plan.yaml:3: vars.my-dir: "my-dir" cannot be read as vars.my-dir; use letters, digits and '_', starting with a letter or '_'`},
		},
		{
			name: "too many steps",
			src:  "name: p\nsteps:\n" + strings.Repeat("  - {id: a, tool: filesystem__write_file}\n", 201),
			want: func() []string {
				out := []string{`plan.yaml:2: steps: has 201 steps, more than 200; split the plan`}
				for i := 1; i <= 200; i++ {
					out = append(out, fmt.Sprintf(`plan.yaml:%d: steps[%d] (a).id: "a" is already the id of steps[0]; step ids must be unique`, i+3, i))
				}
				return out
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tools := tt.tools
			if tools == nil {
				tools = testTools
			}
			if tt.noTools {
				tools = nil
			}
			if diff := cmp.Diff(tt.want, problemsOf(t, tt.src, tools)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeProblems(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "unknown fields",
			src:  head + stepA + "    on_falure: stop\nrollback_ondeny: true\n",
			want: []string{
				`plan.yaml:9: steps[0].on_falure: unknown field; did you mean "on_failure"?`,
				`plan.yaml:10: rollback_ondeny: unknown field; did you mean "rollback_on_deny"?`,
			},
		},
		{
			name: "wrong kinds",
			src:  "name: p\nlimits: {max_calls: many, deadline: 30}\nsteps:\n  - id: a\n    tool: [x]\n    args: x\n",
			want: []string{
				`plan.yaml:2: limits.max_calls: expected a whole number, got "many"`,
				`plan.yaml:2: limits.deadline: 30 has no unit; write a duration such as "30s" (s, m or h)`,
				`plan.yaml:5: steps[0].tool: expected a single value, got a list`,
				`plan.yaml:6: steps[0].args: expected a mapping (key: value lines), got "x"`,
			},
		},
		{
			name: "values JSON cannot hold",
			src:  "name: p\nvars:\n  when: 2024-01-01\n  big: .inf\nsteps:\n  - id: a\n    tool: t__t\n    args:\n      x: {y: [1, .nan]}\n      1: z\n",
			want: []string{
				`plan.yaml:3: vars.when: YAML reads this as a timestamp; quote it to pass it as a string`,
				`plan.yaml:4: vars.big: +Inf is not a JSON number; write a number, or quote it for a string`,
				`plan.yaml:9: steps[0].args.x.y[1]: NaN is not a JSON number; write a number, or quote it for a string`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := plans.Parse("plan.yaml", []byte(tt.src))
			if err == nil {
				t.Fatal("Parse succeeded, want problems")
			}
			got := errorLines(t, err)
			// Problems of one parse come in walk order for decoding and in map
			// order for values; compare them sorted.
			if diff := cmp.Diff(tt.want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

const goodPlan = `name: good
description: every field
principal: dev
vars:
  dir: /srv/x
  n: 3
  tags: [a, b]
limits:
  max_calls: 20
  deadline: 30m
rollback_on_deny: true
steps:
  - id: mk
    tool: filesystem__create_directory
    args: {path: "${{ vars.dir }}"}
  - id: write
    tool: filesystem__write_file
    when: ${{ steps.mk.outcome == "ok" }}
    on_failure: continue
    args:
      path: "${{ vars.dir }}/n.txt"
      content: "n=${{ vars.n }} tags=${{ vars.tags }}"
      extra: {count: 2, list: ["${{ vars.tags }}", null, true]}
`

func TestRoundTrip(t *testing.T) {
	p, err := plans.Parse("good.yaml", []byte(goodPlan))
	if err != nil {
		t.Fatal(err)
	}
	if ps := p.Validate(testTools); len(ps) > 0 {
		t.Fatalf("problems: %v", manifests.Problems(ps))
	}
	want := &plans.Plan{
		Name: "good", Description: "every field", Principal: "dev",
		Vars:           map[string]any{"dir": "/srv/x", "n": 3.0, "tags": []any{"a", "b"}},
		Limits:         &plans.Limits{MaxCalls: 20, Deadline: manifests.Duration(30 * 60e9)},
		RollbackOnDeny: true,
		Steps: []plans.Step{
			{ID: "mk", Tool: "filesystem__create_directory", Args: map[string]any{"path": "${{ vars.dir }}"}},
			{ID: "write", Tool: "filesystem__write_file", When: `${{ steps.mk.outcome == "ok" }}`, OnFailure: plans.OnFailureContinue,
				Args: map[string]any{"path": "${{ vars.dir }}/n.txt", "content": "n=${{ vars.n }} tags=${{ vars.tags }}",
					"extra": map[string]any{"count": 2.0, "list": []any{"${{ vars.tags }}", nil, true}}}},
		},
	}
	ignore := cmpopts.IgnoreFields(plans.Plan{}, "File", "Lines")
	if diff := cmp.Diff(want, p, ignore); diff != "" {
		t.Fatalf("parsed (-want +got):\n%s", diff)
	}

	// Through JSON, as a workflow input: the same plan, and the same
	// arguments.
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back plans.Plan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, &back, ignore); diff != "" {
		t.Fatalf("after JSON (-want +got):\n%s", diff)
	}

	vars, err := p.ResolveVars(map[string]string{"dir": "/srv/y"})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]any{
		"vars":  vars,
		"task":  expr.Task{ID: "t1", Plan: p.Name},
		"steps": map[string]any{"mk": map[string]any{"outcome": "ok", "result": map[string]any{"content": "created"}}},
	}
	for _, plan := range []*plans.Plan{p, &back} {
		ok, err := plan.StepWhen(1, env)
		if err != nil || !ok {
			t.Fatalf("StepWhen = %v, %v", ok, err)
		}
		args, err := plan.StepArgs(1, env)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"content":"n=3 tags=[\"a\",\"b\"]","extra":{"count":2,"list":[["a","b"],null,true]},"path":"/srv/y/n.txt"}`; string(args) != want {
			t.Errorf("StepArgs = %s, want %s", args, want)
		}
	}
	if args, err := p.StepArgs(0, env); err != nil || string(args) != `{"path":"/srv/y"}` {
		t.Errorf("StepArgs(0) = %s, %v", args, err)
	}
	if _, err := p.StepArgs(2, env); err == nil {
		t.Error("StepArgs(2) of a two-step plan succeeded")
	}
	env["steps"] = map[string]any{"mk": map[string]any{"outcome": "denied"}}
	if ok, err := p.StepWhen(1, env); err != nil || ok {
		t.Errorf("StepWhen after a denied step = %v, %v; want false", ok, err)
	}
	if ok, err := p.StepWhen(0, env); err != nil || !ok {
		t.Errorf("StepWhen without when = %v, %v; want true", ok, err)
	}
	if args, err := (&plans.Plan{Steps: []plans.Step{{ID: "x"}}}).StepArgs(0, nil); err != nil || string(args) != "{}" {
		t.Errorf("StepArgs without args = %s, %v; want {}", args, err)
	}
}

func TestStepArgsErrors(t *testing.T) {
	p := &plans.Plan{Steps: []plans.Step{{ID: "x", Args: map[string]any{"path": "${{ steps.gone.result.path }}"}}}}
	_, err := p.StepArgs(0, map[string]any{"steps": map[string]any{}})
	if want := "path: ${{ steps.gone.result.path }}: no such key: gone"; err == nil || err.Error() != want {
		t.Errorf("StepArgs = %v, want %q", err, want)
	}
	p.Steps[0].When = "steps.gone.outcome == 'ok'"
	if _, err := p.StepWhen(0, map[string]any{"steps": map[string]any{}}); err == nil {
		t.Error("StepWhen over a missing step succeeded")
	}
}

func TestResolveVars(t *testing.T) {
	p := &plans.Plan{Vars: map[string]any{"dir": "/x", "n": 1.0}}
	got, err := p.ResolveVars(map[string]string{"n": "2"})
	if diff := cmp.Diff(map[string]any{"dir": "/x", "n": "2"}, got); diff != "" || err != nil {
		t.Errorf("ResolveVars: %v (-want +got):\n%s", err, diff)
	}
	_, err = p.ResolveVars(map[string]string{"dri": "/y"})
	if !errors.Is(err, plans.ErrNoVar) || err.Error() != "--var dri: the plan declares no such var; declared: dir, n" {
		t.Errorf("ResolveVars(undeclared) = %v", err)
	}
	if p.Vars["n"] != 1.0 {
		t.Error("ResolveVars changed the plan")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(goodPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := plans.Load(good)
	if err != nil || p.File != good || p.Lines.Line("steps[1].args.content") != 22 {
		t.Fatalf("Load = %v, %v", p, err)
	}
	if p.MaxCalls() != 20 || p.Deadline().String() != "30m0s" || p.Steps[0].EffectiveOnFailure() != plans.OnFailureRollback || p.Steps[1].EffectiveOnFailure() != plans.OnFailureContinue {
		t.Errorf("defaults: %d %s %s %s", p.MaxCalls(), p.Deadline(), p.Steps[0].EffectiveOnFailure(), p.Steps[1].EffectiveOnFailure())
	}
	if (&plans.Plan{}).MaxCalls() != 0 || (&plans.Plan{}).Deadline() != 0 {
		t.Error("limits of a plan without limits are not 0")
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: p\nsteps:\n  - id: a\n    tool: x__y\n    args: {a: \"${{ vars.nope }}\"}\n    on_failure: never\n    tol: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = plans.Load(bad)
	want := []string{
		bad + `:5: steps[0] (a).args.a: ${{ vars.nope }}: vars.nope is not declared; declare it under vars:`,
		bad + `:6: steps[0] (a).on_failure: "never" is not a failure mode; use one of rollback, stop, continue`,
		bad + `:7: steps[0].tol: unknown field; did you mean "tool"?`,
	}
	if diff := cmp.Diff(want, errorLines(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = plans.Load(missing)
	if diff := cmp.Diff([]string{missing + ": cannot read the file: no such file or directory"}, errorLines(t, err)); diff != "" {
		t.Errorf("missing file (-want +got):\n%s", diff)
	}
}

// FuzzParse checks that no input makes the loader or validator panic, and
// that every problem has a message.
func FuzzParse(f *testing.F) {
	f.Add([]byte(goodPlan))
	f.Add([]byte(head + stepA))
	if b, err := os.ReadFile("examples/seed-project.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("name: p\nvars: &v {a: *v}\nsteps: []\n"))
	f.Add([]byte("steps:\n  - args: {a: \"${{ steps.x.result.map(k, {k: 1}) }}\"}\n"))
	// Issue 13 item 8: files that are not YAML text.
	f.Add([]byte{})
	f.Add([]byte("\x00\x01binary"))
	f.Add([]byte("name: caf\xe9\n"))
	// Issue 13 item 1: a key twice, in YAML and in JSON flow style.
	f.Add([]byte("name: p\nsteps:\n  - id: a\n    tool: fs__read\n    args: {path: secret.env, path: ok.txt}\n"))
	f.Add([]byte(`{"name":"p","steps":[{"id":"a","tool":"fs__read","args":{"path":"secret.env","path":"ok.txt"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := plans.Parse("f.yaml", data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for _, pr := range p.Validate(testTools) {
			if pr.Msg == "" {
				t.Fatalf("problem without a message: %+v", pr)
			}
		}
		if _, err := json.Marshal(p); err != nil {
			t.Fatalf("a parsed plan does not marshal: %v", err)
		}
		for i := range p.Steps {
			_, _ = p.StepWhen(i, nil)
			_, _ = p.StepArgs(i, nil)
		}
	})
}
