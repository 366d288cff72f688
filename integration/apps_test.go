package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/pin"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// TestMCPApps runs a real MCP Apps server (integration/testdata/
// apps-server.mjs, built with the official Apps SDK,
// @modelcontextprotocol/ext-apps) through airlock (issue 29 §3):
//   - the tool's _meta pointing at its UI (ui.resourceUri and the older
//     "ui/resourceUri") comes through as the upstream wrote it: resource
//     URIs pass unchanged through airlock (only tool and prompt names get
//     the server's prefix), so the pointer needs no rewriting;
//   - the ui:// resource is listed and read under the same data access
//     level as the server's other resources: a principal below it sees
//     none and cannot read it;
//   - the UI is pinned at its first read like a tool's definition at its
//     first listing; when the upstream ships other HTML, the read is
//     refused (CodePinBlocked) naming the command that accepts it, and
//     `airlock manifests pin` (pin.Store.Pin with the resource) accepts it.
func TestMCPApps(t *testing.T) {
	t.Parallel()
	testenv.RequireNode(t)
	testenv.NodeModules(t)
	html := filepath.Join(t.TempDir(), "view.html")
	if err := os.WriteFile(html, []byte("<html><body>weather view v1</body></html>"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "apps.yaml"), []byte(`server:
  name: apps
  stdio:
    command: node
    args: [`+filepath.Join(repoRoot(), "integration", "testdata", "apps-server.mjs")+`]
    env: {APPS_HTML: `+html+`}
resources:
  data_access_level: confidential
tools:
  weather: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	store, err := pin.Open(filepath.Join(t.TempDir(), "pins.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: clearedAndPublic(), pins: store})
	carol := s.connect(t, bearer("carol-key"))
	waitTools(t, carol, "apps__weather")
	ctx := context.Background()

	const uri = "ui://weather/view.html"
	tools, err := carol.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var weather *mcp.Tool
	for _, tl := range tools.Tools {
		if tl.Name == "apps__weather" {
			weather = tl
		}
	}
	ui, _ := weather.Meta["ui"].(map[string]any)
	if weather == nil || ui["resourceUri"] != uri || weather.Meta["ui/resourceUri"] != uri {
		t.Fatalf("apps__weather through airlock: %+v; want its _meta to point at %s as the upstream wrote it", weather, uri)
	}
	if got := pin.UIResourceURIs(tools.Tools); len(got) != 1 || got[0] != uri {
		t.Errorf("UI resources the listing points at: %v", got)
	}
	res := call(t, carol, "apps__weather", map[string]any{"city": "Lisbon"}, "")
	if res.IsError || !strings.Contains(text(res), "sunny in Lisbon") {
		t.Fatalf("apps__weather: %s", text(res))
	}

	waitFor(t, "the UI resource to be listed", 10*time.Second, func() bool {
		l, err := carol.ListResources(ctx, nil)
		return err == nil && len(l.Resources) == 1 && l.Resources[0].URI == uri
	})
	read, err := carol.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil || len(read.Contents) != 1 || read.Contents[0].MIMEType != "text/html;profile=mcp-app" || !strings.Contains(read.Contents[0].Text, "v1") {
		t.Fatalf("reading %s through airlock: %+v, %v", uri, read, err)
	}
	if p, ok := store.Lookup("apps", uri); !ok || p.By != pin.ByFirstUse {
		t.Errorf("the UI resource was not pinned at its first read: %+v", p)
	}

	// pat is cleared for public data only: the UI is not listed for him
	// and his read is refused, like any resource of the server.
	pat := s.connect(t, bearer("pat-key"))
	if l, err := pat.ListResources(ctx, nil); err != nil || len(l.Resources) != 0 {
		t.Errorf("pat lists %v (%v); want no resources", l, err)
	}
	var werr *jsonrpc.Error
	if _, err := pat.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); !errors.As(err, &werr) || werr.Code != gateway.CodeAccessDenied {
		t.Errorf("pat's read of %s: %v; want access denied", uri, err)
	}

	// The upstream now serves other HTML: a rug pull.
	if err := os.WriteFile(html, []byte("<html><body><script>steal()</script></body></html>"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = carol.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if !errors.As(err, &werr) || werr.Code != gateway.CodePinBlocked || !strings.Contains(werr.Message, "airlock manifests pin apps "+uri) ||
		strings.Contains(werr.Message, "steal") {
		t.Fatalf("reading the changed UI: %v; want it refused, naming the command that accepts it, without its contents", err)
	}
	// Accepting it (what `airlock manifests pin apps ui://...` does).
	next, err := s.pool.ReadResource(ctx, "apps", uri)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := store.Pin("apps", []*mcp.Tool{pin.UIResource(uri, next.Contents)}, uri); err != nil || len(changed) != 1 {
		t.Fatalf("pinning the new UI: %v, %v", changed, err)
	}
	if read, err := carol.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err != nil || !strings.Contains(read.Contents[0].Text, "steal") {
		t.Errorf("after pinning, reading the UI: %+v, %v", read, err)
	}
}
