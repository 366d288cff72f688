package toolserver

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/sandbox"
	"github.com/airlock-run/airlock/manifests"
)

func TestParseOutput(t *testing.T) {
	for _, tc := range []struct {
		name, out  string
		want       string // the first content's text
		structured bool
	}{
		{name: "call tool result", out: `{"content":[{"type":"text","text":"hi"}],"structuredContent":{"n":1}}`, want: "hi", structured: true},
		{name: "plain text", out: "just text\n", want: "just text\n"},
		{name: "json without content is text", out: `{"rows":[1,2]}`, want: `{"rows":[1,2]}`},
		{name: "content not a list is text", out: `{"content":"x"}`, want: `{"content":"x"}`},
		{name: "invalid utf-8 is repaired", out: "a\xffb", want: "a\uFFFDb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := parseOutput([]byte(tc.out))
			if r.IsError || len(r.Content) != 1 {
				t.Fatalf("result %+v", r)
			}
			if got := r.Content[0].(*mcp.TextContent).Text; got != tc.want {
				t.Errorf("text %q, want %q", got, tc.want)
			}
			if (r.StructuredContent != nil) != tc.structured {
				t.Errorf("structured content %v", r.StructuredContent)
			}
		})
	}
}

// repoRoot is the repository root (this file lives in
// internal/sandbox/toolserver).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// TestModuleMismatchRefusesToLoad: a manifest whose sha256 does not match
// its module stops New, naming the manifest and the tool.
func TestModuleMismatchRefusesToLoad(t *testing.T) {
	m, err := manifests.Load(filepath.Join(repoRoot(), "manifests", "examples", "native.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m.Tools["json_query"].WASM.SHA256 = strings.Repeat("0", 64)
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	vars := map[string]string{"AIRLOCK_DATA_DIR": t.TempDir()}
	_, err = New(ctx, sb, []*manifests.Manifest{m}, vars, os.Getenv)
	if err == nil || !strings.Contains(err.Error(), "tools.json_query.wasm") || !strings.Contains(err.Error(), strings.Repeat("0", 64)) {
		t.Fatalf("New = %v; want a mismatch naming tools.json_query.wasm and the expected hash", err)
	}
}
