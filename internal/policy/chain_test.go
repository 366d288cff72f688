package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// withoutChains is p with its rule chains removed, so that every rule is
// evaluated on its own, as before chains existed.
func withoutChains(p *Policy) *Policy {
	q := *p
	q.rules = slices.Clone(p.rules)
	for i := range q.rules {
		q.rules[i].chain = nil
	}
	return &q
}

// TestChainsDecideAsRulesOneByOne compiles rule sets whose rules form
// chains (general, loop-free, bounded rules), with rules that error,
// rules that match at various positions, restricted rules and rules with
// comprehensions breaking the runs, and checks for many calls that the
// policy decides exactly (effect, check, rule, reason) as the same policy
// evaluating its rules one by one.
func TestChainsDecideAsRulesOneByOne(t *testing.T) {
	var rules []Rule
	add := func(effect api.Effect, when string) {
		rules = append(rules, Rule{Name: fmt.Sprintf("r%d", len(rules)), When: when, Effect: effect, Reason: "because " + when})
	}
	for i := range 40 {
		add(api.Deny, fmt.Sprintf(`args.?path.orValue("").startsWith("/srv/private/%d/") || task.calls > %d`, i, 1000+i))
	}
	add(api.RequireApproval, `args.?mode.orValue("") == "approve"`)
	// Fails (no such key) when the call has a "strict" argument without
	// "level": the decision must name this rule.
	add(api.Deny, `has(args.strict) && args.level > 3.0`)
	add(api.Deny, `tool.name == "filesystem__write_file" && args.?force.orValue(false) == true`) // restricted
	for i := range 5 {
		add(api.Deny, fmt.Sprintf(`args.?path.orValue("") == "/deny/%d"`, i))
	}
	add(api.Deny, `args.?tags.orValue([]).exists(t, t == "secret")`) // loops: ends the run
	add(api.Allow, `// a comment ending the line
"dev" in principal.roles && args.?path.orValue("").endsWith(".md")`)
	for i := range 35 {
		add(api.Deny, fmt.Sprintf(`args.?n.orValue(0.0) == %d.0`, i))
	}
	add(api.Allow, `true`)

	p := mustCompile(t, Config{Rules: rules, ApprovalGroup: "ops"})
	chains, shared := 0, 0
	for _, r := range p.rules {
		if r.chain != nil {
			chains++
			shared += r.chain.shared
		}
	}
	// args.?path.orValue("") in the first run, in the runs after the
	// restricted rule and after the looping one; args.?n.orValue(0.0).
	if shared < 3 {
		t.Fatalf("%d shared argument reads, want at least 3", shared)
	}
	if chains < 4 {
		t.Fatalf("%d chains compiled, want at least 4 (runs of 32 at most, broken by the restricted and the looping rule)", chains)
	}
	plain := withoutChains(p)

	argsList := []string{
		`{}`, `{"path": "/srv/private/0/x"}`, `{"path": "/srv/private/17/x"}`, `{"path": "/srv/private/39/x"}`,
		`{"path": "/srv/other"}`, `{"mode": "approve"}`, `{"strict": true}`, `{"strict": true, "level": 5}`,
		`{"strict": true, "level": 1}`, `{"force": true}`, `{"path": "/deny/3"}`, `{"tags": ["a", "secret"]}`,
		`{"path": "notes.md"}`, `{"n": 0}`, `{"n": 34}`, `{"n": 35}`, `{"path": 7}`, `{"mode": 1}`,
		`{"path": "` + strings.Repeat("x", 5000) + `"}`,
	}
	tools := []Tool{readTextFile(), writeFile("/srv")}
	seen := map[string]bool{}
	for _, tool := range tools {
		for _, calls := range []int{0, 1020, 2000} {
			for _, a := range argsList {
				in := Input{Principal: alice(), Tool: tool, Args: json.RawMessage(a),
					Task: Task{ID: "t", Calls: calls, AllowTools: []string{"*"}}}
				got, want := p.Decide(in), plain.Decide(in)
				if got != want {
					t.Errorf("%s %s calls=%d:\nchained   %+v\none by one %+v", tool.Name, a, calls, got, want)
				}
				seen[got.Check+"/"+got.Rule] = true
			}
		}
	}
	// The inputs reach decisions throughout the rules, including the
	// failing rule, for the comparison to mean something.
	for _, k := range []string{"rule/r0", "error/r0", "rule/r17", "rule/r39", "rule/r40", "error/r41", "rule/r41", "rule/r42",
		"rule/r46", "rule/r48", "rule/r49", "rule/r50", "rule/r84", "rule/r85"} {
		if !seen[k] {
			t.Errorf("no input was decided by %s; decided: %v", k, seen)
		}
	}
}
