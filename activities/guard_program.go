package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/guard"
)

// ProgramGuard is what the worker does with each category in a program's
// return value and output: airlock.yaml's guard.results (a program is no
// tool, so no manifest speaks for it), which config.Load gives every
// manifest alike, tightened by the roles' (manifests.ResultGuardFor).
func (c *Catalog) ProgramGuard(roles []string) guard.Policy {
	names := make([]string, 0, len(c.manifest))
	for n := range c.manifest {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s, p, i := c.manifest[n].ResultGuardFor(nil, roles)
		return guard.Policy{Secrets: guard.Action(s), PersonalData: guard.Action(p), Injection: guard.Action(i)}
	}
	return guard.Policy{Secrets: guard.Off, PersonalData: guard.Off, Injection: guard.Off}
}

// GuardProgram inspects what a program returns and prints like a tool's
// result (issue 30 §1), before the workflow records the program's
// outcome: so the history holds the value redacted and the findings
// beside it, and the model gets what the history holds. The calls the
// program made were guarded as they ran; this catches what it assembled
// from them. require_approval withholds (as block): a program's result
// has no gateway's key to be sealed to. Numbers keep their digits.
func (a *Activities) GuardProgram(_ context.Context, in api.GuardProgramInput) (api.GuardProgramOutput, error) {
	out := api.GuardProgramOutput{Result: in.Result, Output: in.Output}
	c, ok := a.judge().Catalog.(*Catalog)
	if !ok {
		return out, nil // a test's catalog: no manifests, no guard
	}
	p := c.ProgramGuard(in.Roles)
	if p.Secrets == guard.Off && p.PersonalData == guard.Off && p.Injection == guard.Off {
		return out, nil
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Output}}}
	if r := bytes.TrimSpace(in.Result); len(r) > 0 {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil || dec.More() {
			out.Result, out.Output = nil, ""
			out.Withheld = "airlock could not read the program's result to inspect it; nothing of it is shown"
			return out, nil
		}
		res.StructuredContent = v
	}
	inspected, found := guard.InspectPolicy(res, p, "the program")
	for _, f := range found {
		f.Path = programPath(f.Path)
		out.Findings = append(out.Findings, countFindings([]guard.Finding{f}, "")...)
	}
	if inspected != res { // blocked
		out.Result, out.Output = nil, ""
		out.Withheld = strings.ReplaceAll(api.ResultText(mustMarshal(inspected)), "content[0].text", "output")
		out.Withheld = strings.ReplaceAll(out.Withheld, "structuredContent", "result")
		return out, nil
	}
	out.Output = res.Content[0].(*mcp.TextContent).Text
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			out.Result, out.Output = nil, ""
			out.Withheld = "airlock could not encode the program's inspected result; nothing of it is shown"
			return out, nil
		}
		out.Result = b
	}
	return out, nil
}

// programPath is a finding's path in a program's result: "result…" for
// the return value, "output" for what it printed.
func programPath(p string) string {
	if rest, ok := strings.CutPrefix(p, "structuredContent"); ok {
		return "result" + rest
	}
	if p == "content[0].text" {
		return "output"
	}
	return p
}

// mustMarshal is r as JSON (a result the guard made: it encodes).
func mustMarshal(r *mcp.CallToolResult) json.RawMessage {
	b, _ := json.Marshal(r)
	return b
}
