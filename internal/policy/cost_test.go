package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/api"
)

// costRules are conditions over every kind of variable, with and without
// comprehensions, some bounded before evaluation and some not.
var costRules = []string{
	`task.calls > 1000`,
	`args.?path.orValue("").startsWith("/srv/private/")`,
	`args.?path.orValue("").contains("/../")`,
	`args.?a.orValue("").contains(args.?b.orValue(""))`,
	`args.?a.orValue("").matches("^a+b$")`,
	`args.?a.orValue("") + args.?b.orValue("") == "ab"`,
	`"dev" in principal.roles && tool.name.startsWith("filesystem__")`,
	`principal.permissions.exists(p, p.startsWith("filesystem."))`,
	`tool.side_effects.all(s, s == "read") && tool.data_access_level == "internal"`,
	`args.?l.orValue([]).exists(x, x == "needle")`,
	`args.?l.orValue([]).exists(x, args.?l.orValue([]).exists(y, x != y))`,
	`size(args) > 3 || has(args.mode)`,
	`args.?m.orValue({}).exists(k, k.size() > 3)`,
}

func TestStaticSizeBound(t *testing.T) {
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	const top = 1 << maxSizeBoundLog2
	tests := []struct {
		when     string
		min, max uint64
	}{
		// Constant cost.
		{`task.calls > 1000`, top, top},
		{`args.?path.orValue("").startsWith("/srv/private/")`, top, top},
		// Linear in one argument, with a small factor.
		{`args.?path.orValue("").contains("/../")`, 1 << 20, top},
		// Linear in a list the rule reads: bounded, less than the top.
		{`"dev" in principal.roles`, 1 << 12, top / 2},
		{`args.?l.orValue([]).exists(x, x == "needle")`, 1 << 10, top / 2},
		// Quadratic: bounded only for small inputs.
		{`args.?a.orValue("").contains(args.?b.orValue(""))`, 1 << minSizeBoundLog2, 1 << 12},
		// A comprehension inside a comprehension over the arguments: the
		// estimate is past the limit for any bound tried.
		{`args.?l.orValue([]).exists(x, args.?l.orValue([]).exists(y, x != y))`, 0, 0},
		// Inside the comprehension args is not the variable but a map
		// whose value may be twice the bound; the estimate must not take
		// it for the variable.
		{`[{"x": args.?a.orValue("") + args.?a.orValue("")}].exists(args, args.?x.orValue("").contains(args.?x.orValue("")))`, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.when, func(t *testing.T) {
			ast, iss := env.Compile(tt.when)
			if iss.Err() != nil {
				t.Fatal(iss.Err())
			}
			if got := staticSizeBound(env, ast); got < tt.min || got > tt.max {
				t.Errorf("staticSizeBound = %d, want between %d and %d", got, tt.min, tt.max)
			}
		})
	}
}

// TestStaticCostBoundHolds is the claim that makes evaluating without the
// cost tracker safe: for inputs within a rule's size bound, the tracked
// program's actual cost is within the limit (so the tracker could not have
// stopped it) and the untracked program gives the same result.
func TestStaticCostBoundHolds(t *testing.T) {
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(12, 1))
	calls := 30
	if testing.Short() {
		calls = 8
	}
	var fast, tracked int
	for _, when := range costRules {
		r, err := compileRule(env, Rule{Name: "r", When: when, Effect: api.Deny})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		for range calls {
			in, facts, argv := randomCall(rng)
			size := inputSizeBound(in, facts)
			vars, err := ruleVars(env.CELTypeAdapter(), in, facts, argv)
			if err != nil {
				t.Fatal(err)
			}
			out, det, terr := r.tracked.Eval(vars)
			if size > r.sizeBound {
				tracked++
				continue
			}
			fast++
			if c := det.ActualCost(); c == nil || *c > ruleCostLimit {
				t.Fatalf("%s: input size %d is within the bound %d, but the tracked cost is %v, over %d (err %v)", when, size, r.sizeBound, c, ruleCostLimit, terr)
			}
			fout, _, ferr := r.fast.Eval(vars)
			if fmt.Sprint(out, terr) != fmt.Sprint(fout, ferr) {
				t.Fatalf("%s: tracked gave %v (%v), untracked %v (%v)", when, out, terr, fout, ferr)
			}
		}
	}
	// Both paths must have been exercised for the test to mean anything.
	if fast == 0 || tracked == 0 {
		t.Fatalf("evaluations: %d within the bound, %d over it; want both", fast, tracked)
	}
}

