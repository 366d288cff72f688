package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/jsoncanon"
	"github.com/airlock-run/airlock/manifests"
)

// Input is one call to judge.
type Input struct {
	Principal api.Principal
	Tool      Tool
	// Args are the call's arguments, a JSON object; empty or null means {}.
	Args json.RawMessage
	Task Task
	// Findings are the content guard's findings in Args (guard.go).
	Findings []api.Finding
}

// levels orders data access levels.
var levels = map[manifests.DataLevel]int{
	manifests.DataPublic:       0,
	manifests.DataInternal:     1,
	manifests.DataConfidential: 2,
	manifests.DataSensitive:    3,
	manifests.DataRestricted:   4,
}

// toolFacts is what the policy knows about a tool, with the assumptions for
// tools no manifest covers filled in.
type toolFacts struct {
	covered     bool
	sideEffects []string
	level       manifests.DataLevel
	perms       []string
	risk        manifests.Risk
	idempotent  bool
	approval    *manifests.Approval
	pathArgs    []string
	openWorld   bool
}

var uncoveredSideEffects = []string{string(manifests.SideEffectWrite)}

func factsOf(t Tool) toolFacts {
	d := t.Decl
	if d == nil {
		return toolFacts{sideEffects: uncoveredSideEffects, level: manifests.DataRestricted, risk: manifests.RiskHigh, openWorld: true}
	}
	se := make([]string, len(d.SideEffects))
	for i, s := range d.SideEffects {
		se[i] = string(s)
	}
	return toolFacts{
		covered:     true,
		sideEffects: se,
		level:       d.DataAccessLevel,
		perms:       d.RequiredPermissions,
		risk:        d.Risk,
		idempotent:  d.Idempotent,
		approval:    d.Approval,
		pathArgs:    d.PathArgs,
		openWorld:   d.OpenWorld,
	}
}

// Decide judges one call. It never panics; see the package documentation
// for the order of the checks.
func (p *Policy) Decide(in Input) (d api.Verdict) {
	if p == nil {
		return api.Verdict{Effect: api.Deny, Check: api.CheckError, Reason: "denied: no policy is loaded; report this to an operator"}
	}
	defer func() {
		if r := recover(); r != nil {
			d = p.decision(api.Deny, api.CheckError, "", fmt.Sprintf("denied: internal policy error (panic: %v); report this to an operator", r))
		}
	}()
	facts := factsOf(in.Tool)
	if check, reason := gate(in.Principal, in.Task, in.Tool, facts); check != "" {
		return p.decision(api.Deny, check, "", reason)
	}
	if reason := guardBlock(in); reason != "" { // guard.go
		return p.decision(api.Deny, api.CheckGuard, "", reason)
	}
	defer func() { d = p.guardApproval(in, facts, d) }()

	// size, json
	if len(in.Args) > p.maxArgBytes {
		return p.decision(api.Deny, api.CheckSize, "", fmt.Sprintf("denied: the arguments to %s are %d bytes, over the limit of %d; send less, e.g. split the content across several calls",
			in.Tool.Name, len(in.Args), p.maxArgBytes))
	}
	args, reason := decodeArgs(in.Tool.Name, in.Args)
	if reason != "" {
		return p.decision(api.Deny, api.CheckJSON, "", reason)
	}

	// schema
	if len(bytes.TrimSpace(in.Tool.InputSchema)) > 0 {
		sch := p.schemas.get(in.Tool.InputSchema)
		if err := sch.err; err != nil {
			return p.decision(api.Deny, api.CheckSchema, "", fmt.Sprintf("denied: the input schema of %s cannot be used (%s), so its arguments cannot be checked; ask an operator to fix the upstream server's schema",
				in.Tool.Name, clip(err.Error())))
		}
		if err := validateArgs(sch, args); err != nil {
			return p.decision(api.Deny, api.CheckSchema, "", fmt.Sprintf("denied: the arguments do not match the input schema of %s: %s; fix the arguments and call again",
				in.Tool.Name, clip(err.Error())))
		}
	}

	// path
	if reason := checkPaths(in.Tool, facts.pathArgs, args); reason != "" {
		return p.decision(api.Deny, api.CheckPath, "", reason)
	}

	// rule
	if len(p.rules) > 0 {
		if d, ok := p.evalRules(in, facts, args); ok {
			return d
		}
	}

	// default
	eff, ok := p.riskDefaults[facts.risk]
	if !ok {
		return p.decision(api.Deny, api.CheckError, "", fmt.Sprintf("denied: %s has unknown risk tier %q, so there is no default decision; ask an operator to fix its manifest",
			in.Tool.Name, facts.risk))
	}
	what := fmt.Sprintf("%s risk", facts.risk)
	if !facts.covered {
		what = "high risk (no manifest covers it)"
	}
	switch eff {
	case api.Allow:
		return p.decision(api.Allow, api.CheckDefault, "", fmt.Sprintf("allowed: %s is %s, which the policy allows by default", in.Tool.Name, what))
	case api.RequireApproval:
		return p.approval(api.CheckDefault, "", in.Tool.Name, facts, "", 0,
			fmt.Sprintf("%s is %s, which needs approval by default", in.Tool.Name, what))
	default:
		return p.decision(api.Deny, api.CheckDefault, "", fmt.Sprintf("denied: %s is %s, which the policy denies by default; ask an operator for a rule that allows this call", in.Tool.Name, what))
	}
}

