package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"gopkg.in/yaml.v3"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// TestPrincipalsAndPolicyOnNPMServers: two principals with different roles
// against the real npm filesystem and memory servers each see and can call
// exactly what their role allows, and the attacks on arguments are denied
// before anything reaches the upstream.
func TestPrincipalsAndPolicyOnNPMServers(t *testing.T) {
	t.Parallel()
	sandbox := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("top secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(sandbox, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sandbox, "stage.env"), []byte("top secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox}, nil)
	mem := loadExample(t, "memory.yaml", "server-memory", nil, map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "m.jsonl")})
	readTools := []string{"filesystem__read_*", "filesystem__list_*", "filesystem__get_file_info", "filesystem__search_files", "filesystem__directory_tree"}
	dir := identity.New(&config.Config{
		Principals: []config.Principal{
			{Name: "dev", Roles: []string{"operator"}, APIKeySHA256: []string{identity.HashKey("dev-key")}},
			{Name: "reader", Roles: []string{"reader"}, APIKeySHA256: []string{identity.HashKey("reader-key")}},
		},
		Roles: map[string]*config.Role{
			"operator": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataConfidential, Tools: []string{"*"}},
			"reader":   {Permissions: []string{"filesystem.read"}, DataAccessLevel: manifests.DataInternal, Tools: readTools},
		},
	})
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{fsm, mem}, directory: dir, policy: &policy.Config{
		MaxArgBytes: 64 << 10,
		Rules:       exampleRules(t), // no-env-files, as airlock.yaml has it
	}})

	dev := connectURL(t, s.url, bearer("dev-key"))
	devTools := waitTools(t, dev, "filesystem__write_file", "memory__create_entities")
	reader := connectURL(t, s.url, bearer("reader-key"))
	readerTools := waitTools(t, reader, "filesystem__read_text_file")

	// Each sees exactly what its role allows.
	if len(devTools) != 23+6 { // every manifest tool, and airlock_status, airlock_await, airlock_rollback and the 3 state tools
		t.Errorf("dev sees %d tools, want all 23 and the 6 built-ins", len(devTools))
	}
	var got []string
	for name := range readerTools {
		got = append(got, name)
	}
	sort.Strings(got)
	for _, name := range got {
		if name == gateway.ToolStatus || name == gateway.ToolAwait || name == gateway.ToolRollback || strings.HasPrefix(name, "airlock_state_") {
			continue
		}
		if strings.HasPrefix(name, "memory__") || name == "filesystem__write_file" || name == "filesystem__edit_file" ||
			name == "filesystem__move_file" || name == "filesystem__create_directory" {
			t.Errorf("reader sees %s", name)
		}
	}
	if len(got) <= 6 || len(got) >= len(devTools) {
		t.Fatalf("reader sees %v", got)
	}

	// dev writes inside the sandbox; reader reads it; reader cannot write.
	path := filepath.Join(sandbox, "notes.md")
	wrote := call(t, dev, "filesystem__write_file", map[string]any{"path": path, "content": "hello"}, "")
	if wrote.IsError {
		t.Fatalf("dev write: %s", text(wrote))
	}
	devTask, _ := wrote.Meta[gateway.MetaTask].(string)
	if res := call(t, reader, "filesystem__read_text_file", map[string]any{"path": path}, ""); res.IsError || !strings.Contains(text(res), "hello") {
		t.Fatalf("reader read: %s", text(res))
	}
	// Tools outside reader's role answer as names that do not exist
	// (issue 25: names cannot be probed).
	for _, tool := range []string{"filesystem__write_file", "memory__read_graph"} {
		_, err := reader.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"path": path, "content": "overwritten"}})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unknown tool %q", tool)) {
			t.Fatalf("reader calls %s: %v; want the answer to an unknown tool", tool, err)
		}
	}

	// Attacks, by dev (who may otherwise do anything): each denied with the
	// check that caught it, and nothing reaches the upstream.
	big := strings.Repeat("x", 100<<10)
	attacks := []struct {
		name, tool string
		args       map[string]any
		want       string // in the reason
	}{
		{"path traversal", "filesystem__read_text_file", map[string]any{"path": filepath.Join(sandbox, "..", filepath.Base(outside), "secret.txt")}, "outside"},
		{"absolute path elsewhere", "filesystem__read_text_file", map[string]any{"path": "/etc/passwd"}, "outside"},
		{"symlink escape", "filesystem__read_text_file", map[string]any{"path": filepath.Join(sandbox, "escape", "secret.txt")}, "outside"},
		{"symlink escape in a list", "filesystem__read_multiple_files", map[string]any{"paths": []string{path, filepath.Join(sandbox, "escape", "secret.txt")}}, "outside"},
		{"oversized arguments", "filesystem__write_file", map[string]any{"path": path, "content": big}, "bytes"},
		{"schema violation", "filesystem__write_file", map[string]any{"path": path}, "content"},
		{"rule", "filesystem__write_file", map[string]any{"path": filepath.Join(sandbox, "prod.env"), "content": "KEY=1"}, "no-env-files"},
		// The rule holds for every path argument (paths(tool, args)).
		{"rule over a list of paths", "filesystem__read_multiple_files", map[string]any{"paths": []string{path, filepath.Join(sandbox, "stage.env")}}, "no-env-files"},
		{"rule over a move's destination", "filesystem__move_file", map[string]any{"source": path, "destination": filepath.Join(sandbox, "s8.env")}, "no-env-files"},
		{"rule over a move's source", "filesystem__move_file", map[string]any{"source": filepath.Join(sandbox, "stage.env"), "destination": filepath.Join(sandbox, "b.md")}, "no-env-files"},
		{"high risk needs approval", "filesystem__move_file", map[string]any{"source": path, "destination": filepath.Join(sandbox, "moved.md")}, "needs approval"},
	}
	for _, a := range attacks {
		res := call(t, dev, a.tool, a.args, "")
		if !res.IsError || !strings.Contains(text(res), a.want) {
			t.Errorf("%s: isError=%v %q; want a denial mentioning %q", a.name, res.IsError, text(res), a.want)
		}
		if strings.Contains(text(res), "top secret") {
			t.Errorf("%s leaked the file", a.name)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "hello" {
		t.Errorf("a denied call changed the file: %q", b)
	}
	for _, f := range []string{"prod.env", "s8.env", "b.md"} {
		if _, err := os.Stat(filepath.Join(sandbox, f)); !os.IsNotExist(err) {
			t.Errorf("the denied call making %s happened: %v", f, err)
		}
	}

	// Decisions are recorded with the task.
	v, err := s.client.QueryWorkflow(context.Background(), devTask, "", api.QueryStatus)
	if err != nil {
		t.Fatal(err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	var denied int
	for _, r := range st.Recent {
		if r.Decision == nil || r.Decision.PolicyVersion == "" {
			t.Fatalf("call %s has no recorded decision", r.CallID)
		}
		if r.Outcome == api.OutcomeDenied {
			denied++
		}
	}
	if denied != len(attacks) {
		t.Errorf("status shows %d denials, want %d", denied, len(attacks))
	}
}

// exampleRules are the policy rules of the repository's airlock.yaml, so
// that the example operators copy is the one tried against the real server.
func exampleRules(t *testing.T) []policy.Rule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Policy struct {
			Rules []policy.Rule `yaml:"rules"`
		} `yaml:"policy"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Policy.Rules) == 0 {
		t.Fatal("airlock.yaml has no policy rules")
	}
	return f.Policy.Rules
}
