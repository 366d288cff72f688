package toolserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/sandbox"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/internal/upstream"
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

// cacheDir is a compilation cache the tests share, so that the guest is
// compiled once: testenv.WazeroCache, kept between runs (and shared with
// the sandbox's tests).
var cacheDir string

func TestMain(m *testing.M) {
	dir, err := testenv.WazeroCache()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cacheDir = dir
	os.Exit(m.Run())
}

// guestTool is a tool of the sandbox's adversarial test guest, in mode.
func guestTool(module, sha, mode, extra string) string {
	return `  ` + mode + `:
    description: guest in mode ` + mode + `
    side_effects: [write]
    data_access_level: public
    risk: low
    timeout: 20s
    wasm:
      module: ` + module + `
      sha256: ` + sha + `
      args: [` + mode + `, /data]
      input_schema: {type: object}
` + extra
}

// connect serves the manifest's wasm server and returns a client session.
func connect(t *testing.T, src string, reports *[]string) *mcp.ClientSession {
	t.Helper()
	return connectWith(t, src, reports, Options{})
}

// connectWith is connect with o (its Report is connect's).
func connectWith(t *testing.T, src string, reports *[]string, o Options) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "g.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("manifest: %v", ps)
	}
	sb, err := sandbox.New(ctx, sandbox.Options{CacheDir: cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	var mu sync.Mutex
	o.Report = func(server, tool string, err error) {
		mu.Lock()
		defer mu.Unlock()
		*reports = append(*reports, fmt.Sprintf("%s/%s: %v", server, tool, err))
	}
	n, err := New(ctx, sb, []*manifests.Manifest{m}, o)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := n.Transport(ctx, m.Server.Name)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func guestModule(t *testing.T) (path, sha string) {
	t.Helper()
	path = filepath.Join(repoRoot(), "internal", "sandbox", "testdata", "guest.wasm")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return path, hex.EncodeToString(sum[:])
}

func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestBadModuleIsolated: in one wasm server, a tool whose module does not
// match its sha256, one whose module is not wasm and one whose module is
// missing are listed as unavailable with the reason, and calling them says
// why, while the tool beside them works; each is reported once, naming
// the manifest and the tool.
func TestBadModuleIsolated(t *testing.T) {
	guest, sha := guestModule(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.wasm")
	if err := os.WriteFile(garbage, []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	gsum := sha256.Sum256([]byte("not wasm"))
	tool := func(name, module, sha string) string {
		return strings.Replace(guestTool(module, sha, "echo", ""), "  echo:", "  "+name+":", 1)
	}
	src := "server: {name: g, wasm: {}}\ntools:\n" +
		tool("good", guest, sha) +
		tool("mismatch", guest, strings.Repeat("0", 64)) +
		tool("garbage", garbage, hex.EncodeToString(gsum[:])) +
		tool("missing", filepath.Join(dir, "missing.wasm"), sha)
	var reports []string
	cs := connect(t, src, &reports)
	ctx := context.Background()

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"good":     "",
		"mismatch": "its module does not match the sha256 pinned in its manifest",
		"garbage":  "its module is not a WASI command module airlock can run",
		"missing":  "its module file does not exist",
	}
	if len(lt.Tools) != len(want) {
		t.Errorf("listed %d tools, want %d", len(lt.Tools), len(want))
	}
	for _, tl := range lt.Tools {
		reason, listed := want[tl.Name]
		if !listed {
			t.Errorf("unexpected tool %s", tl.Name)
			continue
		}
		got, _ := tl.Meta[upstream.MetaUnavailable].(string)
		if got != reason || reason != "" && !strings.HasPrefix(tl.Description, "[unavailable: "+reason+"] ") {
			t.Errorf("%s: description %q, _meta %v; want the reason %q", tl.Name, tl.Description, tl.Meta, reason)
		}
		if strings.Contains(tl.Description, dir) || strings.Contains(tl.Description, repoRoot()) {
			t.Errorf("%s: description %q shows a host path", tl.Name, tl.Description)
		}
	}
	for name, reason := range want {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"x": 1}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch {
		case reason == "" && (r.IsError || resultText(r) != `{"x":1}`):
			t.Errorf("%s beside the bad modules: isError=%v %q", name, r.IsError, resultText(r))
		case reason != "" && (!r.IsError || !strings.Contains(resultText(r), name+" is unavailable: "+reason)):
			t.Errorf("%s: isError=%v %q; want the reason %q", name, r.IsError, resultText(r), reason)
		}
	}
	sort.Strings(reports)
	wantReports := []string{"g/garbage: ", "g/mismatch: ", "g/missing: "}
	if len(reports) != len(wantReports) {
		t.Fatalf("reports %q, want one for each bad tool", reports)
	}
	for i, r := range reports {
		if !strings.HasPrefix(r, wantReports[i]) || !strings.Contains(r, "g.yaml: tools.") {
			t.Errorf("report %q, want it to start %q and name the manifest", r, wantReports[i])
		}
	}
}

// TestLimitResults: a guest that hits its open-file limit or a quota of
// its read-write mount gets an isError result naming the limit and the
// manifest field that sets it, and the mount holds no more than its quota.
func TestLimitResults(t *testing.T) {
	guest, sha := guestModule(t)
	data := t.TempDir()
	mount := "      mounts: [{host: " + data + ", guest: /data, mode: rw, max_bytes: 2MiB, max_files: 20}]\n"
	src := "server: {name: g, wasm: {}}\ntools:\n" +
		guestTool(guest, sha, "fdbomb", "      max_open_files: 16\n"+mount) +
		guestTool(guest, sha, "fill", mount) +
		guestTool(guest, sha, "files", mount) +
		guestTool(guest, sha, "echo", "")
	var reports []string
	cs := connect(t, src, &reports)
	ctx := context.Background()
	for _, tc := range []struct{ tool, want string }{
		{"fdbomb", "fdbomb hit its limit of 16 open files (max_open_files)"},
		{"fill", "fill hit the limit of 2MiB in its mount /data (max_bytes)"},
		{"files", "files hit the limit of 20 files in its mount /data (max_files)"},
	} {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		if !r.IsError || !strings.Contains(resultText(r), tc.want) {
			t.Errorf("%s: isError=%v %q; want %q", tc.tool, r.IsError, resultText(r), tc.want)
		}
		var size int64
		es, _ := os.ReadDir(data)
		for _, e := range es {
			if fi, err := e.Info(); err == nil {
				size += fi.Size()
			}
		}
		if size > 2<<20 || len(es) > 20 {
			t.Errorf("after %s the mount holds %d bytes in %d files", tc.tool, size, len(es))
		}
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"after": true}})
	if err != nil || r.IsError {
		t.Fatalf("echo after the bombs: %v %q", err, resultText(r))
	}
}

