package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// parseSkeleton loads a skeleton as the gateway would and fails the test
// on any problem.
func parseSkeleton(t *testing.T, text string) *manifests.Manifest {
	t.Helper()
	m, err := manifests.Parse("skeleton.yaml", []byte(text))
	if err != nil {
		t.Fatalf("skeleton does not parse: %v\n%s", err, text)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("skeleton does not validate: %v\n%s", manifests.Problems(ps), text)
	}
	return m
}

func sideEffects(ses ...manifests.SideEffect) []manifests.SideEffect { return ses }

func TestScanTestupstream(t *testing.T) {
	bin := buildTestupstream(t)
	code, out, errs := runCLI(t, "manifests", "scan", "--name", "counter", "--command", bin)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	m := parseSkeleton(t, out)
	if m.Server.Name != "counter" || m.Server.Stdio == nil || m.Server.Stdio.Command != bin {
		t.Fatalf("server = %+v", m.Server)
	}
	for _, name := range []string{"echo", "append", "put", "fail", "content"} {
		if m.Tools[name] == nil {
			t.Errorf("testupstream's tool %s is not declared", name)
		}
	}
	echo := m.Tools["echo"]
	if !reflect.DeepEqual(echo.SideEffects, sideEffects(manifests.SideEffectRead)) || echo.Risk != manifests.RiskLow || !echo.Idempotent || echo.Approval != nil {
		t.Errorf("echo (readOnlyHint) = %+v, want [read], low, idempotent", echo)
	}
	// append has no annotations: MCP's default is destructive.
	app := m.Tools["append"]
	if !reflect.DeepEqual(app.SideEffects, sideEffects(manifests.SideEffectWrite, manifests.SideEffectDelete)) || app.Risk != manifests.RiskHigh ||
		app.Approval == nil || app.Approval.Group != "CHANGE-ME" || app.Idempotent {
		t.Errorf("append (no annotations) = %+v, want [write delete], high, approval CHANGE-ME", app)
	}
	for _, want := range []string{"# echo: Echo text back.", "# REVIEW:", "data_access_level: internal"} {
		if !strings.Contains(out, want) {
			t.Errorf("skeleton lacks %q", want)
		}
	}
	if !strings.Contains(errs, fmt.Sprintf("%d tool(s) declared (0 skipped)", len(m.Tools))) {
		t.Errorf("stderr: %s", errs)
	}

	// From the configuration, into a file: the manifest's server settings
	// (env with its ${VAR}s) are kept.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "counter.yaml"), []byte(counterManifest(bin, "Echo ${AIRLOCK_DATA_DIR}.")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(cfg, []byte("manifests: [counter.yaml]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	outFile := filepath.Join(dir, "scanned.yaml")
	code, out, errs = runCLI(t, "manifests", "scan", "counter", "--config", cfg, "--out", outFile)
	if code != 0 || out != "" {
		t.Fatalf("scan --out: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	b, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	m = parseSkeleton(t, string(b))
	if got := m.Server.Stdio.Env["ECHO_DESCRIPTION"]; got != "Echo ${AIRLOCK_DATA_DIR}." {
		t.Errorf("env ECHO_DESCRIPTION = %q, want the manifest's unexpanded value", got)
	}
	// The description is what the running server said (the variable
	// expanded to the data directory).
	dataDir, _ := filepath.Abs(".airlock")
	if !strings.Contains(string(b), "# echo: Echo "+dataDir+".") {
		t.Errorf("skeleton lacks echo's description:\n%s", b)
	}
	code, _, errs = runCLI(t, "manifests", "scan", "counter", "--config", cfg, "--out", outFile)
	if code != 1 || !strings.Contains(errs, "--force") {
		t.Fatalf("scan --out onto an existing file: exit %d, %s", code, errs)
	}
	if code, _, errs = runCLI(t, "manifests", "scan", "counter", "--config", cfg, "--out", outFile, "--force"); code != 0 {
		t.Fatalf("scan --out --force: exit %d, %s", code, errs)
	}
}

func TestScanServerMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an npm server; skipped with -short")
	}
	testenv.RequireNode(t)
	js := testenv.NPMServer(t, "server-memory")
	t.Setenv("MEMORY_FILE_PATH", filepath.Join(t.TempDir(), "memory.jsonl"))
	code, out, errs := runCLI(t, "manifests", "scan", "--name", "memory", "--command", "node '"+js+"'")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	m := parseSkeleton(t, out)
	if len(m.Tools) != 9 {
		t.Errorf("declared %d tools, want server-memory's 9", len(m.Tools))
	}
	for _, name := range []string{"read_graph", "search_nodes", "open_nodes"} {
		tool := m.Tools[name]
		if tool == nil || !reflect.DeepEqual(tool.SideEffects, sideEffects(manifests.SideEffectRead)) || tool.Risk != manifests.RiskLow || !tool.Idempotent {
			t.Errorf("%s (readOnlyHint) = %+v, want [read], low, idempotent", name, tool)
		}
	}
	for _, name := range []string{"delete_entities", "delete_observations", "delete_relations"} {
		tool := m.Tools[name]
		if tool == nil || tool.Risk != manifests.RiskHigh || tool.Approval == nil || !tool.Idempotent {
			t.Errorf("%s (destructiveHint, idempotentHint) = %+v, want high with approval, idempotent", name, tool)
		}
	}
	if c := m.Tools["create_entities"]; c == nil || !reflect.DeepEqual(c.SideEffects, sideEffects(manifests.SideEffectWrite)) || c.Risk != manifests.RiskMedium || c.Approval != nil {
		t.Errorf("create_entities (destructiveHint false) = %+v, want [write], medium", c)
	}
}

