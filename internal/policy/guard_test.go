package policy

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// TestGuardFindings: rules read findings; a finding under block denies
// even where a rule would allow; one under require_approval turns an
// allow into an approval request naming the finding, never a value; an
// approval without any group is denied (fail closed); annotate leaves the
// decision alone.
func TestGuardFindings(t *testing.T) {
	rules := []Rule{
		{Name: "no-private-keys", When: `findings.exists(f, f.rule == "private-key" && f.where == "arguments")`, Effect: api.Deny, Reason: "no keys"},
		{Name: "allow-all", When: `true`, Effect: api.Allow},
	}
	withGroup, err := Compile(Config{Rules: rules, ApprovalGroup: "sec"})
	if err != nil {
		t.Fatal(err)
	}
	noGroup, err := Compile(Config{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	f := func(rule, action string) api.Finding {
		return api.Finding{Rule: rule, Path: "$.env.KEY", Action: action, Where: api.FindingsInArguments}
	}
	for _, tc := range []struct {
		name     string
		p        *Policy
		fs       []api.Finding
		effect   api.Effect
		check    string
		contains string
	}{
		{"none", withGroup, nil, api.Allow, api.CheckRule, "allow-all"},
		{"cel sees findings", withGroup, []api.Finding{f("private-key", "annotate")}, api.Deny, api.CheckRule, "no keys"},
		{"block before rules", withGroup, []api.Finding{f("aws-access-key", "block"), f("email", "annotate")}, api.Deny, api.CheckGuard, "aws-access-key at $.env.KEY"},
		{"require approval", withGroup, []api.Finding{f("aws-access-key", "require_approval")}, api.RequireApproval, api.CheckGuard, "aws-access-key at $.env.KEY (guard.arguments: require_approval"},
		{"require approval, no group", noGroup, []api.Finding{f("aws-access-key", "require_approval")}, api.Deny, api.CheckError, "no approver group"},
		{"annotate", withGroup, []api.Finding{f("aws-access-key", "annotate")}, api.Allow, api.CheckRule, "allow-all"},
		{"redact", withGroup, []api.Finding{f("aws-access-key", "redact")}, api.Allow, api.CheckRule, "allow-all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.p.Decide(Input{Principal: alice(), Tool: writeFile("/w"), Args: []byte(`{"path":"/w/a","content":"x"}`), Task: Task{AllowTools: []string{"*"}}, Findings: tc.fs})
			if d.Effect != tc.effect || d.Check != tc.check || !strings.Contains(d.Reason, tc.contains) {
				t.Errorf("got %s/%s %q; want %s/%s containing %q", d.Effect, d.Check, d.Reason, tc.effect, tc.check, tc.contains)
			}
			if tc.effect == api.RequireApproval && d.Group != "sec" {
				t.Errorf("group %q", d.Group)
			}
		})
	}
}

// TestGuardFindingsAddToApproval: a call that already needs approval
// (the tool's risk) keeps its reason and gains the findings.
func TestGuardFindingsAddToApproval(t *testing.T) {
	p, err := Compile(Config{ApprovalGroup: "sec"})
	if err != nil {
		t.Fatal(err)
	}
	tool := writeFile("/w")
	tool.Decl.Risk = "high"
	d := p.Decide(Input{Principal: alice(), Tool: tool, Args: []byte(`{"path":"/w/a","content":"x"}`), Task: Task{AllowTools: []string{"*"}},
		Findings: []api.Finding{{Rule: "jwt", Path: "$.content", Action: "require_approval", Where: "arguments"}}})
	if d.Effect != api.RequireApproval || d.Check != api.CheckDefault || !strings.Contains(d.Reason, "jwt at $.content") {
		t.Errorf("%+v", d)
	}
}
