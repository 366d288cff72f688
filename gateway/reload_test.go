package gateway

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/manifests"
)

// A reload that adds a manifest publishes its tools with
// notifications/tools/list_changed to a connected client; the next call of
// a tool whose declaration changed carries the new declaration; a reload
// that drops the manifest removes its tools, again with list_changed.
func TestReloadPublishesToolChanges(t *testing.T) {
	ft := &fakeTemporal{}
	base := Options{Principal: "alice"}
	g := newTestGateway(t, ft, base)

	changed := make(chan struct{}, 8)
	cs := connectMemoryWith(t, g, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx := context.Background()
	names := func() []string {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tl := range res.Tools {
			out = append(out, tl.Name)
		}
		return out
	}
	awaitChanged := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no notifications/tools/list_changed after %s", what)
		}
	}
	if n := names(); slices.Contains(n, "notes__add") {
		t.Fatalf("tools before the reload: %v", n)
	}

	counter := counterManifest()
	counter.Tools["echo"].Risk = manifests.RiskHigh // the declaration changes, the definition does not
	notes := &manifests.Manifest{File: "notes.yaml",
		Server: manifests.Server{Name: "notes", Stdio: &manifests.StdioServer{Command: "notes-server"}},
		Tools: map[string]*manifests.Tool{"add": {Description: "Add a note.", SideEffects: []manifests.SideEffect{manifests.SideEffectWrite},
			DataAccessLevel: manifests.DataPublic, Risk: manifests.RiskLow}}}
	g.Reload(Live{Manifests: []*manifests.Manifest{counter, notes}, MaxCalls: 7})
	awaitChanged("adding a manifest")
	if n := names(); !slices.Contains(n, "notes__add") || !slices.Contains(n, "counter__echo") {
		t.Fatalf("tools after adding notes.yaml: %v", n)
	}

	res := callTool(t, cs, "counter__echo", map[string]any{"text": "hi"}, "")
	if res.IsError {
		t.Fatalf("call after the reload: %q", textOf(res))
	}
	u := ft.last(t)
	if u.req.Spec.Risk != string(manifests.RiskHigh) {
		t.Fatalf("the call carried spec %+v, want the reloaded declaration (risk high)", u.req.Spec)
	}
	if u.in.Limits.MaxCalls != 7 {
		t.Fatalf("new task's max calls %d, want the reloaded 7", u.in.Limits.MaxCalls)
	}

	g.Reload(Live{Manifests: []*manifests.Manifest{counter}})
	awaitChanged("removing a manifest")
	if n := names(); slices.Contains(n, "notes__add") {
		t.Fatalf("tools after removing notes.yaml: %v", n)
	}
}