// TestLazyLoad (issue 28 §5): a module the cache vouches for
// (Options.Compiled) is loaded at its tool's first call, once however many
// calls come at once, and not when the server connects; one that then
// fails to load makes its tool's calls say why, reported once. Without
// the cache's word, modules load at connection (Loaded hears of each),
// and one that does not compile is listed unavailable.
func TestLazyLoad(t *testing.T) {
	guest, sha := guestModule(t)
	garbage := filepath.Join(t.TempDir(), "garbage.wasm")
	if err := os.WriteFile(garbage, []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	gsum := sha256.Sum256([]byte("not wasm"))
	gsha := hex.EncodeToString(gsum[:])
	tool := func(name, module, sha string) string {
		return strings.Replace(guestTool(module, sha, "echo", ""), "  echo:", "  "+name+":", 1)
	}
	src := "server: {name: g, wasm: {}}\ntools:\n" + tool("good", guest, sha) + tool("garbage", garbage, gsha)
	ctx := context.Background()

	for _, vouched := range []bool{true, false} {
		t.Run(fmt.Sprint("vouched=", vouched), func(t *testing.T) {
			var mu sync.Mutex
			var loaded []string
			var reports []string
			cs := connectWith(t, src, &reports, Options{
				Compiled: func(string) bool { return vouched },
				Loaded: func(s string) {
					mu.Lock()
					defer mu.Unlock()
					loaded = append(loaded, s)
				},
			})
			lt, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			unavailable := map[string]bool{}
			for _, tl := range lt.Tools {
				unavailable[tl.Name] = tl.Meta[upstream.MetaUnavailable] != nil
			}
			mu.Lock()
			atConnect := slices.Clone(loaded)
			mu.Unlock()
			if vouched {
				if len(atConnect) != 0 || unavailable["good"] || unavailable["garbage"] {
					t.Fatalf("vouched for: loaded %v at connection, unavailable %v; want nothing loaded, both listed", atConnect, unavailable)
				}
			} else if !slices.Equal(atConnect, []string{sha}) || !unavailable["garbage"] || unavailable["good"] {
				t.Fatalf("not vouched for: loaded %v at connection, unavailable %v; want good loaded, garbage unavailable", atConnect, unavailable)
			}

			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "good", Arguments: map[string]any{"i": i}})
					if err != nil || r.IsError || resultText(r) != fmt.Sprintf(`{"i":%d}`, i) {
						t.Errorf("call %d of good: %v %+v", i, err, r)
					}
				}()
			}
			wg.Wait()
			for range 2 {
				r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "garbage", Arguments: map[string]any{}})
				if err != nil || !r.IsError || !strings.Contains(resultText(r), "garbage is unavailable: its module is not a WASI command module airlock can run") {
					t.Errorf("call of garbage: %v %q", err, resultText(r))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(loaded, []string{sha}) {
				t.Errorf("loaded %v, want good's module once", loaded)
			}
			if len(reports) != 1 || !strings.HasPrefix(reports[0], "g/garbage: ") {
				t.Errorf("reports %q, want garbage's once", reports)
			}
		})
	}
}
