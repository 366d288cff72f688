package manifests

// What a skeleton takes from an upstream that declares risk and recovery
// metadata in its tools' _meta (MetaRisk, MetaRecovery), as airlock's own
// listing does: risk, side effects, data access level, idempotency,
// approval, and a capture and compensation a manifest can hold. Only
// values a manifest accepts are taken; the rest is named in a REVIEW
// comment. The upstream says this about itself, so each value taken says
// where it came from.

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/airlock-run/airlock/internal/redact"
)

// maxDeclaredMeta bounds the JSON of one tool's declared metadata a
// skeleton reads; beyond it the metadata is ignored.
const maxDeclaredMeta = 64 << 10

// maxDeclaredExpr bounds one declared CEL expression.
const maxDeclaredExpr = 2000

// maxDeclaredQuorum bounds a declared quorum taken into a skeleton.
const maxDeclaredQuorum = 20

// declaredMeta decodes one of the tool's _meta keys into v; it reports
// whether there was such a key, and why it could not be read.
func declaredMeta(meta map[string]any, key string, v any) (present bool, problem string) {
	raw, ok := meta[key]
	if !ok {
		return false, ""
	}
	b, err := json.Marshal(raw)
	switch {
	case err != nil:
		return true, fmt.Sprintf("%s cannot be read (%v); ignored.", key, err)
	case len(b) > maxDeclaredMeta:
		return true, fmt.Sprintf("%s is %d bytes, over %d; ignored.", key, len(b), maxDeclaredMeta)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(v); err != nil {
		return true, fmt.Sprintf("%s is not the shape airlock lists (%v); ignored.", key, err)
	}
	return true, ""
}

// applyDeclaredRisk overrides the annotations' guess with what the tool
// declares under MetaRisk.
func (g *toolGuess) applyDeclaredRisk(meta map[string]any, hasHints bool) {
	var d RiskMeta
	present, problem := declaredMeta(meta, MetaRisk, &d)
	if problem != "" {
		g.why = append(g.why, "REVIEW: "+problem)
	}
	if !present || problem != "" {
		return
	}
	// What the annotations suggested gives way to the declaration.
	hinted := g.why[:0:0]
	for _, w := range g.why {
		if !strings.HasPrefix(w, "REVIEW: "+MetaRisk) {
			hinted = append(hinted, w)
		}
	}
	g.why, g.declared = nil, true
	var took, refused []string
	if slices.Contains(risks, d.RiskLevel) {
		if riskRank(d.RiskLevel) < riskRank(g.risk) {
			g.why = append(g.why, fmt.Sprintf("REVIEW: the declared riskLevel %s is lower than the %s the annotations suggest (MCP's defaults where unset).", d.RiskLevel, g.risk))
		}
		g.risk = d.RiskLevel
		took = append(took, "riskLevel "+string(d.RiskLevel))
	} else if d.RiskLevel != "" {
		refused = append(refused, fmt.Sprintf("riskLevel %q", d.RiskLevel))
	}
	var ses []SideEffect
	for _, s := range d.SideEffects {
		se := SideEffect(s)
		switch {
		case !slices.Contains(sideEffects, se):
			refused = append(refused, fmt.Sprintf("side effect %q", s))
		case !slices.Contains(ses, se):
			ses = append(ses, se)
		}
	}
	if len(ses) > 1 { // none goes with nothing else
		ses = slices.DeleteFunc(ses, func(s SideEffect) bool { return s == SideEffectNone })
	}
	if len(ses) > 0 {
		g.sideEffects = ses
		took = append(took, "side effects")
	}
	if slices.Contains(dataLevels, d.DataAccessLevel) {
		g.level = d.DataAccessLevel
		took = append(took, "data access level "+string(d.DataAccessLevel))
	} else if d.DataAccessLevel != "" {
		refused = append(refused, fmt.Sprintf("dataAccessLevel %q", d.DataAccessLevel))
	}
	g.idempotent = d.Idempotent
	took = append(took, fmt.Sprintf("idempotent %t", d.Idempotent))
	switch {
	case d.ApprovalRecommendation == "multi" || d.Quorum > 1:
		g.approval, g.quorum = true, min(max(d.Quorum, 2), maxDeclaredQuorum)
		took = append(took, fmt.Sprintf("approval by %d", g.quorum))
	case d.ApprovalRecommendation == "single" || d.Decision == "require_approval":
		g.approval, g.quorum = true, 0
		took = append(took, "approval")
	default:
		// A high tier needs an approver group by default whatever the
		// upstream recommends.
		g.approval = g.risk == RiskHigh || g.risk == RiskCritical
	}
	if len(took) > 0 {
		g.why = append(g.why, fmt.Sprintf("REVIEW: taken from what the server declares (%s): %s. A server can say anything about itself.", MetaRisk, strings.Join(took, ", ")))
	}
	if len(refused) > 0 {
		g.why = append(g.why, fmt.Sprintf("REVIEW: the server also declares %s, which a manifest cannot hold; ignored.", strings.Join(refused, ", ")))
	}
	if len(hinted) > 0 && hasHints {
		g.why = append(g.why, "Its annotations alone would say: "+strings.Join(strings.Fields(strings.ReplaceAll(strings.Join(hinted, " "), "REVIEW: ", "")), " "))
	}
}

func riskRank(r Risk) int { return slices.Index(risks, r) }

// declaredRecovery is the capture and compensation the tool declares under
// MetaRecovery, when a manifest with names (the skeleton's tools) can hold
// them; else nil ones and why not.
func declaredRecovery(meta map[string]any, names []string) (capture, compensation *Call, why []string) {
	var d RecoveryMeta
	present, problem := declaredMeta(meta, MetaRecovery, &d)
	if problem != "" {
		return nil, nil, []string{"REVIEW: " + problem}
	}
	if !present || !d.Compensable || d.Compensation == nil {
		return nil, nil, nil
	}
	compensation, err := callOf(d.Compensation, 0)
	if err == nil && d.Capture != nil {
		if capture, err = callOf(d.Capture, maxElse); err != nil {
			err = fmt.Errorf("capture: %w", err)
		}
	}
	if err == nil {
		v := &validator{}
		v.capture("capture", capture, names)
		v.compensation("compensation", compensation, names, capture != nil)
		if len(v.problems) > 0 {
			msgs := make([]string, len(v.problems))
			for i, p := range v.problems {
				msgs[i] = p.Field + ": " + p.Msg
			}
			err = fmt.Errorf("%s", strings.Join(msgs, "; "))
		}
	}
	if err != nil {
		return nil, nil, []string{fmt.Sprintf("REVIEW: the server declares a compensation (%s) this manifest cannot hold: %v. Declare one yourself if a call can be undone.", MetaRecovery, err)}
	}
	return capture, compensation, []string{fmt.Sprintf("REVIEW: capture and compensation as the server declares them (%s): check that they undo a call, and test airlock_rollback.", MetaRecovery)}
}

// callOf converts a declared call; depth counts the else chain.
func callOf(r *RecoveryCall, depth int) (*Call, error) {
	if depth > maxElse {
		return nil, fmt.Errorf("the else chain is longer than %d", maxElse)
	}
	c := &Call{Tool: r.Tool, When: r.When}
	for _, s := range append([]string{r.Tool, r.When}, flatten(r.Arguments)...) {
		if redact.VisibleLine(s) != s {
			return nil, fmt.Errorf("%q has control or invisible characters", redact.VisibleLine(truncate(s, 60)))
		}
	}
	if len(r.When) > maxDeclaredExpr {
		return nil, fmt.Errorf("a when is %d characters, over %d", len(r.When), maxDeclaredExpr)
	}
	for k, src := range r.Arguments {
		if len(src) > maxDeclaredExpr || len(k) > 200 {
			return nil, fmt.Errorf("argument %.40q is longer than %d characters", k, maxDeclaredExpr)
		}
		if c.Args == nil {
			c.Args = map[string]string{}
		}
		c.Args[k] = src
	}
	if r.Else != nil {
		e, err := callOf(r.Else, depth+1)
		if err != nil {
			return nil, err
		}
		c.Else = e
	}
	return c, nil
}

func flatten(m map[string]string) []string {
	out := make([]string, 0, 2*len(m))
	for k, v := range m {
		out = append(out, k, v)
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// writeCall writes a capture or compensation block at indent.
func writeCall(b interface{ WriteString(string) (int, error) }, indent, key string, c *Call) {
	b.WriteString(indent + key + ":\n")
	in := indent + "  "
	b.WriteString(in + "tool: " + yamlString(c.Tool) + "\n")
	if len(c.Args) > 0 {
		b.WriteString(in + "args:\n")
		keys := make([]string, 0, len(c.Args))
		for k := range c.Args {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.WriteString(in + "  " + yamlString(k) + ": " + yamlString(c.Args[k]) + "\n")
		}
	}
	if c.When != "" {
		b.WriteString(in + "when: " + yamlString(c.When) + "\n")
	}
	if c.Else != nil {
		writeCall(b, in, "else", c.Else)
	}
}
