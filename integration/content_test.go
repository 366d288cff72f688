package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// everythingPkg is the MCP go-sdk's conformance server: one tool per content
// type, written by the SDK's authors rather than by us.
const everythingPkg = "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"

// everythingContentTools are the conformance server's tools whose results
// are fixed content (no sampling, elicitation or notifications).
var everythingContentTools = []string{
	"test_simple_text",
	"test_image_content",
	"test_audio_content",
	"test_embedded_resource",
	"test_multiple_content_types",
	"test_error_handling",
}

// TestContentPassesThrough calls tools through airlock and directly on the
// same upstream binary, and requires the results to be identical apart from
// airlock's own _meta keys: every content type, structuredContent and tool
// errors pass through unchanged.
func TestContentPassesThrough(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	log := filepath.Join(t.TempDir(), "effects.log")
	ms := []*manifests.Manifest{testupstreamManifest(t, log)}
	everything, everythingErr := buildEverythingServer(t)
	if everythingErr == nil {
		ms = append(ms, everythingManifest(t, everything))
	}
	s := newStack(t, stackOptions{manifests: ms})
	cs := s.connect(t, nil)
	want := []string{"counter__content", "counter__fail"}
	if everythingErr == nil {
		for _, name := range everythingContentTools {
			want = append(want, "everything__"+name)
		}
	}
	waitTools(t, cs, want...)

	up := directSession(t, exec.Command(buildBinary(t, "./integration/testupstream")))

	t.Run("every content type", func(t *testing.T) {
		direct := callDirect(t, up, "content")
		// The comparison would prove nothing if the upstream stopped
		// returning the types this test is about.
		var kinds []string
		for _, c := range direct.Content {
			kinds = append(kinds, reflect.TypeOf(c).Elem().Name())
		}
		if got, want := strings.Join(kinds, ","), "TextContent,ImageContent,AudioContent,ResourceLink,EmbeddedResource"; got != want {
			t.Fatalf("testupstream content returned %s, want %s", got, want)
		}
		if direct.StructuredContent == nil {
			t.Fatal("testupstream content returned no structuredContent")
		}
		via := call(t, cs, "counter__content", map[string]any{}, "")
		assertSameResult(t, direct, via)
	})

	t.Run("tool error", func(t *testing.T) {
		via := call(t, cs, "counter__fail", map[string]any{"text": "x"}, "")
		if !via.IsError || !strings.Contains(text(via), "the disk is full") {
			t.Fatalf("counter__fail: isError=%v text %q; want the upstream's error %q", via.IsError, text(via), "the disk is full")
		}
		assertSameResult(t, callDirectArgs(t, up, "fail", map[string]any{"text": "x"}), via)
	})

	t.Run("conformance everything-server", func(t *testing.T) {
		if everythingErr != nil {
			testenv.Skipf(t, "the go-sdk conformance everything-server does not build in this module: %v", everythingErr)
		}
		direct := directSession(t, exec.Command(everything))
		for _, name := range everythingContentTools {
			t.Run(name, func(t *testing.T) {
				d := callDirect(t, direct, name)
				if len(d.Content) == 0 {
					t.Fatalf("direct %s returned no content", name)
				}
				via := call(t, cs, "everything__"+name, map[string]any{}, "")
				assertSameResult(t, d, via)
			})
		}
	})
}

// buildEverythingServer builds the conformance server from the module
// cache, or says why it does not build with this module's go.sum (the
// test then skips that part rather than adding dependencies, and fails
// under CI).
func buildEverythingServer(t *testing.T) (string, error) {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[everythingPkg]; ok {
		return p, everythingBuildErr
	}
	dir, err := os.MkdirTemp("", "airlock-bin-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "everything-server")
	cmd := exec.Command("go", "build", "-mod=readonly", "-o", out, everythingPkg)
	cmd.Dir = repoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		everythingBuildErr = fmt.Errorf("go build %s: %v\n%s", everythingPkg, err, b)
		out = ""
	}
	built[everythingPkg] = out
	return out, everythingBuildErr
}

// everythingBuildErr is why the conformance server did not build (under
// buildMu).
var everythingBuildErr error

// everythingManifest declares the conformance server's content tools.
func everythingManifest(t *testing.T, bin string) *manifests.Manifest {
	t.Helper()
	var b strings.Builder
	b.WriteString("server:\n  name: everything\n  stdio:\n    command: " + bin + "\ntools:\n")
	for _, name := range everythingContentTools {
		b.WriteString("  " + name + ": {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")
	}
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "everything.yaml"), []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("everything manifest: %v", ps)
	}
	return m
}

// directSession connects an MCP client straight to an upstream command,
// bypassing airlock.
func directSession(t *testing.T, cmd *exec.Cmd) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-test-direct", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to %s directly: %v", cmd.Path, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func callDirect(t *testing.T, cs *mcp.ClientSession, name string) *mcp.CallToolResult {
	t.Helper()
	return callDirectArgs(t, cs, name, map[string]any{})
}

func callDirectArgs(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s directly: %v", name, err)
	}
	return res
}

// assertSameResult requires via (through airlock) to equal direct (the
// upstream's own answer) as JSON once airlock's _meta keys are removed, and
// airlock's keys to be present.
func assertSameResult(t *testing.T, direct, via *mcp.CallToolResult) {
	t.Helper()
	if via.Meta[gateway.MetaTask] == nil || via.Meta[gateway.MetaCall] == nil {
		t.Errorf("result through airlock lacks _meta %q/%q: %v", gateway.MetaTask, gateway.MetaCall, via.Meta)
	}
	stripped := *via
	stripped.Meta = mcp.Meta{}
	for k, v := range via.Meta {
		if k != gateway.MetaTask && k != gateway.MetaCall {
			stripped.Meta[k] = v
		}
	}
	if len(stripped.Meta) == 0 {
		stripped.Meta = nil
	}
	d, v := jsonValue(t, direct), jsonValue(t, &stripped)
	if !reflect.DeepEqual(d, v) {
		t.Fatalf("result changed by airlock:\ndirect  %s\nairlock %s", mustJSON(t, d), mustJSON(t, v))
	}
}

func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
