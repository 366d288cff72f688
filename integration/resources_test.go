package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/manifests"
)

// notesManifest exposes testupstream's resources and prompt to principals
// cleared for confidential data, and its set_note tool.
func notesManifest(t *testing.T) *manifests.Manifest {
	t.Helper()
	bin := buildBinary(t, "./integration/testupstream")
	yaml := `server:
  name: notes
  stdio:
    command: ` + bin + `
tools:
  set_note: {side_effects: [write], data_access_level: internal, risk: low, idempotent: true}
resources:
  data_access_level: confidential
prompts:
  data_access_level: confidential
`
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "notes.yaml"), []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("notes manifest: %v", manifests.Problems(ps))
	}
	return m
}

// clearedAndPublic: carol is cleared for confidential data, pat for public
// data only; both may call every tool.
func clearedAndPublic() *identity.Directory {
	role := func(l manifests.DataLevel) *config.Role {
		return &config.Role{Permissions: []string{"*"}, DataAccessLevel: l, Tools: []string{"*"}}
	}
	return identity.New(&config.Config{
		Principals: []config.Principal{
			{Name: "carol", Roles: []string{"cleared"}, APIKeySHA256: []string{identity.HashKey("carol-key")}},
			{Name: "pat", Roles: []string{"public"}, APIKeySHA256: []string{identity.HashKey("pat-key")}},
		},
		Roles: map[string]*config.Role{"cleared": role(manifests.DataConfidential), "public": role(manifests.DataPublic)},
	})
}

// connectWithOptions is connectURL with client options (handlers).
func connectWithOptions(t *testing.T, url, key string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: headerRT{headers: bearer(key)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "airlock-test", Version: "1"}, opts).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, sessionProtocol)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

type offered struct{ resources, templates, prompts []string }

func listOffered(t *testing.T, cs *mcp.ClientSession) offered {
	t.Helper()
	ctx := context.Background()
	var o offered
	rs, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatalf("resources/list: %v", err)
	}
	for _, r := range rs.Resources {
		o.resources = append(o.resources, r.URI)
	}
	ts, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil {
		t.Fatalf("resources/templates/list: %v", err)
	}
	for _, r := range ts.ResourceTemplates {
		o.templates = append(o.templates, r.URITemplate)
	}
	ps, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatalf("prompts/list: %v", err)
	}
	for _, p := range ps.Prompts {
		o.prompts = append(o.prompts, p.Name)
	}
	return o
}

// TestResourcesAndPromptsPassThrough: testupstream's resource, template and
// prompt reach a principal cleared for them unchanged, stay invisible and
// refused for one who is not, and a subscription carries the upstream's
// resources/updated to the client.
func TestResourcesAndPromptsPassThrough(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	m := notesManifest(t)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: clearedAndPublic()})
	ctx := context.Background()

	updates := make(chan string, 16)
	carol := connectWithOptions(t, s.url, "carol-key", &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updates <- r.Params.URI },
	})
	pat := connectWithOptions(t, s.url, "pat-key", nil)

	want := offered{resources: []string{"mem://note"}, templates: []string{"mem://notes/{id}"}, prompts: []string{"notes__summarize"}}
	waitUntil(t, "carol's listing", 60*time.Second, func() error {
		if got := listOffered(t, carol); !cmp.Equal(want, got, cmp.AllowUnexported(offered{})) {
			return fmt.Errorf("(-want +got):\n%s", cmp.Diff(want, got, cmp.AllowUnexported(offered{})))
		}
		return nil
	})

	direct := directSession(t, exec.Command(m.Server.Stdio.Command))

	t.Run("cleared principal reads what the upstream serves", func(t *testing.T) {
		for _, uri := range []string{"mem://note", "mem://notes/42"} {
			d, err := direct.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
			if err != nil {
				t.Fatalf("direct read %s: %v", uri, err)
			}
			via, err := carol.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
			if err != nil {
				t.Fatalf("read %s through airlock: %v", uri, err)
			}
			if diff := cmp.Diff(mustJSON(t, d), mustJSON(t, via)); diff != "" {
				t.Errorf("%s (-direct +through airlock):\n%s", uri, diff)
			}
			if len(via.Contents) != 1 || via.Contents[0].Text == "" {
				t.Errorf("%s: contents %s, want one text", uri, mustJSON(t, via.Contents))
			}
		}
	})

	t.Run("cleared principal gets the prompt", func(t *testing.T) {
		args := map[string]string{"topic": "airlock"}
		d, err := direct.GetPrompt(ctx, &mcp.GetPromptParams{Name: "summarize", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		via, err := carol.GetPrompt(ctx, &mcp.GetPromptParams{Name: "notes__summarize", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(mustJSON(t, d), mustJSON(t, via)); diff != "" {
			t.Errorf("prompt (-direct +through airlock):\n%s", diff)
		}
		if !strings.Contains(mustJSON(t, via.Messages), "Summarize airlock") {
			t.Errorf("prompt messages %s do not use the argument", mustJSON(t, via.Messages))
		}
	})

	t.Run("public principal sees nothing and is refused", func(t *testing.T) {
		if got := listOffered(t, pat); len(got.resources)+len(got.templates)+len(got.prompts) != 0 {
			t.Errorf("pat lists %+v, want nothing", got)
		}
		refusals := map[string]error{}
		_, refusals["read"] = pat.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://note"})
		_, refusals["read through the template"] = pat.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://notes/1"})
		_, refusals["get prompt"] = pat.GetPrompt(ctx, &mcp.GetPromptParams{Name: "notes__summarize", Arguments: map[string]string{"topic": "x"}})
		refusals["subscribe"] = pat.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://note"})
		for what, err := range refusals {
			var wire *jsonrpc.Error
			if !errors.As(err, &wire) || wire.Code != gateway.CodeAccessDenied ||
				!strings.Contains(err.Error(), "needs data access level confidential") || !strings.Contains(err.Error(), `principal "pat" is cleared for public`) {
				t.Errorf("%s: %v; want access denied naming the level needed", what, err)
			}
		}
	})

	t.Run("subscription relays the upstream's update", func(t *testing.T) {
		if err := carol.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://note"}); err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		res := call(t, carol, "notes__set_note", map[string]any{"text": "buy bread"}, "")
		if res.IsError {
			t.Fatalf("notes__set_note: %s", text(res))
		}
		select {
		case uri := <-updates:
			if uri != "mem://note" {
				t.Fatalf("update for %s, want mem://note", uri)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no notifications/resources/updated for mem://note after set_note")
		}
		got, err := carol.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://note"})
		if err != nil || len(got.Contents) != 1 || got.Contents[0].Text != "buy bread" {
			t.Fatalf("re-read after the update: %s, %v; want buy bread", mustJSON(t, got), err)
		}

		// Unsubscribed: a further update is not delivered.
		if err := carol.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "mem://note"}); err != nil {
			t.Fatalf("unsubscribe: %v", err)
		}
		if res := call(t, carol, "notes__set_note", map[string]any{"text": "done"}, ""); res.IsError {
			t.Fatalf("notes__set_note: %s", text(res))
		}
		select {
		case uri := <-updates:
			t.Errorf("update for %s after unsubscribing", uri)
		case <-time.After(time.Second):
		}
	})

	if !slices.Contains(listOffered(t, carol).resources, "mem://note") {
		t.Error("mem://note disappeared from carol's listing")
	}
}