func TestScanServerFilesystemPathArgs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an npm server; skipped with -short")
	}
	testenv.RequireNode(t)
	js := testenv.NPMServer(t, "server-filesystem")
	code, out, errs := runCLI(t, "manifests", "scan", "--name", "fs", "--command", "node "+js+" "+t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	m := parseSkeleton(t, out)
	if got := m.Tools["read_text_file"]; got == nil || !reflect.DeepEqual(got.PathArgs, []string{"path"}) {
		t.Errorf("read_text_file path_args = %+v, want [path]", got)
	}
	if got := m.Tools["move_file"]; got == nil || !reflect.DeepEqual(got.PathArgs, []string{"destination", "source"}) {
		t.Errorf("move_file path_args = %+v, want [destination source]", got)
	}
	if !reflect.DeepEqual(m.Server.PathRoots, []string{"/CHANGE-ME"}) {
		t.Errorf("path_roots = %v, want the CHANGE-ME placeholder", m.Server.PathRoots)
	}
}

func TestScanUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"manifests", "scan"}, 2, "name a SERVER"},
		{[]string{"manifests", "scan", "--command", "npx x"}, 2, "--name is required"},
		{[]string{"manifests", "scan", "--name", "x", "--command", "a", "--url", "http://h/mcp"}, 2, "not both"},
		{[]string{"manifests", "scan", "srv", "--url", "http://h/mcp"}, 2, "not both"},
		{[]string{"manifests", "scan", "--name", "Bad__Name", "--url", "http://h/mcp"}, 1, `--name "Bad__Name" is not a server name`},
		{[]string{"manifests", "scan", "--name", "x", "--command", "npx 'unterminated"}, 1, "unterminated ' quote"},
	} {
		code, out, errs := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q (stdout %q)", tc.args, code, errs, tc.code, tc.want, out)
		}
	}
}

