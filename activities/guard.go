package activities

import (
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/guard"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/manifests"
)

// SecretsInResults is what the worker does with secrets in a result of
// the exposed tool: its manifest's guard.results.secrets, else the
// configuration's guard, else off (manifests.SecretsInResults).
func (c *Catalog) SecretsInResults(exposed string) manifests.GuardAction {
	return c.guardOf(exposed, (*manifests.Manifest).SecretsInResults)
}

// PersonalDataInResults is what the worker does with personal data in a
// result of the exposed tool, likewise (manifests.PersonalDataInResults).
func (c *Catalog) PersonalDataInResults(exposed string) manifests.GuardAction {
	return c.guardOf(exposed, (*manifests.Manifest).PersonalDataInResults)
}

// InjectionInResults is what the worker does with prompt-injection
// markers in a result of the exposed tool, likewise
// (manifests.InjectionInResults).
func (c *Catalog) InjectionInResults(exposed string) manifests.GuardAction {
	return c.guardOf(exposed, (*manifests.Manifest).InjectionInResults)
}

// guardOf applies setting to the exposed tool's manifest and declaration
// (nil for a tool no manifest declares: the manifest's default); off for
// a tool of no known server.
func (c *Catalog) guardOf(exposed string, setting func(*manifests.Manifest, *manifests.Tool) manifests.GuardAction) manifests.GuardAction {
	if e, ok := c.tools[exposed]; ok {
		return setting(c.manifest[e.server], e.decl)
	}
	server, _, found := c.names.Resolve(exposed)
	if !found {
		return manifests.GuardOff
	}
	return setting(c.manifest[server], nil)
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
	p := guard.Policy{Secrets: guard.Action(c.SecretsInResults(name)), PersonalData: guard.Action(c.PersonalDataInResults(name)),
		Injection: guard.Action(c.InjectionInResults(name))}
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
// the arguments of a call to the exposed tool: its manifest's
// guard.arguments, else the configuration's, else off.
func (c *Catalog) ArgumentGuard(exposed string) guard.Policy {
	return guard.Policy{
		Secrets:      guard.Action(c.guardOf(exposed, (*manifests.Manifest).SecretsInArguments)),
		PersonalData: guard.Action(c.guardOf(exposed, (*manifests.Manifest).PersonalDataInArguments)),
	}
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
		_, found, err := guard.InspectArguments(in.Arguments, c.ArgumentGuard(in.Tool))
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
