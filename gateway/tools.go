package gateway

// The tool list: every tool a manifest covers (with ExposeUncovered, every
// tool an upstream offers), with the upstream's definition, or a
// placeholder saying why the tool is unavailable; and which of them a
// principal sees (visibleTools) and may call (visibleTo).

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/pin"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

type toolEntry struct {
	exposed  string
	server   string
	upstream string
	decl     *manifests.Tool // nil for uncovered tools
	def      *mcp.Tool       // what tools/list shows
	avail    string          // "" when callable, else why not
	blocked  bool            // the pin store or the guard blocks it (avail says why)
	hidden   bool            // not listed: its definition holds prompt-injection markers (descriptions.go)
	// stubTail caches the tail of its program stub (programstubs.go),
	// made from def; under Gateway.mu.
	stubTail string
}

// visibleTools keeps the tools the caller may call.
func (g *Gateway) visibleTools(extra *mcp.RequestExtra, tools []*mcp.Tool) []*mcp.Tool {
	live := g.cur()
	if live.Policy == nil {
		g.mu.Lock()
		defer g.mu.Unlock()
		out := tools[:0:0]
		for _, t := range tools {
			if e, ok := g.tools[t.Name]; !ok || !e.hidden {
				out = append(out, t)
			}
		}
		return out
	}
	pr, err := g.principalFor(extra)
	if err != nil {
		return nil
	}
	ppr := api.Principal{Name: pr.Name, Roles: pr.Roles, Permissions: pr.Permissions, DataLevel: pr.DataLevel, SlackUserID: pr.SlackUserID}
	task := policy.Task{AllowTools: pr.AllowTools}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := tools[:0:0]
	for _, t := range tools {
		if t.Name == ToolStatus || t.Name == ToolAwait || t.Name == ToolRollback || t.Name == ToolFindTools || t.Name == ToolCallTool || t.Name == ToolRunProgram || isStateTool(t.Name) {
			out = append(out, t)
			continue
		}
		if t.Name == ToolApprovalsList || t.Name == ToolApprovalsDecide {
			if g.approvalToolVisible(pr.Name) {
				out = append(out, t)
			}
			continue
		}
		e, ok := g.tools[t.Name]
		if !ok || e.hidden {
			continue
		}
		if live.Policy.Visible(ppr, task, policy.Tool{Name: e.exposed, Server: e.server, Upstream: e.upstream, Decl: e.decl}) {
			out = append(out, t)
		}
	}
	return out
}

// visibleTo reports whether pr may call e: what visibleTools lists for it
// (the state tools always).
func (g *Gateway) visibleTo(pr *identity.Principal, e *toolEntry) bool {
	live := g.cur()
	if live.Policy == nil || isStateTool(e.exposed) {
		return true
	}
	ppr := api.Principal{Name: pr.Name, Roles: pr.Roles, Permissions: pr.Permissions, DataLevel: pr.DataLevel, SlackUserID: pr.SlackUserID}
	return live.Policy.Visible(ppr, policy.Task{AllowTools: pr.AllowTools}, policy.Tool{Name: e.exposed, Server: e.server, Upstream: e.upstream, Decl: e.decl})
}

// unknownTool is the MCP SDK's answer to a tools/call of a name it does
// not have (mcp.Server.callTool), word for word.
func unknownTool(name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
}

// Refresh republishes the tool list from the manifests and the upstreams'
// current state. Clients are notified of changes (tools/list_changed).
func (g *Gateway) Refresh() {
	g.refreshResources() // resources, templates and prompts (resources.go)
	want := g.buildEntries()
	g.mu.Lock()
	defer g.mu.Unlock()
	var remove []string
	for name := range g.tools {
		if _, ok := want[name]; !ok {
			remove = append(remove, name)
		}
	}
	if len(remove) > 0 {
		sort.Strings(remove)
		g.server.RemoveTools(remove...)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		e := want[name]
		if old, ok := g.tools[name]; ok && sameTool(old, e) {
			// Same definition: clients need not hear of it, but a reloaded
			// manifest may have changed the declaration behind it (its
			// handler looks the entry up by name).
			e.stubTail = old.stubTail // made from the same definition
			g.tools[name] = e
			continue
		}
		if err := g.addTool(e); err != nil {
			g.log.Error().Err(err).Str("tool", name).Msg("tool not published")
			continue
		}
		g.tools[name] = e
	}
}

// addTool registers one tool; the SDK panics on schemas it cannot take,
// which must not bring the gateway down.
func (g *Gateway) addTool(e *toolEntry) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("upstream %s offers tool %s with a definition the MCP SDK refuses: %v", e.server, e.upstream, r)
		}
	}()
	g.server.AddTool(e.def, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return g.call(ctx, g.entry(e), req)
	})
	return nil
}