// randomCall is a call whose strings and lists have sizes from none to
// tens of thousands, in the arguments and in the principal.
func randomCall(rng *rand.Rand) (Input, toolFacts, map[string]any) {
	size := func() int { return []int{0, 1, 10, 300, 5000, 40000}[rng.IntN(6)] }
	str := func() string { return strings.Repeat("a", size()) + "b" }
	list := func() []any {
		l := make([]any, size()/10)
		for i := range l {
			l[i] = fmt.Sprint(i)
		}
		return l
	}
	argv := map[string]any{"path": "/srv/" + str(), "a": str(), "b": str(), "l": list(), "m": map[string]any{"k": 1.0, str(): true}}
	raw, err := json.Marshal(argv)
	if err != nil {
		panic(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(raw, &decoded); err != nil {
		panic(err)
	}
	in := Input{Principal: alice(), Tool: readTextFile(), Args: raw, Task: Task{ID: "t", Calls: rng.IntN(2000)}}
	for range size() / 100 {
		in.Principal.Roles = append(in.Principal.Roles, str()[:1])
	}
	return in, factsOf(in.Tool), decoded
}

// TestDecideOverTheSizeBound: a rule whose bound an input exceeds is
// evaluated with the cost tracker, and the limit still denies.
func TestDecideOverTheSizeBound(t *testing.T) {
	p := mustCompile(t, Config{Rules: []Rule{{Name: "nested", When: `args.a.contains(args.b)`, Effect: api.Allow}}})
	in := Input{Principal: alice(), Tool: readTextFile(), Task: Task{ID: "t", AllowTools: []string{"*"}}}
	tests := []struct {
		n    int
		want api.Verdict
	}{
		{n: 10, want: api.Verdict{Effect: api.Allow, Check: api.CheckRule, Rule: "nested"}},
		{n: 20000, want: api.Verdict{Effect: api.Deny, Check: api.CheckError, Rule: "nested"}},
	}
	for _, tt := range tests {
		in.Args = args("a", strings.Repeat("a", tt.n), "b", strings.Repeat("a", tt.n))
		got := p.Decide(in)
		if diff := cmp.Diff(tt.want, got, decisionOpts); diff != "" {
			t.Errorf("n=%d: Decide() mismatch (-want +got):\n%s\nreason: %s", tt.n, diff, got.Reason)
		}
		if tt.want.Effect == api.Deny && !strings.Contains(got.Reason, "cost limit exceeded") {
			t.Errorf("n=%d: reason %q does not name the cost limit", tt.n, got.Reason)
		}
	}
}

// TestEvalWithoutABound: a rule with no size bound is evaluated with the
// tracker even for an input of size 0.
func TestEvalWithoutABound(t *testing.T) {
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	r, err := compileRule(env, Rule{Name: "r", When: `args.?l.orValue([]).exists(x, args.?l.orValue([]).exists(y, x != y))`, Effect: api.Deny})
	if err != nil {
		t.Fatal(err)
	}
	if r.sizeBound != 0 || r.fast != nil {
		t.Fatalf("sizeBound = %d, want 0 and no untracked program", r.sizeBound)
	}
	vars, err := ruleVars(env.CELTypeAdapter(), Input{}, toolFacts{}, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if matched, err := r.eval(context.Background(), vars, 0); matched || err != nil {
		t.Errorf("eval = %v, %v; want false, nil", matched, err)
	}
}