// Visible reports whether tool should be listed to the principal within the
// task: the allowlist, permission and data level checks of Decide. A tool
// that is not visible would be denied whatever its arguments.
func (p *Policy) Visible(pr api.Principal, t Task, tool Tool) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			ok = false
		}
	}()
	check, _ := gate(pr, t, tool, factsOf(tool))
	return check == ""
}

// gate runs the checks that depend only on who calls which tool in which
// task: allowlist, permission, data level. It returns the failing check and
// the reason, or "" when all pass.
func gate(pr api.Principal, t Task, tool Tool, facts toolFacts) (check, reason string) {
	// allowlist
	if len(t.AllowTools) == 0 {
		return api.CheckAllowlist, fmt.Sprintf("denied: task %q allows no tools; start a task whose allowlist includes %s", t.ID, tool.Name)
	}
	matched := false
	for _, g := range t.AllowTools {
		// Every glob is checked, even after a match, so that a malformed
		// one denies whatever its position.
		ok, err := path.Match(g, tool.Name)
		if err != nil {
			return api.CheckError, fmt.Sprintf("denied: the allowlist of task %q has a malformed pattern %q (%v); start the task again with a corrected allowlist", t.ID, g, err)
		}
		matched = matched || ok
	}
	if !matched {
		return api.CheckAllowlist, fmt.Sprintf("denied: %s is not in the allowlist of task %q (%s); use a tool the task allows, or start a task whose allowlist includes it",
			tool.Name, t.ID, clip(strings.Join(t.AllowTools, ", ")))
	}

	// permission
	var missing []string
	for _, need := range facts.perms {
		if !holds(pr.Permissions, need) {
			missing = append(missing, fmt.Sprintf("%q", need))
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		return api.CheckPermission, fmt.Sprintf("denied: principal %q lacks permission %s required by %s; ask an operator to grant it through a role", pr.Name, missing[0], tool.Name)
	default:
		return api.CheckPermission, fmt.Sprintf("denied: principal %q lacks permissions %s required by %s; ask an operator to grant them through a role", pr.Name, strings.Join(missing, ", "), tool.Name)
	}

	// data_level
	have, ok := levels[pr.DataLevel]
	if !ok {
		return api.CheckDataLevel, fmt.Sprintf("denied: principal %q has unknown data access level %q (levels are public, internal, confidential, sensitive, restricted); ask an operator to fix the principal", pr.Name, pr.DataLevel)
	}
	need, ok := levels[facts.level]
	if !ok {
		return api.CheckDataLevel, fmt.Sprintf("denied: %s declares unknown data access level %q; ask an operator to fix its manifest", tool.Name, facts.level)
	}
	if have < need {
		uncovered := ""
		if !facts.covered {
			uncovered = " (no manifest covers it, so it is treated as restricted)"
		}
		return api.CheckDataLevel, fmt.Sprintf("denied: %s handles %s data%s but principal %q is cleared only for %s; ask an operator to raise the principal's data access level",
			tool.Name, facts.level, uncovered, pr.Name, pr.DataLevel)
	}
	return "", ""
}

// holds reports whether the held permissions grant need: exactly, through
// "*", or through a "prefix.*" wildcard.
func holds(held []string, need string) bool {
	for _, h := range held {
		if h == need || h == "*" {
			return true
		}
		if prefix, ok := strings.CutSuffix(h, "*"); ok && strings.HasSuffix(prefix, ".") &&
			len(need) > len(prefix) && strings.HasPrefix(need, prefix) {
			return true
		}
	}
	return false
}

// decodeArgs decodes the arguments, which must be a JSON object, with
// numbers exact (jsoncanon.Decode): an integer is a CEL int (or uint), so
// 9007199254740993 is not 9007199254740992, and a number that has no exact
// value is refused rather than judged as a neighbour.
func decodeArgs(tool string, raw json.RawMessage) (map[string]any, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, ""
	}
	v, err := jsoncanon.Decode(raw)
	// A repeated key decodes to its last value in encoding/json, while an
	// upstream's parser may keep the first: the decision would be about
	// other arguments than the ones that run. The gateway refuses these
	// before the call is recorded; this catches any other way in.
	var dup *jsoncanon.DuplicateKeyError
	var num *jsoncanon.NumberError
	switch {
	case errors.As(err, &dup):
		return nil, fmt.Sprintf("denied: the arguments to %s are ambiguous: %s (JSON parsers disagree on which value counts); send each key once", tool, clip(dup.Error()))
	case errors.As(err, &num):
		return nil, fmt.Sprintf("denied: the arguments to %s: %s", tool, num.Error())
	case err != nil:
		return nil, fmt.Sprintf("denied: the arguments to %s are not valid JSON (%s); send a JSON object", tool, clip(err.Error()))
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Sprintf("denied: the arguments to %s must be a JSON object, not %s; send an object of named arguments", tool, aJSONType(v))
	}
	return m, ""
}

