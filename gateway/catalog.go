package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/catalog"
	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// Catalog modes (Options.Catalog, the configuration's catalog).
const (
	// CatalogFull lists every tool the caller may call (the default).
	CatalogFull = "full"
	// CatalogSearch lists the built-in tools and two meta-tools instead:
	// airlock_find_tools and airlock_call_tool.
	CatalogSearch = "search"
)

// The meta-tools of CatalogSearch.
const (
	ToolFindTools = "airlock_find_tools"
	ToolCallTool  = "airlock_call_tool"
)

// maxFound bounds airlock_find_tools' answer.
const maxFound = 20

type findToolsIn struct {
	Query string `json:"query" jsonschema:"words describing what you want to do, e.g. 'create an issue in the tracker'"`
	Limit int    `json:"limit,omitempty" jsonschema:"how many tools to return (default 5, at most 20)"`
	// Format "stubs" answers with the tools as airlock_run_program's
	// stubs (module.function(params) -> type  # summary).
	Format string `json:"format,omitempty" jsonschema:"schemas (the default: each tool's inputSchema, for airlock_call_tool) or stubs (one line per tool, as a program calls it with airlock_run_program)"`
}

// FoundTool is one tool airlock_find_tools returns: enough to call it with
// airlock_call_tool.
type FoundTool struct {
	Name        string               `json:"name"`
	Title       string               `json:"title,omitempty"`
	Description string               `json:"description,omitempty"`
	InputSchema any                  `json:"inputSchema,omitempty"`
	Annotations *mcp.ToolAnnotations `json:"annotations,omitempty"`
	// Meta carries the risk and recovery metadata, as tools/list does.
	Meta  mcp.Meta `json:"_meta,omitempty"`
	Score float64  `json:"score"`
}

type findToolsOut struct {
	Tools []FoundTool `json:"tools"`
	// Stubs are the tools' stubs, in Tools' order (format "stubs").
	Stubs []string `json:"stubs,omitempty"`
}

// callToolIn keeps the inner arguments as their bytes: decoding them into
// map[string]any would round integers beyond 2^53 (and the call pipeline
// canonicalizes them anyway, refusing a repeated key as a direct call
// does).
type callToolIn struct {
	Name      string          `json:"name" jsonschema:"the tool's name, as airlock_find_tools gave it"`
	Arguments json.RawMessage `json:"arguments,omitempty" jsonschema:"the tool's arguments, matching its inputSchema"`
}