func sameTool(a, b *toolEntry) bool {
	if a.avail != b.avail || a.server != b.server || a.upstream != b.upstream {
		return false
	}
	ja, _ := json.Marshal(a.def)
	jb, _ := json.Marshal(b.def)
	return string(ja) == string(jb)
}

// buildEntries computes the tool list: every manifest tool, with the
// upstream's definition when it is known, or a placeholder that says why it
// is unavailable.
func (g *Gateway) buildEntries() map[string]*toolEntry {
	out := map[string]*toolEntry{}
	live := g.cur()
	for _, m := range live.Manifests {
		var st upstream.Status
		if g.opts.Upstreams != nil {
			st = g.opts.Upstreams.Status(m.Server.Name)
		}
		offered := map[string]*mcp.Tool{}
		for _, t := range st.Tools {
			offered[t.Name] = t
		}
		for name, decl := range m.Tools {
			e := &toolEntry{exposed: m.Exposed(name), server: m.Server.Name, upstream: name, decl: decl}
			// Pinning: a changed definition is not shown (it may carry a
			// prompt injection); a placeholder says why, and calls fail.
			if t, ok := offered[name]; ok && g.pinBlocked(m, e, t) {
				out[e.exposed] = e
				continue
			}
			if t, ok := offered[name]; ok {
				def := *t
				def.Name = e.exposed
				if decl.Description != "" {
					def.Description = decl.Description
				}
				e.def = &def
				if st.State != upstream.StateConnected {
					e.avail = unavailableReason(m.Server.Name, st)
				}
				// A wasm server lists a tool whose module failed to load,
				// saying why; its other tools work.
				if reason, _ := t.Meta[upstream.MetaUnavailable].(string); reason != "" && m.Server.WASM != nil {
					e.avail = reason
					def.Description = fmt.Sprintf("[unavailable: %s] %s", reason, decl.Description)
				}
				describeTool(g.described.get(live, m, e), e, &def)
				g.guardDescription(m, e)
			} else {
				if len(st.Tools) > 0 {
					e.avail = fmt.Sprintf("upstream %s does not offer a tool named %q; check %s", m.Server.Name, name, m.File)
				} else {
					e.avail = unavailableReason(m.Server.Name, st)
				}
				e.def = &mcp.Tool{
					Name:        e.exposed,
					Description: fmt.Sprintf("[unavailable: %s] %s", e.avail, decl.Description),
					InputSchema: map[string]any{"type": "object"},
				}
			}
			out[e.exposed] = e
		}
		if live.ExposeUncovered {
			for name, t := range offered {
				exposed := m.Exposed(name)
				if _, ok := out[exposed]; ok {
					continue
				}
				e := &toolEntry{exposed: exposed, server: m.Server.Name, upstream: name}
				// An uncovered tool is pinned like a covered one: its
				// definition goes to the agent just the same.
				if !g.pinBlocked(m, e, t) {
					def := *t
					def.Name = exposed
					describeTool(g.described.get(live, m, e), e, &def)
					e.def = &def
					g.guardDescription(m, e)
				}
				out[exposed] = e
			}
		}
	}
	return out
}

// pinBlocked checks t, the upstream's definition of e, against its pin.
// When it changed since it was pinned, it makes e a blocked placeholder
// (the reason, the manifest's description if any, an empty schema; nothing
// of the new definition) and reports true. Tools of wasm servers are pinned
// by the sha256 of their modules in the manifest instead.
func (g *Gateway) pinBlocked(m *manifests.Manifest, e *toolEntry, t *mcp.Tool) bool {
	if g.opts.Pins == nil || m.Server.WASM != nil {
		return false
	}
	r := g.opts.Pins.Inspect(m.Server.Name, t)
	if r.Verdict != pin.Changed {
		return false
	}
	if r.Transition {
		g.log.Warn().Str("server", m.Server.Name).Str("tool", e.upstream).Bool("covered", e.decl != nil).Msg(r.Reason)
	}
	desc := "[unavailable: " + r.Reason + "]"
	if e.decl != nil && e.decl.Description != "" {
		desc += " " + e.decl.Description
	}
	e.avail, e.blocked = r.Reason, true
	e.def = &mcp.Tool{Name: e.exposed, Description: desc, InputSchema: map[string]any{"type": "object"}}
	return true
}

func unavailableReason(server string, st upstream.Status) string {
	if st.Reason != "" {
		return fmt.Sprintf("upstream %s is %s: %s", server, st.State, st.Reason)
	}
	if st.State == "" {
		return fmt.Sprintf("upstream %s is not connected yet", server)
	}
	return fmt.Sprintf("upstream %s is %s", server, st.State)
}

// ToolNames lists the exposed names of the upstream tools the gateway
// knows (available or not), for validating plans against them.
func (g *Gateway) ToolNames() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]bool, len(g.tools))
	for name := range g.tools {
		out[name] = true
	}
	return out
}