// aJSONType is jsonTypeName with its article.
func aJSONType(v any) string {
	n := jsonTypeName(v)
	if n == "array" || n == "object" {
		return "an " + n
	}
	return "a " + n
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64, int64, uint64, json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// evalRules runs the rules in order, skipping those the index shows cannot
// match the tool; ok is false when none matched.
func (p *Policy) evalRules(in Input, facts toolFacts, args map[string]any) (api.Verdict, bool) {
	vars, err := ruleVars(p.adapter, in, facts, args)
	if err != nil {
		return p.decision(api.Deny, api.CheckError, "", fmt.Sprintf("denied: the policy rules cannot see this call (%v); report this to an operator", err)), true
	}
	// One deadline, ruleEvalTimeout after the rules start, bounds all the
	// comprehensions of a decision (only they check it). Its context is
	// made when the first rule with a comprehension needs it.
	deadline := time.Now().Add(ruleEvalTimeout)
	var ctx context.Context
	size := inputSizeBound(in, facts)
	var buf [32]int
	cands := p.index.candidates(in.Tool.Name, buf[:])
	for pos := 0; pos < len(cands); pos++ {
		i := cands[pos]
		r := &p.rules[i]
		// A chain covers rules i..i+n-1, which as rules that can match
		// any tool are all candidates.
		if c := r.chain; c != nil && size <= c.sizeBound && pos+c.n <= len(cands) && cands[pos+c.n-1] == i+c.n-1 {
			if k, ok := c.eval(vars); ok {
				if k < 0 {
					pos += c.n - 1
					continue
				}
				return p.ruleDecision(&p.rules[i+k], in, facts), true
			}
			// Otherwise the rules one by one, from i.
		}
		if r.loops && ctx == nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(context.Background(), deadline)
			defer cancel()
		}
		matched, err := r.eval(ctx, vars, size)
		if err != nil {
			return p.decision(api.Deny, api.CheckError, r.Name, fmt.Sprintf("denied: policy rule %q could not be evaluated for this call (%s); if the rule expects an argument this call lacks, supply it, otherwise ask an operator to fix the rule",
				r.Name, clip(err.Error()))), true
		}
		if matched {
			return p.ruleDecision(r, in, facts), true
		}
	}
	return api.Verdict{}, false
}