func (g *Gateway) addCatalogTools() {
	if g.opts.Catalog != CatalogSearch {
		if g.programsOn() {
			// airlock_run_program's description points here when its
			// caller's stubs do not fit in it (programs.go).
			mcp.AddTool(g.server, &mcp.Tool{Name: ToolFindTools, Title: "airlock: find tools",
				Description: "Searches the tools you may call and returns the best matches for your query. " +
					"With format \"stubs\", as the functions an airlock_run_program program calls. Read-only.",
				Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}}, g.findToolsTool)
		}
		return
	}
	mcp.AddTool(g.server, &mcp.Tool{Name: ToolFindTools, Title: "airlock: find tools",
		Description: "Searches the tools you may call (hundreds may be available; only these meta-tools are listed) and returns the best matches " +
			"for your query with their input schemas. Call one with airlock_call_tool. Read-only. " +
			"With format \"stubs\", it returns them as the functions an airlock_run_program program calls.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}}, g.findToolsTool)
	// The arguments are the target tool's: untyped here, validated
	// against its own schema in the call pipeline.
	g.server.AddTool(&mcp.Tool{Name: ToolCallTool, Title: "airlock: call a tool",
		Description: "Calls a tool found with airlock_find_tools, by name, with its arguments. The call is checked, recorded and may need a person's " +
			"approval exactly like a direct call.",
		InputSchema: json.RawMessage(`{"type":"object","required":["name"],"properties":{` +
			`"name":{"type":"string","description":"the tool's name, as airlock_find_tools gave it"},` +
			`"arguments":{"type":"object","description":"the tool's arguments, matching its inputSchema"}}}`),
	}, g.callToolTool)
}

// catalogEntries are the upstream tools the caller may call, by name.
func (g *Gateway) catalogEntries(extra *mcp.RequestExtra) map[string]*toolEntry {
	g.mu.Lock()
	defs := make([]*mcp.Tool, 0, len(g.tools))
	entries := make(map[string]*toolEntry, len(g.tools))
	for name, e := range g.tools {
		// Unavailable tools are found too (their description says why);
		// calling one answers that it is unavailable, as a direct call does.
		defs = append(defs, e.def)
		entries[name] = e
	}
	g.mu.Unlock()
	out := map[string]*toolEntry{}
	for _, t := range g.visibleTools(extra, defs) {
		if e, ok := entries[t.Name]; ok {
			out[t.Name] = e
		}
	}
	return out
}

func (g *Gateway) findToolsTool(ctx context.Context, req *mcp.CallToolRequest, in findToolsIn) (*mcp.CallToolResult, findToolsOut, error) {
	if strings.TrimSpace(in.Query) == "" {
		return errorResult("", "", "query is empty: say in a few words what you want to do"), findToolsOut{}, nil
	}
	limit := in.Limit
	if limit <= 0 {
		limit = 5
	}
	limit = min(limit, maxFound)
	stubs := false
	switch in.Format {
	case "", "schemas":
	case "stubs":
		stubs = true
	default:
		return errorResult("", "", fmt.Sprintf("format %q is not a format; use schemas (the default) or stubs", truncateUTF8(in.Format, 32))), findToolsOut{}, nil
	}
	entries := g.catalogEntries(req.Extra)
	docs := make([]catalog.Doc, 0, len(entries))
	for name, e := range entries {
		schema, _ := json.Marshal(e.def.InputSchema)
		docs = append(docs, catalog.Doc{Name: name, Title: e.def.Title, Description: e.def.Description, Schema: schema})
	}
	out := findToolsOut{Tools: []FoundTool{}}
	var b strings.Builder
	for _, h := range catalog.New(docs).Search(in.Query, limit, nil) {
		d := entries[h.Doc.Name].def
		out.Tools = append(out.Tools, FoundTool{Name: d.Name, Title: d.Title, Description: d.Description, InputSchema: d.InputSchema,
			Annotations: d.Annotations, Meta: d.Meta, Score: float64(int(h.Score*1000)) / 1000})
		fmt.Fprintf(&b, "%s: %s\n", d.Name, firstLine(d.Description))
	}
	if stubs {
		return g.foundStubs(req.Extra, &out), out, nil
	}
	if len(out.Tools) == 0 {
		b.WriteString("No tool you may call matches; try other words.")
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.TrimSpace(b.String())}}}, out, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// foundStubs turns found tools into stubs: the names a program of the
// caller has for them (its whole table, since names that collide are told
// apart over the table).
func (g *Gateway) foundStubs(extra *mcp.RequestExtra, out *findToolsOut) *mcp.CallToolResult {
	var found []api.ProgramTool
	if pr, err := g.principalFor(extra); err == nil {
		byName := map[string]api.ProgramTool{}
		for _, t := range g.programTable(extra, pr) {
			byName[t.Name] = t
		}
		kept := out.Tools[:0]
		for _, t := range out.Tools {
			// A tool a program cannot call (blocked, out of scope) is
			// left out.
			if pt, ok := byName[t.Name]; ok {
				found = append(found, pt)
				kept = append(kept, FoundTool{Name: t.Name, Score: t.Score})
			}
		}
		out.Tools = kept
	}
	out.Stubs = g.programStubs(found)
	text := strings.Join(out.Stubs, "\n")
	if len(out.Stubs) == 0 {
		text = "No tool you may call matches; try other words."
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// callToolTool runs a tool through the same pipeline as a direct call. A
// tool the caller may not call is reported exactly like one that does not
// exist, so the meta-tool reveals nothing the list would not.
func (g *Gateway) callToolTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in callToolIn
	// A key repeated anywhere is refused: in the target's arguments
	// exactly as a direct call with them is, and in the meta-tool's own
	// ({"name": A, "name": B} must not pick one).
	dupErr := jsoncanon.CheckDuplicates(req.Params.Arguments)
	var dup *jsoncanon.DuplicateKeyError
	inArgs := errors.As(dupErr, &dup) && (dup.Path == "$.arguments" || strings.HasPrefix(dup.Path, "$.arguments.") || strings.HasPrefix(dup.Path, "$.arguments["))
	if dup != nil && !inArgs {
		return errorResult("", "", duplicateArgument(ToolCallTool, dup).Error()), nil
	}
	if len(req.Params.Arguments) > 0 {
		// Members by their exact names, as the SDK reads a direct call's
		// (encoding/json would also take "NAME" or "Arguments").
		var m map[string]json.RawMessage
		err := json.Unmarshal(req.Params.Arguments, &m)
		if err == nil {
			for k := range m {
				if (k != "name" && strings.EqualFold(k, "name")) || (k != "arguments" && strings.EqualFold(k, "arguments")) {
					err = fmt.Errorf("%q is not a member; spell it in lower case", k)
				}
			}
		}
		if err == nil && m["name"] != nil {
			err = json.Unmarshal(m["name"], &in.Name)
		}
		if err != nil {
			return errorResult("", "", "arguments must be {\"name\": TOOL, \"arguments\": {...}}: "+err.Error()), nil
		}
		in.Arguments = m["arguments"]
	}
	name := strings.TrimSpace(in.Name)
	if name == "" {
		return errorResult("", "", "name is empty: give the name airlock_find_tools returned"), nil
	}
	var e *toolEntry
	if name != ToolRunProgram || !g.programsOn() {
		var ok bool
		if e, ok = g.catalogEntries(req.Extra)[name]; !ok {
			return errorResult("", "", fmt.Sprintf("no tool %q that you may call; airlock_find_tools lists the ones you may", name)), nil
		}
	}
	if inArgs {
		// The path inside the target's arguments, as a direct call names it.
		inner := *dup
		inner.Path = "$" + strings.TrimPrefix(dup.Path, "$.arguments")
		return errorResult("", "", duplicateArgument(name, &inner).Error()), nil
	}
	args := json.RawMessage(`{}`)
	if a := bytes.TrimSpace(in.Arguments); len(a) > 0 && string(a) != "null" {
		if a[0] != '{' {
			return errorResult("", "", "arguments must be a JSON object of the tool's arguments"), nil
		}
		args = a
	}
	inner := &mcp.CallToolRequest{Session: req.Session, Extra: req.Extra,
		Params: &mcp.CallToolParamsRaw{Meta: req.Params.Meta, Name: name, Arguments: args}}
	if e == nil {
		return g.runProgramTool(ctx, inner) // programs.go
	}
	return g.call(ctx, e, inner)
}

// catalogList is what tools/list shows in search mode: everything but the
// upstream tools.
func (g *Gateway) catalogList(tools []*mcp.Tool) []*mcp.Tool {
	if g.opts.Catalog != CatalogSearch {
		return tools
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := tools[:0:0]
	for _, t := range tools {
		if _, upstream := g.tools[t.Name]; !upstream {
			out = append(out, t)
		}
	}
	return out
}
