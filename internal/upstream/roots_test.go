package upstream

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/manifests"
)

// TestManifestRoots: an upstream is offered roots only when its manifest
// has path_roots, one file:// root per entry (spaces escaped).
func TestManifestRoots(t *testing.T) {
	caps := rootsCaps(&mcp.ClientCapabilities{}, manifests.Server{})
	if caps.RootsV2 != nil || manifestRoots(manifests.Server{}) != nil {
		t.Fatalf("a server without path_roots is offered roots: %+v", caps.RootsV2)
	}
	s := manifests.Server{PathRoots: []string{"/data/sandbox/", "/data/my trash"}}
	if rootsCaps(&mcp.ClientCapabilities{}, s).RootsV2 == nil {
		t.Fatal("a server with path_roots is not offered the roots capability")
	}
	got := manifestRoots(s)
	want := []string{"file:///data/sandbox", "file:///data/my%20trash"}
	if len(got) != len(want) {
		t.Fatalf("roots %v, want %v", got, want)
	}
	for i, r := range got {
		if r.URI != want[i] {
			t.Errorf("root %d: %q, want %q", i, r.URI, want[i])
		}
	}
}
