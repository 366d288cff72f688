package activities

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/guard"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/seal"
	"github.com/airlock-run/airlock/manifests"
)

// entryOf is the manifest and declaration of the exposed tool (nil
// declaration for a tool no manifest declares; nil manifest for a tool of
// no known server).
func (c *Catalog) entryOf(exposed string) (*manifests.Manifest, *manifests.Tool) {
	if e, ok := c.tools[exposed]; ok {
		return c.manifest[e.server], e.decl
	}
	if server, _, found := c.names.Resolve(exposed); found {
		return c.manifest[server], nil
	}
	return nil, nil
}

// ResultGuard is what the worker does with each category in a result of
// the exposed tool called by a principal holding roles: the manifest's
// guard.results, else the configuration's, tightened by the roles'
// (manifests.ResultGuardFor); off for a tool of no known server.
func (c *Catalog) ResultGuard(exposed string, roles []string) guard.Policy {
	m, decl := c.entryOf(exposed)
	if m == nil {
		return guard.Policy{Secrets: guard.Off, PersonalData: guard.Off, Injection: guard.Off}
	}
	s, p, i := m.ResultGuardFor(decl, roles)
	return guard.Policy{Secrets: guard.Action(s), PersonalData: guard.Action(p), Injection: guard.Action(i)}
}

// guardResult inspects a tool's result before it leaves the activity, so
// that the workflow history, the audit stream and the model never hold a
// secret or personal data it found (issue 30 §1), each category by its
// own setting (the tool's, else the configuration's, tightened by the
// caller's roles): redacted in place, or the result replaced by an error
// result (block), or delivered and recorded (annotate), or held for an
// approver (require_approval: holdResult). Captures are not inspected:
// their pre-image is what a compensation restores, and is never delivered
// to the model.
func (a *Activities) guardResult(in api.CallToolInput, res *mcp.CallToolResult) (*mcp.CallToolResult, []api.Finding, *api.HeldResult) {
	if isCapture(in.CallID) {
		return res, nil, nil
	}
	c, ok := a.judge().Catalog.(*Catalog)
	if !ok {
		return res, nil, nil // a test's catalog: no manifests, no guard
	}
	name := in.ExposedName
	if name == "" {
		name = c.exposed(in.Server, in.Tool)
	}
	p := c.ResultGuard(name, in.Roles)
	if p.Secrets == guard.Off && p.PersonalData == guard.Off && p.Injection == guard.Off {
		return res, nil, nil
	}
	if _, undo := api.CallOfCompensationID(in.CallID); undo {
		// A compensation's result is never delivered to the model, only
		// recorded: what would be withheld is redacted, so that the undo
		// is not reported failed for what its answer holds.
		for _, x := range []*guard.Action{&p.Secrets, &p.PersonalData, &p.Injection} {
			if *x == guard.Block || *x == guard.RequireApproval {
				*x = guard.Redact
			}
		}
	}
	if held, ok := heldPolicy(p); ok && len(in.ResultKey) > 0 {
		return a.holdResult(c, in, name, res, p, held)
	}
	// Without the gateway's key (a program's call, a plan's step, an
	// older gateway) a result under require_approval is withheld: the
	// guard treats it as block (fail closed).
	res, found := guard.InspectPolicy(res, p, name)
	return res, countFindings(found, ""), nil
}

// countFindings are found as the history records them, counted in the
// metric; as, when set, is the action recorded instead of the guard's.
func countFindings(found []guard.Finding, as string) []api.Finding {
	var fs []api.Finding
	for _, f := range found {
		if as != "" {
			f.Action = as
		}
		metrics.GuardFindings.WithLabelValues(f.Rule, f.Action).Inc()
		fs = append(fs, api.Finding{Rule: f.Rule, Path: f.Path, Action: f.Action})
	}
	return fs
}