func TestSplitCommand(t *testing.T) {
	for in, want := range map[string][]string{
		`npx -y @modelcontextprotocol/server-memory`: {"npx", "-y", "@modelcontextprotocol/server-memory"},
		`node '/path with spaces/x.js'  --flag`:      {"node", "/path with spaces/x.js", "--flag"},
		`sh -c "echo \"hi\" \$HOME"`:                 {"sh", "-c", `echo "hi" $HOME`},
		`a\ b c`:                                     {"a b", "c"},
		`x ''`:                                       {"x", ""},
	} {
		got, err := splitCommand(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("splitCommand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := splitCommand("   "); err == nil {
		t.Error("an empty command splits")
	}
}

// TestScanDeclaredMetadata: scanning an upstream that lists its tools as
// airlock does (here, what an airlock in front of a files server lists:
// its names prefixed, risk and recovery metadata in _meta) pre-fills the
// skeleton with the risk, side effects, data level, approval quorum, and
// the capture and compensation its manifest declared; the annotations,
// which claim read-only, give way.
func TestScanDeclaredMetadata(t *testing.T) {
	write := &manifests.Tool{SideEffects: sideEffects(manifests.SideEffectWrite), DataAccessLevel: manifests.DataConfidential,
		Risk: manifests.RiskHigh, Idempotent: true, Approval: &manifests.Approval{Group: "ops", Quorum: 2},
		Capture:      &manifests.Call{Tool: "read_file", Args: map[string]string{"path": "args.path"}},
		Compensation: &manifests.Call{Tool: "write_file", Args: map[string]string{"path": "args.path", "content": "before.content"}, When: "before != null"}}
	read := &manifests.Tool{SideEffects: sideEffects(manifests.SideEffectRead), DataAccessLevel: manifests.DataPublic, Risk: manifests.RiskLow}
	inner := &manifests.Manifest{Server: manifests.Server{Name: "files"}, Tools: map[string]*manifests.Tool{"write_file": write, "read_file": read}}
	pol, err := policy.Compile(policy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	up := mcp.NewServer(&mcp.Implementation{Name: "other-airlock", Version: "1"}, nil)
	for name, d := range inner.Tools {
		exposed := inner.Exposed(name)
		up.AddTool(&mcp.Tool{Name: exposed, InputSchema: map[string]any{"type": "object"},
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
			Meta: mcp.Meta{
				manifests.MetaRisk:     pol.Describe(policy.Tool{Name: exposed, Server: "files", Upstream: name, Decl: d}),
				manifests.MetaRecovery: d.Recovery(inner.Exposed),
			}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(hs.Close)

	code, out, errs := runCLI(t, "manifests", "scan", "--name", "outer", "--url", hs.URL)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	m := parseSkeleton(t, out)
	w, r := m.Tools["files__write_file"], m.Tools["files__read_file"]
	if w == nil || r == nil {
		t.Fatalf("tools missing:\n%s", out)
	}
	if !reflect.DeepEqual(w.SideEffects, write.SideEffects) || w.Risk != manifests.RiskHigh || w.DataAccessLevel != manifests.DataConfidential || !w.Idempotent ||
		w.Approval == nil || w.Approval.Quorum != 2 {
		t.Errorf("files__write_file = %+v, want the declared [write], high, confidential, idempotent, approval by 2\n%s", w, out)
	}
	wantCapture := &manifests.Call{Tool: "files__read_file", Args: write.Capture.Args}
	wantComp := &manifests.Call{Tool: "files__write_file", Args: write.Compensation.Args, When: write.Compensation.When}
	if !reflect.DeepEqual(w.Capture, wantCapture) || !reflect.DeepEqual(w.Compensation, wantComp) {
		t.Errorf("capture %+v compensation %+v, want %+v and %+v\n%s", w.Capture, w.Compensation, wantCapture, wantComp, out)
	}
	if !reflect.DeepEqual(r.SideEffects, read.SideEffects) || r.Risk != manifests.RiskLow || r.DataAccessLevel != manifests.DataPublic || r.Approval != nil || r.Compensation != nil {
		t.Errorf("files__read_file = %+v, want the declared [read], low, public", r)
	}
}
