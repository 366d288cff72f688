package activities

import (
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/guard"
	"github.com/airlock-run/airlock/internal/metrics"
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
// own setting: redacted in place, or the result replaced by an error
// result (block), or delivered and recorded (annotate: prompt-injection
// markers). Captures are not inspected: their pre-image is what a
// compensation restores, and is never delivered to the model.
func (a *Activities) guardResult(in api.CallToolInput, res *mcp.CallToolResult) (*mcp.CallToolResult, []api.Finding) {
	if isCapture(in.CallID) {
		return res, nil
	}
	c, ok := a.judge().Catalog.(*Catalog)
	if !ok {
		return res, nil // a test's catalog: no manifests, no guard
	}
	name := in.ExposedName
	if name == "" {
		name = c.exposed(in.Server, in.Tool)
	}
	p := c.ResultGuard(name, in.Roles)
	if p.Secrets == guard.Off && p.PersonalData == guard.Off && p.Injection == guard.Off {
		return res, nil
	}
	res, found := guard.InspectPolicy(res, p, name)
	var fs []api.Finding
	for _, f := range found {
		metrics.GuardFindings.WithLabelValues(f.Rule, f.Action).Inc()
		fs = append(fs, api.Finding{Rule: f.Rule, Path: f.Path, Action: f.Action})
	}
	return res, fs
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
	for _, f := range fs[len(in.Findings):] { // the gateway counted its own
		metrics.GuardFindings.WithLabelValues(f.Rule, f.Action).Inc()
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