// heldPolicy splits p: the categories under require_approval (held, set
// to Redact, the others off) and ok when there is one.
func heldPolicy(p guard.Policy) (held guard.Policy, ok bool) {
	pick := func(a guard.Action) guard.Action {
		if a == guard.RequireApproval {
			ok = true
			return guard.Redact
		}
		return guard.Off
	}
	held = guard.Policy{Secrets: pick(p.Secrets), PersonalData: pick(p.PersonalData), Injection: pick(p.Injection)}
	return held, ok
}

// holdResult applies p to res with its require_approval categories held
// (issue 30 §1): the other categories first, as configured (a block among
// them withholds the result, and nothing is held); then what the held
// categories find is redacted in the copy the history keeps, and the
// result as it would be delivered is sealed to the gateway's key
// (CallToolInput.ResultKey), with the approval the policy asks for. The
// history thus holds the redacted result and ciphertext only; the
// workflow waits for an approver, and the gateway opens and delivers the
// sealed result once one approves.
func (a *Activities) holdResult(c *Catalog, in api.CallToolInput, name string, res *mcp.CallToolResult, p, held guard.Policy) (*mcp.CallToolResult, []api.Finding, *api.HeldResult) {
	rest := p
	for _, x := range []*guard.Action{&rest.Secrets, &rest.PersonalData, &rest.Injection} {
		if *x == guard.RequireApproval {
			*x = guard.Off
		}
	}
	out, found := guard.InspectPolicy(res, rest, name)
	fs := countFindings(found, "")
	if out != res { // blocked by another category: nothing to hold
		return out, fs, nil
	}
	clear, err := json.Marshal(out)
	if err != nil {
		return withheld(name, "airlock could not encode the result to hold it for approval"), fs, nil
	}
	out, found = guard.InspectPolicy(out, held, name)
	if len(found) == 0 {
		return out, fs, nil // nothing under require_approval: delivered as is
	}
	hfs := countFindings(found, string(guard.RequireApproval))
	fs = append(fs, hfs...)
	var where []string
	seen := map[string]bool{}
	for _, f := range hfs {
		if w := clipPath(f.Rule + " at " + f.Path); !seen[w] {
			seen[w] = true
			where = append(where, w)
		}
	}
	const maxNamed = 20
	if len(where) > maxNamed {
		where = append(where[:maxNamed], fmt.Sprintf("and %d more", len(where)-maxNamed))
	}
	why := fmt.Sprintf("the call ran; approve delivering its result: the result of %s holds %s (guard.results: require_approval; the values are masked, and the history keeps them only sealed)", name, strings.Join(where, ", "))
	tool, ok := c.Tool(name)
	if !ok {
		tool = policy.Tool{Name: name}
	}
	j := a.judge()
	d := j.Policy.ResultApproval(tool, why)
	if d.Effect != api.RequireApproval {
		return withheld(name, d.Reason), fs, nil
	}
	peer, sealed, err := seal.Seal(in.ResultKey, clear)
	if err != nil {
		return withheld(name, "airlock could not seal the result to hold it for approval ("+err.Error()+")"), fs, nil
	}
	spec := approvalSpec(d, tool, j.Groups)
	spec.NoEdits, spec.MaxGrant, spec.GrantArgs = true, nil, nil // a result is delivered or not; nothing to edit or grant
	spec.OnTimeout = "deny"                                      // nobody decided: not delivered
	return out, fs, &api.HeldResult{SealedResult: api.SealedResult{Peer: peer, Sealed: sealed}, Reason: d.Reason,
		Group: d.Group, Quorum: d.Quorum, PolicyVersion: d.Version, Approval: spec}
}

// withheld is the error result of a result the guard could not hold for
// approval: nothing of it is delivered.
func withheld(tool, why string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
		Text: fmt.Sprintf("airlock withheld the result of %s: %s. The call ran; its result is not shown", tool, why)}}}
}

// findingLines are findings as the audit stream writes them.
func findingLines(fs []api.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Rule+" at "+f.Path+": "+f.Action)
	}
	return out
}

