package pin

import (
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// UI resources (MCP Apps, "ui://" URIs) are pinned like tool definitions:
// the HTML a host renders next to a tool's result is code the upstream
// ships, and a changed one is a rug pull as much as a changed tool
// description. A UI resource is kept in the same store, under its URI in
// the place of a tool's name (a tool's name cannot hold "://"), as the
// definition UIResource makes of what a resources/read returned, so that
// first use pins it, a change blocks it, and `airlock manifests pin
// SERVER URI` shows the change and accepts it.

// UIScheme starts the URI of an MCP Apps UI resource.
const UIScheme = "ui://"

// IsUIResource reports whether name (a tool's, or a resource's URI) is
// an MCP Apps UI resource's URI.
func IsUIResource(name string) bool { return strings.HasPrefix(name, UIScheme) }

// UIResource is the definition a UI resource is pinned by: its URI as the
// name, and in _meta every content the read returned (URI, MIME type,
// text or blob, _meta), in order.
func UIResource(uri string, contents []*mcp.ResourceContents) *mcp.Tool {
	cs := make([]any, 0, len(contents))
	for _, c := range contents {
		if c == nil {
			continue
		}
		m := map[string]any{"uri": c.URI}
		if c.MIMEType != "" {
			m["mimeType"] = c.MIMEType
		}
		if c.Text != "" {
			m["text"] = c.Text
		}
		if len(c.Blob) > 0 {
			m["blob"] = c.Blob // base64 in the canonical JSON
		}
		if len(c.Meta) > 0 {
			m["_meta"] = map[string]any(c.Meta)
		}
		cs = append(cs, m)
	}
	return &mcp.Tool{Name: uri, Meta: mcp.Meta{"contents": cs}}
}

// UIResourceURIs are the UI resources tools point at (MCP Apps: _meta
// ui.resourceUri, or the older "ui/resourceUri"), each once, in order.
func UIResourceURIs(tools []*mcp.Tool) []string {
	var out []string
	seen := map[string]bool{}
	add := func(v any) {
		if s, ok := v.(string); ok && IsUIResource(s) && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, t := range tools {
		if t == nil || t.Meta == nil {
			continue
		}
		if ui, ok := t.Meta["ui"].(map[string]any); ok {
			add(ui["resourceUri"])
		}
		add(t.Meta["ui/resourceUri"])
	}
	return out
}