// ruleDecision is the decision of rule r, which matched.
func (p *Policy) ruleDecision(r *compiledRule, in Input, facts toolFacts) api.Verdict {
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

func withReason(s, reason string) string {
	if reason == "" {
		return s
	}
	return s + ": " + reason
}

// approval builds a require_approval decision, choosing the approver group
// and quorum: the rule's group, else the manifest's, else the policy's
// fallback group. Without any group the call is denied.
func (p *Policy) approval(check, rule, tool string, facts toolFacts, group string, quorum int, why string) api.Verdict {
	switch {
	case group != "":
	case facts.approval != nil && strings.TrimSpace(facts.approval.Group) != "":
		group = facts.approval.Group
		if quorum == 0 {
			quorum = facts.approval.EffectiveQuorum()
		}
	case p.approvalGrp != "":
		group = p.approvalGrp
	default:
		return p.decision(api.Deny, api.CheckError, rule, fmt.Sprintf("denied: %s, but no approver group is configured (not by the rule, the tool's manifest, nor the policy's approval_group), so nobody could approve it; ask an operator to name an approver group", why))
	}
	if quorum < 1 {
		quorum = 1
	}
	d := p.decision(api.RequireApproval, check, rule, fmt.Sprintf("%s; waiting for %d approval(s) from group %q", why, quorum, group))
	d.Group, d.Quorum = group, quorum
	return d
}

func (p *Policy) decision(e api.Effect, check, rule, reason string) api.Verdict {
	return api.Verdict{Effect: e, Check: check, Rule: rule, Reason: reason, Version: p.version}
}

// maxReasonPart bounds text that comes from the call (paths, validator and
// evaluator errors that quote the arguments) inside a reason.
const maxReasonPart = 400

func clip(s string) string {
	if len(s) <= maxReasonPart {
		return s
	}
	cut := maxReasonPart
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// ReadsTaskCounters reports whether a rule that may apply to the tool
// named (exposed name) reads the task's counters (task.calls,
// task.elapsed_seconds). Such a decision depends on how many calls the
// task has admitted and when, which differs between two attempts of a
// workflow task, so the worker does not run such a call inside the local
// activity that decides it (activities.DecideAndCall): a dropped attempt
// would have run a call that the retried one may deny.
func (p *Policy) ReadsTaskCounters(tool string) bool {
	if p == nil {
		return false
	}
	var buf [32]int
	for _, i := range p.index.candidates(tool, buf[:]) {
		if p.rules[i].countsTask {
			return true
		}
	}
	return false
}

// Describe says what the policy enforces on tool before any call, for its
// listing (the risk metadata of manifests.RiskMeta): the facts it judges
// by, with an uncovered tool's assumptions, and the default decision for
// its risk tier, which a require_approval without any approver group
// turns into deny as Decide does. Rules says some rule may decide calls
// of it otherwise (by their arguments, the principal or the task). A nil
// Policy describes the default risk effects.
func (p *Policy) Describe(tool Tool) manifests.RiskMeta {
	f := factsOf(tool)
	eff, rules, fallback := defaultRiskEffects[f.risk], false, ""
	if p != nil {
		eff, fallback = p.riskDefaults[f.risk], p.approvalGrp
		rules = len(p.index.candidates(tool.Name, nil)) > 0
	}
	if eff == "" {
		eff = api.Deny // an unknown tier, as Decide
	}
	quorum := 0
	if eff == api.RequireApproval {
		switch {
		case f.approval != nil && strings.TrimSpace(f.approval.Group) != "":
			quorum = f.approval.EffectiveQuorum()
		case fallback != "":
			quorum = 1
		default:
			eff = api.Deny
		}
	}
	return manifests.DescribeRisk(f.sideEffects, f.level, f.risk, f.idempotent, tool.Decl.Compensable(), f.covered, string(eff), quorum, rules)
}
