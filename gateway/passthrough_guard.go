package gateway

import (
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/guard"
	"github.com/airlock-run/airlock/internal/metrics"
)

// The content guard of what passes through besides tools (issue 30 §1):
// a resources/read's contents and a prompts/get's messages reach the
// model as a tool's result does, so they are inspected by the same
// settings: airlock.yaml's guard.results (secrets, personal_data,
// injection; a manifest's tools do not speak for its resources and
// prompts), tightened by the caller's roles. redact replaces each match;
// annotate delivers and names the findings under _meta["airlock.dev/guard"];
// block, and require_approval (a read or a get is no task's call, so
// there is nothing to wait in: fail closed), refuse with CodeGuardBlocked
// naming the findings, never a value. Findings are logged and counted.

// CodeGuardBlocked is the JSON-RPC error code of a resources/read or
// prompts/get whose contents the content guard withheld.
const CodeGuardBlocked = -32032

// guardText is one text a pass-through result holds: where, and the text
// to inspect in place.
type guardText struct {
	path string
	text *string
}

// guardPassthrough inspects texts (of a resource read or a prompt get of
// server, called by roles) in place: the findings as the result's
// _meta names them, or the error refusing it.
func (g *Gateway) guardPassthrough(server, what string, roles []string, texts []guardText, log zerolog.Logger) (mcp.Meta, error) {
	s, p, i := g.manifestOf(server).ResultGuardFor(nil, roles)
	pol := guard.Policy{Secrets: guard.Action(s), PersonalData: guard.Action(p), Injection: guard.Action(i)}
	if (pol.Secrets == guard.Off || pol.Secrets == "") && (pol.PersonalData == guard.Off || pol.PersonalData == "") && (pol.Injection == guard.Off || pol.Injection == "") {
		return nil, nil
	}
	res := &mcp.CallToolResult{}
	for _, t := range texts {
		res.Content = append(res.Content, &mcp.TextContent{Text: *t.text})
	}
	out, found := guard.InspectPolicy(res, pol, what)
	if len(found) == 0 {
		return nil, nil
	}
	var fs []map[string]string
	for _, f := range found {
		f.Path = passthroughPath(f.Path, texts)
		metrics.GuardFindings.WithLabelValues(f.Rule, f.Action).Inc()
		log.Info().Str("rule", f.Rule).Str("path", f.Path).Str("action", f.Action).Msg("content guard: finding in " + what)
		if len(fs) < maxNamed {
			fs = append(fs, map[string]string{"rule": f.Rule, "path": f.Path, "action": f.Action})
		}
	}
	if out != res { // withheld
		msg := strings.NewReplacer("guard.results", "airlock.yaml's guard.results (or the caller's roles')").Replace(passthroughText(out, texts))
		return nil, &jsonrpc.Error{Code: CodeGuardBlocked, Message: msg}
	}
	for n, t := range texts {
		*t.text = res.Content[n].(*mcp.TextContent).Text
	}
	return mcp.Meta{metaGuard: map[string]any{"findings": fs}}, nil
}

// passthroughPath is a finding's path in the pass-through result:
// content[i].text names texts[i].
func passthroughPath(p string, texts []guardText) string {
	rest, ok := strings.CutPrefix(p, "content[")
	if !ok {
		return p
	}
	n, tail, ok := strings.Cut(rest, "]")
	i, err := strconv.Atoi(n)
	if !ok || err != nil || i < 0 || i >= len(texts) || tail != ".text" {
		return p
	}
	return texts[i].path
}

// passthroughText is the withheld result's message with its paths named
// as the pass-through result's.
func passthroughText(r *mcp.CallToolResult, texts []guardText) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	s := b.String()
	for i := len(texts) - 1; i >= 0; i-- { // content[10] before content[1]
		s = strings.ReplaceAll(s, "content["+strconv.Itoa(i)+"].text", texts[i].path)
	}
	return s
}

// guardMeta is an upstream's _meta with the guard's findings (meta) under
// metaGuard, and without what the upstream itself wrote there (only
// airlock speaks under its prefix).
func guardMeta(upstream, meta mcp.Meta) mcp.Meta {
	if _, forged := upstream[metaGuard]; !forged && meta == nil {
		return upstream
	}
	out := mcp.Meta{}
	for k, v := range upstream {
		if k != metaGuard {
			out[k] = v
		}
	}
	for k, v := range meta {
		out[k] = v
	}
	return out
}

// MetaGuard is the _meta key under which an annotated result (a tool's
// listing, a resource read, a prompt get) names the content guard's
// findings: {"findings": [{rule, path, action}]}.
const MetaGuard = metaGuard
