package activities

import (
	"testing"

	"github.com/airlock-run/airlock/manifests"
)

// The catalog resolves exposed names through each server's prefix, never
// by splitting on "__": an unprefixed server's tool is found by its own
// name, and a tool whose name contains "__" is not mistaken for another
// server's.
func TestCatalogUsesPrefixes(t *testing.T) {
	empty := ""
	decl := func() *manifests.Tool {
		return &manifests.Tool{SideEffects: []manifests.SideEffect{"read"}, DataAccessLevel: "public", Risk: "low"}
	}
	ms := []*manifests.Manifest{
		{Server: manifests.Server{Name: "plain", Prefix: &empty}, Tools: map[string]*manifests.Tool{"read": decl(), "fs__x": decl()}},
		{Server: manifests.Server{Name: "fs"}, Tools: map[string]*manifests.Tool{"write": decl()}},
	}
	for _, exposeUncovered := range []bool{false, true} {
		c := NewCatalog(ms, nil, nil, exposeUncovered)
		for _, tt := range []struct{ exposed, server, upstream string }{
			{"read", "plain", "read"},
			{"fs__x", "plain", "fs__x"},
			{"fs__write", "fs", "write"},
		} {
			tool, ok := c.Tool(tt.exposed)
			if !ok || tool.Server != tt.server || tool.Upstream != tt.upstream || tool.Decl == nil {
				t.Errorf("uncovered=%v: Tool(%s) = %s/%s (declared %v), %v; want %s/%s", exposeUncovered, tt.exposed, tool.Server, tool.Upstream, tool.Decl != nil, ok, tt.server, tt.upstream)
			}
		}
		if _, ok := c.Tool("plain__read"); ok && !exposeUncovered {
			t.Errorf("Tool(plain__read) found although plain is unprefixed")
		}
		if got := c.exposed("plain", "read"); got != "read" {
			t.Errorf("exposed(plain, read) = %q, want read", got)
		}
	}
	// Uncovered tools resolve to the longest matching prefix.
	c := NewCatalog(ms, nil, nil, true)
	if tool, ok := c.Tool("fs__other"); !ok || tool.Server != "fs" || tool.Upstream != "other" || tool.Decl != nil {
		t.Errorf("Tool(fs__other) = %+v, %v; want uncovered fs/other", tool, ok)
	}
	if tool, ok := c.Tool("other"); !ok || tool.Server != "plain" || tool.Upstream != "other" {
		t.Errorf("Tool(other) = %+v, %v; want uncovered plain/other", tool, ok)
	}
}
