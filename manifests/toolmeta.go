package manifests

// What a tool listing says a tool is: risk metadata in the shape of the
// SEP-2793 draft and recovery metadata after the SEP-3172 draft (README.md,
// "Tools say what they are"). The gateway puts both in each tool's _meta,
// made from the declaration (and the policy's default decision, which
// package policy computes: DescribeRisk); `airlock manifests scan` reads
// them back from an upstream that declares them (UpstreamTool.Risk,
// .Recovery) to pre-fill a skeleton.

import (
	"slices"
)

// The _meta keys of a listed tool. MCP's tool annotations would be the
// drafts' place, but the go-sdk's ToolAnnotations is a closed struct that
// drops members it does not know on both ends, so the metadata goes in
// _meta under airlock's prefix, as the spec allows any implementation to.
const (
	MetaRisk     = "airlock.dev/risk"
	MetaRecovery = "airlock.dev/recovery"
)

// RiskMeta is a tool's risk metadata. The first six members are SEP-2793's
// (draft of 2026-05-26, PR modelcontextprotocol#2793); the rest are
// airlock's, for what the draft has no word for.
type RiskMeta struct {
	RiskLevel Risk `json:"riskLevel"`
	// Category: read, mutate, delete or utility (the draft also has
	// observe and destroy, which side effects cannot tell apart).
	Category string `json:"category"`
	// Reversibility: auto when airlock can undo a call (a compensation,
	// run by airlock_rollback), none when it changes something airlock
	// cannot undo; absent for a tool that changes nothing.
	Reversibility string   `json:"reversibility,omitempty"`
	SideEffects   []string `json:"sideEffects"`
	// ApprovalRecommendation: none, single or multi (a quorum above 1),
	// from the policy's default decision for the tool.
	ApprovalRecommendation string `json:"approvalRecommendation"`

	DataAccessLevel DataLevel `json:"dataAccessLevel"`
	// Decision is the policy's default for a call of the tool (allow,
	// require_approval, deny); Rules says the policy's rules may decide
	// otherwise for some calls.
	Decision string `json:"decision"`
	Quorum   int    `json:"quorum,omitempty"`
	Rules    bool   `json:"rules,omitempty"`
	// Idempotent: airlock re-runs a call whose worker died mid-call.
	Idempotent bool `json:"idempotent"`
	// Covered is false for a tool no manifest declares (shown under
	// expose_uncovered), which airlock treats as high-risk writes.
	Covered bool `json:"covered"`
}

// RecoveryMeta is a tool's recovery metadata (after SEP-3172, whose draft
// names no members this project could find: the shape is airlock's).
type RecoveryMeta struct {
	// Compensable: a successful call is undone on rollback.
	Compensable bool `json:"compensable"`
	// Compensation is the call that undoes it (tool by its listed name).
	Compensation *RecoveryCall `json:"compensation,omitempty"`
	// Capture is the call made before the tool's, whose result the
	// compensation may use (before).
	Capture *RecoveryCall `json:"capture,omitempty"`
	// Trigger is the tool that runs compensations: airlock_rollback.
	Trigger string `json:"trigger,omitempty"`
}

// RecoveryCall is a compensation or capture: the tool called, its
// arguments as CEL expressions over args, call, roots, result and before
// (manifest Call), the condition and the call made instead.
type RecoveryCall struct {
	Tool      string            `json:"tool"`
	Arguments map[string]string `json:"arguments,omitempty"`
	When      string            `json:"when,omitempty"`
	Else      *RecoveryCall     `json:"else,omitempty"`
}

// RollbackTool is the gateway's rollback tool (RecoveryMeta.Trigger).
const RollbackTool = "airlock_rollback"

// DescribeRisk builds a tool's RiskMeta from what the policy knows of it
// (its facts, with an uncovered tool's assumptions filled in) and the
// policy's default decision.
func DescribeRisk(sideEffects []string, level DataLevel, risk Risk, idempotent, compensable, covered bool, decision string, quorum int, rules bool) RiskMeta {
	m := RiskMeta{RiskLevel: risk, SideEffects: slices.Clone(sideEffects), DataAccessLevel: level,
		Decision: decision, Rules: rules, Idempotent: idempotent, Covered: covered, ApprovalRecommendation: "none"}
	if m.SideEffects == nil {
		m.SideEffects = []string{}
	}
	if decision == "require_approval" {
		m.Quorum = max(quorum, 1)
		m.ApprovalRecommendation = "single"
		if m.Quorum > 1 {
			m.ApprovalRecommendation = "multi"
		}
	}
	changes := !onlyReads(sideEffects)
	switch {
	case slices.Contains(sideEffects, string(SideEffectDelete)):
		m.Category = "delete"
	case changes:
		m.Category = "mutate"
	case slices.Contains(sideEffects, string(SideEffectRead)):
		m.Category = "read"
	default:
		m.Category = "utility"
	}
	switch {
	case !changes:
	case compensable:
		m.Reversibility = "auto"
	default:
		m.Reversibility = "none"
	}
	return m
}

// onlyReads reports whether side effects change nothing (none, read).
func onlyReads(sideEffects []string) bool {
	for _, s := range sideEffects {
		if s != string(SideEffectNone) && s != string(SideEffectRead) {
			return false
		}
	}
	return true
}

// Recovery builds the tool's RecoveryMeta; exposed maps a tool name of
// its manifest to the name the listing shows.
func (t *Tool) Recovery(exposed func(string) string) RecoveryMeta {
	if t == nil {
		return RecoveryMeta{}
	}
	m := RecoveryMeta{Compensable: t.Compensable()}
	if m.Compensable {
		m.Compensation = recoveryCall(t.Compensation, exposed, 0)
		m.Trigger = RollbackTool
		m.Capture = recoveryCall(t.Capture, exposed, maxElse) // a capture has no else
	}
	return m
}

func recoveryCall(c *Call, exposed func(string) string, depth int) *RecoveryCall {
	if c == nil || depth > maxElse {
		return nil
	}
	r := &RecoveryCall{Tool: exposed(c.Tool), When: c.When, Else: recoveryCall(c.Else, exposed, depth+1)}
	if len(c.Args) > 0 {
		r.Arguments = make(map[string]string, len(c.Args))
		for k, v := range c.Args {
			r.Arguments[k] = v
		}
	}
	return r
}

// HintsOf are the MCP tool annotations that say what side effects (as
// the policy lists them) say, so that a client reading only readOnlyHint
// and the like is told the same as one reading RiskMeta: read-only when
// they change nothing; destructive when they delete or execute (write
// alone only adds, as a skeleton reads destructiveHint: false);
// idempotent as declared (or read-only); open world when they send or
// pay.
func HintsOf(sideEffects []string, idempotent bool) ToolHints {
	has := func(s SideEffect) bool { return slices.Contains(sideEffects, string(s)) }
	ro := onlyReads(sideEffects)
	destructive := !ro && (has(SideEffectDelete) || has(SideEffectExec))
	open := has(SideEffectSend) || has(SideEffectPay)
	return ToolHints{ReadOnlyHint: ro, DestructiveHint: &destructive, IdempotentHint: idempotent || ro, OpenWorldHint: &open}
}
