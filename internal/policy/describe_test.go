package policy

import (
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// TestDescribe: what a listing says of a tool is what Decide would do by
// default, and each way the default is reached (risk defaults, the
// manifest's group and quorum, the policy's fallback group, none at all,
// an uncovered tool, rules naming the tool or not) is told apart.
func TestDescribe(t *testing.T) {
	high := &manifests.Tool{SideEffects: []manifests.SideEffect{manifests.SideEffectWrite}, DataAccessLevel: manifests.DataInternal, Risk: manifests.RiskHigh}
	grouped := *high
	grouped.Approval = &manifests.Approval{Group: "ops", Quorum: 3}
	low := &manifests.Tool{SideEffects: []manifests.SideEffect{manifests.SideEffectRead}, DataAccessLevel: manifests.DataPublic, Risk: manifests.RiskLow}
	compile := func(cfg Config) *Policy {
		p, err := Compile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	rule := []Rule{{Name: "r", When: `tool.name == "s__high"`, Effect: api.Deny}}
	cases := []struct {
		name     string
		p        *Policy
		tool     Tool
		decision string
		quorum   int
		rec      string
		rules    bool
	}{
		{"nil policy, low", nil, Tool{Name: "s__low", Decl: low}, "allow", 0, "none", false},
		{"no group anywhere", compile(Config{}), Tool{Name: "s__high", Decl: high}, "deny", 0, "none", false},
		{"the manifest's group and quorum", compile(Config{}), Tool{Name: "s__high", Decl: &grouped}, "require_approval", 3, "multi", false},
		{"the policy's fallback group", compile(Config{ApprovalGroup: "ops"}), Tool{Name: "s__high", Decl: high}, "require_approval", 1, "single", false},
		{"risk defaults", compile(Config{RiskDefaults: map[manifests.Risk]api.Effect{manifests.RiskHigh: api.Allow}}), Tool{Name: "s__high", Decl: &grouped}, "allow", 0, "none", false},
		{"uncovered", compile(Config{ApprovalGroup: "ops"}), Tool{Name: "s__x"}, "require_approval", 1, "single", false},
		{"a rule names it", compile(Config{Rules: rule}), Tool{Name: "s__high", Decl: &grouped}, "require_approval", 3, "multi", true},
		{"a rule names another", compile(Config{Rules: rule}), Tool{Name: "s__low", Decl: low}, "allow", 0, "none", false},
	}
	for _, c := range cases {
		d := c.p.Describe(c.tool)
		if d.Decision != c.decision || d.Quorum != c.quorum || d.ApprovalRecommendation != c.rec || d.Rules != c.rules {
			t.Errorf("%s: decision %s quorum %d recommendation %s rules %v; want %s %d %s %v", c.name, d.Decision, d.Quorum, d.ApprovalRecommendation, d.Rules,
				c.decision, c.quorum, c.rec, c.rules)
		}
		if c.tool.Decl == nil && (d.Covered || d.RiskLevel != manifests.RiskHigh || d.DataAccessLevel != manifests.DataRestricted) {
			t.Errorf("%s: %+v, want what the policy assumes of an uncovered tool", c.name, d)
		}
		// What Decide does by default agrees (no arguments, every grant).
		if c.p == nil || c.rules {
			continue
		}
		v := c.p.Decide(Input{Principal: api.Principal{Name: "p", Permissions: []string{"*"}, DataLevel: manifests.DataRestricted},
			Tool: c.tool, Task: Task{AllowTools: []string{"*"}}})
		if string(v.Effect) != d.Decision || (v.Effect == api.RequireApproval && v.Quorum != d.Quorum) {
			t.Errorf("%s: Decide %s (quorum %d), Describe %s (quorum %d)", c.name, v.Effect, v.Quorum, d.Decision, d.Quorum)
		}
	}
}
