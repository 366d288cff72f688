package upstream

import (
	"net/url"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/manifests"
)

// Roots (roots/list) an upstream asks airlock for are the server's
// manifest path_roots, never the client's: airlock's session with an
// upstream is shared by every task and client, a roots/list is tied to no
// call, and path_roots is the confinement the reviewer wrote (path_args
// are checked against it before a call). An upstream whose manifest has
// no path_roots sees no roots capability, so that it keeps the directories
// its own configuration gives it instead of narrowing itself to an empty
// list (server-filesystem would). See RATIONALE.md, "Why does an upstream
// get the manifest's path_roots rather than the client's roots?".

// manifestRoots returns the roots an upstream is given: one file:// root
// per path_roots entry (nil: none, no roots capability).
func manifestRoots(s manifests.Server) []*mcp.Root {
	var out []*mcp.Root
	for _, p := range s.PathRoots {
		abs := filepath.ToSlash(filepath.Clean(p))
		out = append(out, &mcp.Root{URI: (&url.URL{Scheme: "file", Path: abs}).String(), Name: filepath.Base(abs)})
	}
	return out
}

// rootsCaps declares the roots capability on caps when the manifest has
// roots; addRoots gives them to the client made with caps.
func rootsCaps(caps *mcp.ClientCapabilities, s manifests.Server) *mcp.ClientCapabilities {
	if len(s.PathRoots) > 0 {
		caps.RootsV2 = &mcp.RootCapabilities{}
	}
	return caps
}

func addRoots(c *mcp.Client, s manifests.Server) {
	if roots := manifestRoots(s); len(roots) > 0 {
		c.AddRoots(roots...)
	}
}