// ArgumentGuard is what airlock does with secrets and personal data in
// the arguments of a call to the exposed tool by a principal holding
// roles: its manifest's guard.arguments, else the configuration's, else
// off, tightened by the roles' (manifests.ArgumentGuardFor).
func (c *Catalog) ArgumentGuard(exposed string, roles []string) guard.Policy {
	m, decl := c.entryOf(exposed)
	if m == nil {
		return guard.Policy{Secrets: guard.Off, PersonalData: guard.Off}
	}
	s, p := m.ArgumentGuardFor(decl, roles)
	return guard.Policy{Secrets: guard.Action(s), PersonalData: guard.Action(p)}
}

// guardArguments is what the policy sees as the findings in a call's
// arguments (issue 30 §1): the gateway's (their values, under redact or
// block, already replaced in the arguments, so never recorded), and the
// worker's own inspection of the arguments it will run, by its own
// settings. The worker's finds a value under require_approval or annotate
// (left by the gateway), and under redact or block one the gateway did
// not replace: a program's call (made inside the workflow, never through
// the gateway) or a gateway whose configuration is older. Those are
// recorded as block, so the call is refused rather than run with a value
// that should have been withheld. mask are the argument paths (dot
// separated, as manifests' redact) an approver is shown masked.
func (a *Activities) guardArguments(cat ToolCatalog, in api.DecideInput) (fs []api.Finding, mask []string) {
	fs = append(fs, in.Findings...)
	if c, ok := cat.(*Catalog); ok {
		_, found, err := guard.InspectArguments(in.Arguments, c.ArgumentGuard(in.Tool, in.Principal.Roles))
		if err == nil { // else the policy's json check denies
			for _, f := range found {
				var path string
				if f.Action == string(guard.RequireApproval) {
					path = maskPath(f)
				}
				// A value under redact the gateway left, or one an
				// approver could not be shown masked, is refused.
				if f.Action == string(guard.Redact) || (f.Action == string(guard.RequireApproval) && path == "") {
					f.Action = string(guard.Block)
				}
				fs = append(fs, api.Finding{Rule: f.Rule, Path: f.Path, Action: f.Action, Where: api.FindingsInArguments})
				if path != "" && f.Action == string(guard.RequireApproval) {
					mask = append(mask, path)
				}
			}
		}
	}
	if !in.Recheck { // a call judged again was counted the first time
		for _, f := range fs[len(in.Findings):] { // the gateway counted its own
			metrics.GuardFindings.WithLabelValues(f.Rule, f.Action).Inc()
		}
	}
	return fs, mask
}

// maskPath is the dot-separated path (manifests' redact, which applies
// through lists to every element) that hides f from an approver: the
// value's path, or for a finding in a key the
// object holding it; cut at a key holding a dot, which a dot path cannot
// name (the approver then sees more masked, never less). "" when no path
// hides it: a top-level key holding a dot, or the finding in a top-level
// key (its name is shown).
func maskPath(f guard.ArgumentFinding) string {
	keys := f.Keys
	if f.InKey {
		keys = keys[:len(keys)-1]
	}
	for i, k := range keys {
		if strings.Contains(k, ".") || k == "" {
			keys = keys[:i]
			break
		}
	}
	return strings.Join(keys, ".")
}

// clipPath bounds a "rule at path" named to an approver (a path holds
// the upstream's object keys).
func clipPath(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// holdsResults reports whether a result of the exposed tool called by a
// principal holding roles may be held for approval (guard.results:
// require_approval): such a call runs the regular way, whose workflow
// waits for the approver (the fast path has no wait).
func (a *Activities) holdsResults(exposed string, roles []string) bool {
	c, ok := a.judge().Catalog.(*Catalog)
	if !ok {
		return false
	}
	_, held := heldPolicy(c.ResultGuard(exposed, roles))
	return held
}
