package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/api"
)

func TestRuleToolNames(t *testing.T) {
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		when string
		want *toolNames // nil: any tool
	}{
		{`tool.name == "a__x"`, &toolNames{exact: []string{"a__x"}}},
		{`"a__x" == tool.name`, &toolNames{exact: []string{"a__x"}}},
		{`tool.name in ["a__x", "b__y"]`, &toolNames{exact: []string{"a__x", "b__y"}}},
		{`tool.name.startsWith("a__")`, &toolNames{prefixes: []string{"a__"}}},
		{`tool.name == "a__x" && args.mode == "w"`, &toolNames{exact: []string{"a__x"}}},
		{`tool.name.startsWith("a__") && task.calls > 3 && args.mode == "w"`, &toolNames{prefixes: []string{"a__"}}},
		{`(tool.name == "a__x" || tool.name.startsWith("b__")) && args.mode == "w"`, &toolNames{exact: []string{"a__x"}, prefixes: []string{"b__"}}},
		{`(tool.name == "a__x" && task.calls > 1) || tool.name == "b__y"`, &toolNames{exact: []string{"a__x", "b__y"}}},
		// Any tool: the restriction is not what is evaluated first, or not
		// a restriction at all.
		{`args.mode == "w" && tool.name == "a__x"`, nil},
		{`tool.name == "a__x" || args.mode == "w"`, nil},
		{`tool.name != "a__x"`, nil},
		{`!(tool.name == "a__x")`, nil},
		{`tool.name.endsWith("__x")`, nil},
		{`tool.name in principal.roles`, nil},
		{`tool.name == args.tool`, nil},
		{`tool.server == "a"`, nil},
		{`tool.name.startsWith(principal.name)`, nil},
		{`true`, nil},
		{`["a__x"].exists(tool, tool == "a__x")`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.when, func(t *testing.T) {
			ast, iss := env.Compile(tt.when)
			if iss.Err() != nil {
				t.Fatal(iss.Err())
			}
			got, ok := ruleToolNames(ast.NativeRep().Expr())
			if tt.want == nil {
				if ok {
					t.Errorf("ruleToolNames = %+v, want any tool", got)
				}
				return
			}
			if !ok {
				t.Fatalf("ruleToolNames: any tool, want %+v", *tt.want)
			}
			if diff := cmp.Diff(*tt.want, got, cmp.AllowUnexported(toolNames{})); diff != "" {
				t.Errorf("ruleToolNames mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// indexTools are the tools the index tests call, and indexPrefixes prefixes
// some of them share.
var (
	indexTools    = []string{"filesystem__read_text_file", "filesystem__write_file", "memory__create_entities", "git__status"}
	indexPrefixes = []string{"filesystem__", "filesystem__read_", "memory__", "nothing__"}
)

// indexCall is a call to the named tool that passes every check before
// the rules.
func indexCall(tool string, argv map[string]any) Input {
	t := readTextFile()
	t.Name = tool
	t.Server, t.Upstream, _ = strings.Cut(tool, "__")
	var kv []any
	for k, v := range argv {
		kv = append(kv, k, v)
	}
	return Input{Principal: alice(), Tool: t, Args: args(kv...), Task: Task{ID: "t", Calls: 7, AllowTools: []string{"*"}}}
}

// TestIndexKeepsFirstMatch: the rule that decides is the first of all
// the rules that matches, whichever of them the index skips.
func TestIndexKeepsFirstMatch(t *testing.T) {
	const (
		read  = "filesystem__read_text_file"
		write = "filesystem__write_file"
		mem   = "memory__create_entities"
	)
	rule := func(name, when string, e api.Effect) Rule {
		r := Rule{Name: name, When: when, Effect: e}
		if e == api.RequireApproval {
			r.Group = "ops"
		}
		return r
	}
	long := strings.Repeat("a", 20000)
	tests := []struct {
		name  string
		rules []Rule
		args  map[string]any
		// want is the rule deciding each tool; "" means none (the default).
		want map[string]string
	}{
		{
			name: "a general rule before a tool's rule",
			rules: []Rule{
				rule("general", `task.calls > 5`, api.Deny),
				rule("write", `tool.name == "filesystem__write_file"`, api.Allow),
			},
			want: map[string]string{read: "general", write: "general", mem: "general"},
		},
		{
			name: "a tool's rule before a general rule",
			rules: []Rule{
				rule("write", `tool.name == "filesystem__write_file"`, api.Allow),
				rule("general", `task.calls > 5`, api.Deny),
			},
			want: map[string]string{read: "general", write: "write", mem: "general"},
		},
		{
			name: "a general rule between two tools' rules",
			rules: []Rule{
				rule("read", `tool.name == "filesystem__read_text_file" && task.calls > 100`, api.Allow),
				rule("general", `args.?mode.orValue("") == "w"`, api.Deny),
				rule("write", `tool.name in ["filesystem__write_file", "filesystem__read_text_file"]`, api.RequireApproval),
			},
			want: map[string]string{read: "write", write: "write", mem: ""},
		},
		{
			name: "prefixes and names interleaved",
			rules: []Rule{
				rule("fs-read", `tool.name.startsWith("filesystem__read_")`, api.Allow),
				rule("mem", `tool.name == "memory__create_entities"`, api.Deny),
				rule("fs", `tool.name.startsWith("filesystem__")`, api.RequireApproval),
				rule("late", `true`, api.Deny),
			},
			want: map[string]string{read: "fs-read", write: "fs", mem: "mem"},
		},
		{
			name: "a rule restricted by a name and a prefix is evaluated once",
			rules: []Rule{
				rule("both", `(tool.name == "filesystem__write_file" || tool.name.startsWith("filesystem__")) && task.calls > 100`, api.Allow),
				rule("general", `true`, api.Deny),
			},
			want: map[string]string{read: "general", write: "general", mem: "general"},
		},
		{
			name: "a failing rule for another tool is skipped",
			rules: []Rule{
				rule("write-mode", `tool.name == "filesystem__write_file" && args.mode == "w"`, api.Deny),
				rule("general", `true`, api.Allow),
			},
			// write: args.mode is missing, so the rule fails and denies.
			want: map[string]string{read: "general", write: "write-mode", mem: "general"},
		},
		{
			name: "a restriction evaluated after a failing term is not used",
			rules: []Rule{
				rule("mode-write", `args.mode == "w" || tool.name == "filesystem__write_file"`, api.Deny),
				rule("general", `true`, api.Allow),
			},
			want: map[string]string{read: "mode-write", write: "mode-write", mem: "mode-write"},
		},
		{
			// A failing term before a false one makes the && false, but
			// running out of cost stops the evaluation, and denies.
			name: "a restriction evaluated after a term that runs out of cost is not used",
			rules: []Rule{
				rule("costly-write", `args.a.contains(args.b) && tool.name == "filesystem__write_file"`, api.Allow),
				rule("general", `true`, api.Allow),
			},
			args: map[string]any{"a": long, "b": long},
			want: map[string]string{read: "costly-write", write: "costly-write", mem: "costly-write"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Rules: tt.rules, ApprovalGroup: "admins"}
			p, linear := mustCompile(t, cfg), newLinear(t, cfg)
			for tool, want := range tt.want {
				in := indexCall(tool, tt.args)
				got := p.Decide(in)
				if got.Rule != want {
					t.Errorf("%s: decided by rule %q (%s), want %q", tool, got.Rule, got.Reason, want)
				}
				want := linear.decide(t, in)
				if diff := cmp.Diff(want, got, decisionOpts); diff != "" || want.Reason != got.Reason {
					t.Errorf("%s: Decide() differs from the linear evaluation (-linear +Decide):\n%s\nreasons:\n%s\n%s", tool, diff, want.Reason, got.Reason)
				}
			}
		})
	}
}

// TestIndexMatchesLinearEvaluation compares Decide with a plain evaluation
// of every rule in order, the way rules were evaluated before the index
// (and before the untracked programs), over random rule sets.
func TestIndexMatchesLinearEvaluation(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 12))
	pick := func(l []string) string { return l[rng.IntN(len(l))] }
	toolTerm := func() string {
		switch rng.IntN(5) {
		case 0:
			return fmt.Sprintf(`tool.name == %q`, pick(indexTools))
		case 1:
			return fmt.Sprintf(`%q == tool.name`, pick(indexTools))
		case 2:
			return fmt.Sprintf(`tool.name in [%q, %q]`, pick(indexTools), pick(indexTools))
		case 3:
			return fmt.Sprintf(`tool.name.startsWith(%q)`, pick(indexPrefixes))
		default:
			return fmt.Sprintf(`(tool.name == %q || tool.name.startsWith(%q))`, pick(indexTools), pick(indexPrefixes))
		}
	}
	otherTerms := []string{
		`true`, `false`, `task.calls > 5`, `task.calls > 50`,
		`args.?path.orValue("").startsWith("/srv/a")`,
		`args.mode == "w"`, // fails when the call has no mode
		`principal.roles.exists(r, r == "dev")`,
		`has(args.mode) && args.mode.size() > 0`,
		`args.?a.orValue("").contains(args.?b.orValue(""))`, // out of cost for long a and b
		// The variables read whole and through each kind of access.
		`size(args) > 1`, `"mode" in args`, `args == {"path": "/srv/a/x"}`,
		`args.exists(k, k == "mode")`, `args.?missing.orValue(1.0) == 1.0`,
		`args.path.matches("^/srv/a/.*$")`, `tool.side_effects == ["read"]`,
		`principal.name == "alice" && task.elapsed_seconds >= 0.0`,
	}
	long := strings.Repeat("a", 20000)
	sets := 150
	if testing.Short() {
		sets = 40
	}
	var decided, failed, defaulted int
	for range sets {
		var rules []Rule
		for j := range 1 + rng.IntN(12) {
			var when string
			switch rng.IntN(4) {
			case 0:
				when = toolTerm()
			case 1:
				when = toolTerm() + " && " + pick(otherTerms)
			case 2:
				when = pick(otherTerms) + " && " + toolTerm()
			default:
				when = pick(otherTerms)
			}
			e := []api.Effect{api.Allow, api.Deny, api.RequireApproval}[rng.IntN(3)]
			rules = append(rules, Rule{Name: fmt.Sprintf("r%d", j), When: when, Effect: e})
		}
		cfg := Config{Rules: rules, ApprovalGroup: "admins"}
		p, linear := mustCompile(t, cfg), newLinear(t, cfg)
		for _, tool := range indexTools {
			argv := map[string]any{"path": pick([]string{"/srv/a/x", "/srv/b/y"})}
			if rng.IntN(2) == 0 {
				argv["mode"] = pick([]string{"w", "r"})
			}
			if rng.IntN(4) == 0 {
				argv["a"], argv["b"] = long, long
			}
			in := indexCall(tool, argv)
			want, got := linear.decide(t, in), p.Decide(in)
			if diff := cmp.Diff(want, got, decisionOpts); diff != "" || want.Reason != got.Reason {
				t.Fatalf("rules %+v, call %s %s:\nDecide() differs from the linear evaluation (-linear +Decide):\n%s\nreasons:\n%s\n%s", rules, tool, in.Args, diff, want.Reason, got.Reason)
			}
			switch got.Check {
			case api.CheckRule:
				decided++
			case api.CheckError:
				failed++
			default:
				defaulted++
			}
		}
	}
	if decided == 0 || failed == 0 || defaulted == 0 {
		t.Fatalf("outcomes: %d decided by a rule, %d by a failing rule, %d by default; want all three", decided, failed, defaulted)
	}
}

// linearPolicy is Decide with the rules evaluated the plain way: every
// rule in order, with the cost limit, through a map activation of the
// native values and a context for each evaluation.
type linearPolicy struct {
	rules     []Rule
	prgs      []cel.Program
	noRules   *Policy // the checks before the rules, and the default
	rulesFrom *Policy // for decision and approval
}

func newLinear(t *testing.T, cfg Config) *linearPolicy {
	t.Helper()
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	l := &linearPolicy{
		rules:     cfg.Rules,
		noRules:   mustCompile(t, Config{RiskDefaults: cfg.RiskDefaults, ApprovalGroup: cfg.ApprovalGroup, MaxArgBytes: cfg.MaxArgBytes}),
		rulesFrom: mustCompile(t, cfg),
	}
	for _, r := range cfg.Rules {
		ast, iss := env.Compile(r.When)
		if iss.Err() != nil {
			t.Fatal(iss.Err())
		}
		prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(ruleCostLimit), cel.InterruptCheckFrequency(100))
		if err != nil {
			t.Fatal(err)
		}
		l.prgs = append(l.prgs, prg)
	}
	return l
}

func (l *linearPolicy) decide(t *testing.T, in Input) api.Verdict {
	t.Helper()
	d := l.noRules.Decide(in)
	if d.Check != api.CheckDefault {
		return d
	}
	p := l.rulesFrom
	facts := factsOf(in.Tool)
	argv, reason := decodeArgs(in.Tool.Name, in.Args)
	if reason != "" {
		t.Fatal(reason)
	}
	act, err := cel.NewActivation(map[string]any{
		"principal": celPrincipal{Name: in.Principal.Name, Roles: in.Principal.Roles, Permissions: in.Principal.Permissions,
			DataLevel: string(in.Principal.DataLevel), SlackUserID: in.Principal.SlackUserID},
		"tool": celTool{Name: in.Tool.Name, Server: in.Tool.Server, Upstream: in.Tool.Upstream, SideEffects: facts.sideEffects,
			DataAccessLevel: string(facts.level), RequiredPermissions: facts.perms, Risk: string(facts.risk),
			Idempotent: facts.idempotent, Covered: facts.covered},
		"task": celTask{ID: in.Task.ID, Calls: int64(in.Task.Calls), ElapsedSeconds: in.Task.Elapsed.Seconds()},
		"args": argv,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range l.rules {
		ctx, cancel := context.WithTimeout(context.Background(), ruleEvalTimeout)
		out, _, err := l.prgs[i].ContextEval(ctx, act)
		cancel()
		if err != nil {
			return p.decision(api.Deny, api.CheckError, r.Name, fmt.Sprintf("denied: policy rule %q could not be evaluated for this call (%s); if the rule expects an argument this call lacks, supply it, otherwise ask an operator to fix the rule",
				r.Name, clip(err.Error())))
		}
		if out.Value() != true {
			continue
		}
		switch r.Effect {
		case api.Allow:
			return p.decision(api.Allow, api.CheckRule, r.Name, withReason(fmt.Sprintf("allowed by policy rule %q", r.Name), r.Reason))
		case api.RequireApproval:
			return p.approval(api.CheckRule, r.Name, in.Tool.Name, facts, r.Group, r.Quorum,
				withReason(fmt.Sprintf("policy rule %q requires approval", r.Name), r.Reason))
		default:
			why := r.Reason
			if why == "" {
				why = "ask an operator if this call is needed"
			}
			return p.decision(api.Deny, api.CheckRule, r.Name, fmt.Sprintf("denied by policy rule %q: %s", r.Name, why))
		}
	}
	return d
}
