package policy

import (
	"fmt"
	"strings"

	"github.com/airlock-run/airlock/api"
)

// The content guard's findings in a call's arguments (issue 30 §1) take
// part in the decision in three ways: rules read them (findings), a
// finding under block denies before any rule can allow the call, and a
// finding under require_approval turns an allow into an approval request
// whose reason names each finding, masked (kind and path, never the
// value).

// guardBlock is the denial of a call whose arguments hold a finding under
// block, "" when none does.
func guardBlock(in Input) string {
	where := findingsUnder(in.Findings, "block")
	if where == "" {
		return ""
	}
	return fmt.Sprintf("denied: the arguments of %s hold %s (guard.arguments: block); nothing ran and the values were not recorded. Send the call without them (e.g. a reference to the secret instead of the secret), or ask an operator to change guard.arguments for this tool",
		in.Tool.Name, where)
}

// guardApproval turns an allow into require_approval when the arguments
// hold a finding under require_approval, and adds the findings to the
// reason of a decision that already requires approval.
func (p *Policy) guardApproval(in Input, facts toolFacts, d api.Verdict) api.Verdict {
	where := findingsUnder(in.Findings, "require_approval")
	if where == "" {
		return d
	}
	why := fmt.Sprintf("the arguments of %s hold %s (guard.arguments: require_approval; the values are masked)", in.Tool.Name, where)
	switch d.Effect {
	case api.Allow:
		return p.approval(api.CheckGuard, "", in.Tool.Name, facts, "", 0, why)
	case api.RequireApproval:
		d.Reason += "; " + why
	}
	return d
}

// findingsUnder lists "rule at path" for each finding whose action is
// action, once each.
func findingsUnder(fs []api.Finding, action string) string {
	var out []string
	seen := map[string]bool{}
	for _, f := range fs {
		w := f.Rule + " at " + f.Path
		if f.Action == action && !seen[w] {
			seen[w] = true
			out = append(out, clip(w))
		}
	}
	return strings.Join(out, ", ")
}

// celFindings is findings as rules read them: a list of maps with rule,
// path, action and where.
func celFindings(fs []api.Finding) []map[string]string {
	out := make([]map[string]string, 0, len(fs))
	for _, f := range fs {
		where := f.Where
		if where == "" {
			where = api.FindingsInArguments
		}
		out = append(out, map[string]string{"rule": f.Rule, "path": f.Path, "action": f.Action, "where": where})
	}
	return out
}

// ResultApproval is the decision on delivering a result the content guard
// holds (guard.results: require_approval; issue 30 §1): require_approval
// by the tool's approval group, else the policy's approval_group, with
// why as its reason; deny when there is no group (nobody could approve).
func (p *Policy) ResultApproval(t Tool, why string) api.Verdict {
	if p == nil {
		return api.Verdict{Effect: api.Deny, Check: api.CheckError, Reason: "denied: no policy is loaded; report this to an operator"}
	}
	return p.approval(api.CheckGuard, "", t.Name, factsOf(t), "", 0, why)
}
