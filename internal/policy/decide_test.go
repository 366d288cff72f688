package policy

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// writeFileSchema is the input schema of the filesystem server's
// write_file, as the upstream lists it.
const writeFileSchema = `{
	"$schema": "http://json-schema.org/draft-07/schema#",
	"type": "object",
	"properties": {
		"path": {"type": "string"},
		"content": {"type": "string"}
	},
	"required": ["path", "content"],
	"additionalProperties": false
}`

func alice() api.Principal {
	return api.Principal{
		Name:        "alice",
		Roles:       []string{"dev"},
		Permissions: []string{"filesystem.read", "filesystem.write"},
		DataLevel:   manifests.DataConfidential,
	}
}

func writeFile(roots ...string) Tool {
	return Tool{
		Name:     "filesystem__write_file",
		Server:   "filesystem",
		Upstream: "write_file",
		Decl: &manifests.Tool{
			SideEffects:         []manifests.SideEffect{manifests.SideEffectWrite},
			DataAccessLevel:     manifests.DataInternal,
			RequiredPermissions: []string{"filesystem.write"},
			Risk:                manifests.RiskMedium,
			PathArgs:            []string{"path"},
		},
		PathRoots: roots,
	}
}

func moveFile(roots ...string) Tool {
	return Tool{
		Name:     "filesystem__move_file",
		Server:   "filesystem",
		Upstream: "move_file",
		Decl: &manifests.Tool{
			SideEffects:         []manifests.SideEffect{manifests.SideEffectWrite, manifests.SideEffectDelete},
			DataAccessLevel:     manifests.DataInternal,
			RequiredPermissions: []string{"filesystem.write", "filesystem.delete"},
			Risk:                manifests.RiskHigh,
			Approval:            &manifests.Approval{Group: "ops", Quorum: 2},
			PathArgs:            []string{"source", "destination"},
		},
		PathRoots: roots,
	}
}

func readMultiple(roots ...string) Tool {
	return Tool{
		Name:     "filesystem__read_multiple_files",
		Server:   "filesystem",
		Upstream: "read_multiple_files",
		Decl: &manifests.Tool{
			SideEffects:         []manifests.SideEffect{manifests.SideEffectRead},
			DataAccessLevel:     manifests.DataInternal,
			RequiredPermissions: []string{"filesystem.read"},
			Risk:                manifests.RiskLow,
			PathArgs:            []string{"paths"},
		},
		PathRoots: roots,
	}
}

// readTextFile is a low-risk reading tool without path arguments, so that
// deciding a call to it reads no file system.
func readTextFile() Tool {
	return Tool{
		Name:     "filesystem__read_text_file",
		Server:   "filesystem",
		Upstream: "read_text_file",
		Decl: &manifests.Tool{
			SideEffects:         []manifests.SideEffect{manifests.SideEffectRead},
			DataAccessLevel:     manifests.DataInternal,
			RequiredPermissions: []string{"filesystem.read"},
			Risk:                manifests.RiskLow,
			Idempotent:          true,
		},
	}
}

func mustCompile(t testing.TB, cfg Config) *Policy {
	t.Helper()
	p, err := Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return p
}

// fsFixture is a sandbox root with things inside and a directory outside:
//
//	root/
//	  notes.txt
//	  sub/
//	  inner -> sub          (stays inside)
//	  escape -> ../outside  (leaves the root)
//	  dangling -> ../outside/missing
//	outside/
//	  secret.txt
type fsFixture struct{ dir, root, outside string }

func newFS(t testing.TB) fsFixture {
	t.Helper()
	dir := t.TempDir()
	fx := fsFixture{dir: dir, root: filepath.Join(dir, "root"), outside: filepath.Join(dir, "outside")}
	for _, d := range []string{fx.root, filepath.Join(fx.root, "sub"), fx.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(fx.root, "notes.txt"), filepath.Join(fx.outside, "secret.txt")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"inner":    "sub",
		"escape":   fx.outside,
		"dangling": filepath.Join(fx.outside, "missing"),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(fx.root, name)); err != nil {
			testenv.Skipf(t, "symlinks unavailable: %v", err)
		}
	}
	return fx
}

func args(kv ...any) json.RawMessage {
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// decisionOpts compares decisions without Reason (checked by substring and
// the golden file) and Version (checked in TestVersion).
var decisionOpts = cmpopts.IgnoreFields(api.Verdict{}, "Reason", "Version")

func TestDecide(t *testing.T) {
	// The cost limit, not the time backstop, must decide "rule/cost limit
	// denies": on a loaded machine (CI, -race) the nested comprehension can
	// take longer than the backstop's 100 ms before its cost runs out.
	defer func(d time.Duration) { ruleEvalTimeout = d }(ruleEvalTimeout)
	ruleEvalTimeout = time.Minute
	fx := newFS(t)
	root := fx.root
	in := func(edit ...func(*Input)) Input {
		i := Input{
			Principal: alice(),
			Tool:      writeFile(root),
			Args:      args("path", filepath.Join(root, "a.txt"), "content", "hi"),
			Task:      Task{ID: "t1", AllowTools: []string{"filesystem__*"}, Calls: 3, Elapsed: 90 * time.Second},
		}
		for _, e := range edit {
			e(&i)
		}
		return i
	}
	withRules := func(rules ...Rule) Config { return Config{Rules: rules, File: "airlock.yaml"} }

	tests := []struct {
		name   string
		cfg    Config
		in     Input
		want   api.Verdict
		reason string // a substring of the reason
	}{
		// allowlist
		{name: "allowlist/glob matches", in: in(), want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}, reason: "medium risk"},
		{name: "allowlist/exact name", in: in(func(i *Input) { i.Task.AllowTools = []string{"filesystem__write_file"} }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "allowlist/empty allows nothing", in: in(func(i *Input) { i.Task.AllowTools = nil }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckAllowlist}, reason: `task "t1" allows no tools`},
		{name: "allowlist/no glob matches", in: in(func(i *Input) { i.Task.AllowTools = []string{"filesystem__read_*", "memory__*"} }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckAllowlist}, reason: "filesystem__write_file is not in the allowlist"},
		{name: "allowlist/glob does not cross the separator by prefix", in: in(func(i *Input) { i.Task.AllowTools = []string{"filesystem"} }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckAllowlist}},
		{name: "allowlist/malformed glob denies even after a match", in: in(func(i *Input) { i.Task.AllowTools = []string{"filesystem__*", "memory__[", "x"} }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckError}, reason: `malformed pattern "memory__["`},

		// permission
		{name: "permission/missing", in: in(func(i *Input) {
			i.Principal = api.Principal{Name: "bob", DataLevel: manifests.DataRestricted, Permissions: []string{"filesystem.read"}}
		}),
			want:   api.Verdict{Effect: api.Deny, Check: api.CheckPermission},
			reason: `denied: principal "bob" lacks permission "filesystem.write" required by filesystem__write_file; ask an operator to grant it through a role`},
		{name: "permission/several missing", in: in(func(i *Input) { i.Tool = moveFile(root); i.Principal.Permissions = nil }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPermission}, reason: `lacks permissions "filesystem.write", "filesystem.delete"`},
		{name: "permission/star grants all", in: in(func(i *Input) { i.Principal.Permissions = []string{"*"} }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "permission/prefix wildcard grants", in: in(func(i *Input) { i.Principal.Permissions = []string{"filesystem.*"} }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "permission/other prefix wildcard does not", in: in(func(i *Input) { i.Principal.Permissions = []string{"files.*", "memory.*"} }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPermission}},
		{name: "permission/wildcard needs the dot", in: in(func(i *Input) { i.Principal.Permissions = []string{"filesystem*"} }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPermission}},

		// data level
		{name: "data_level/lower denies", in: in(func(i *Input) { i.Principal.DataLevel = manifests.DataPublic }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckDataLevel}, reason: `handles internal data but principal "alice" is cleared only for public`},
		{name: "data_level/equal allows", in: in(func(i *Input) { i.Principal.DataLevel = manifests.DataInternal }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "data_level/unknown principal level", in: in(func(i *Input) { i.Principal.DataLevel = "top-secret" }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckDataLevel}, reason: `unknown data access level "top-secret"`},
		{name: "data_level/empty principal level", in: in(func(i *Input) { i.Principal.DataLevel = "" }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckDataLevel}},
		{name: "data_level/unknown tool level", in: in(func(i *Input) { i.Tool.Decl.DataAccessLevel = "secret" }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckDataLevel}, reason: `declares unknown data access level "secret"`},
		{name: "data_level/uncovered tool is restricted", in: in(func(i *Input) { i.Tool.Decl = nil }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckDataLevel}, reason: "no manifest covers it"},

		// size and json
		{name: "size/over the limit", cfg: Config{MaxArgBytes: 32}, in: in(func(i *Input) { i.Args = args("path", "/srv/sandbox/a.txt", "content", "hi") }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckSize}, reason: "over the limit of 32"},
		{name: "size/default limit", in: in(func(i *Input) { i.Args = args("path", "/srv/a", "content", strings.Repeat("x", DefaultMaxArgBytes)) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckSize}},
		{name: "json/array", in: in(func(i *Input) { i.Args = json.RawMessage(`["/etc/passwd"]`) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckJSON}, reason: "must be a JSON object, not an array"},
		{name: "json/string", in: in(func(i *Input) { i.Args = json.RawMessage(`"x"`) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckJSON}, reason: "not a string"},
		{name: "json/number", in: in(func(i *Input) { i.Args = json.RawMessage(`12`) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckJSON}},
		{name: "json/invalid", in: in(func(i *Input) { i.Args = json.RawMessage(`{"path": `) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckJSON}, reason: "not valid JSON"},
		{name: "json/trailing data", in: in(func(i *Input) { i.Args = json.RawMessage(`{} {}`) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckJSON}},
		{name: "json/duplicate key", in: in(func(i *Input) { i.Args = json.RawMessage(`{"path":"/etc/passwd","path":"/srv/sandbox/a.txt"}`) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckJSON}, reason: `the key "path" appears more than once in the object at $`},
		{name: "json/nested duplicate key", in: in(func(i *Input) {
			i.Args = json.RawMessage(`{"path":"/srv/sandbox/a.txt","opts":[{"mode":"r","mode":"w"}]}`)
		}), want: api.Verdict{Effect: api.Deny, Check: api.CheckJSON}, reason: `the key "mode" appears more than once in the object at $.opts[0]`},
		{name: "json/empty means no arguments", in: in(func(i *Input) { i.Args = nil }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "json/null means no arguments", in: in(func(i *Input) { i.Args = json.RawMessage(` null `) }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},

		// schema
		{name: "schema/valid", in: in(func(i *Input) { i.Tool.InputSchema = json.RawMessage(writeFileSchema) }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "schema/wrong type", in: in(func(i *Input) {
			i.Tool.InputSchema = json.RawMessage(writeFileSchema)
			i.Args = args("path", root+"/a", "content", 42)
		}), want: api.Verdict{Effect: api.Deny, Check: api.CheckSchema}, reason: `want "string"`},
		{name: "schema/missing required", in: in(func(i *Input) {
			i.Tool.InputSchema = json.RawMessage(writeFileSchema)
			i.Args = args("path", root+"/a")
		}), want: api.Verdict{Effect: api.Deny, Check: api.CheckSchema}, reason: `missing properties: ["content"]`},
		{name: "schema/additional property", in: in(func(i *Input) {
			i.Tool.InputSchema = json.RawMessage(writeFileSchema)
			i.Args = args("path", root+"/a", "content", "x", "mode", "0777")
		}), want: api.Verdict{Effect: api.Deny, Check: api.CheckSchema}, reason: "mode"},
		{name: "schema/draft-07 without the fragment", in: in(func(i *Input) {
			i.Tool.InputSchema = json.RawMessage(strings.Replace(writeFileSchema, "schema#", "schema", 1))
			i.Args = args("path", root+"/a")
		}), want: api.Verdict{Effect: api.Deny, Check: api.CheckSchema}, reason: "missing properties"},
		{name: "schema/unsupported version", in: in(func(i *Input) {
			i.Tool.InputSchema = json.RawMessage(`{"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}`)
		}), want: api.Verdict{Effect: api.Deny, Check: api.CheckSchema}, reason: "cannot be used"},
		{name: "schema/not a schema", in: in(func(i *Input) { i.Tool.InputSchema = json.RawMessage(`{"type": 12}`) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckSchema}, reason: "cannot be used"},
		{name: "schema/remote ref is not fetched", in: in(func(i *Input) {
			i.Tool.InputSchema = json.RawMessage(`{"$ref": "https://example.com/s.json"}`)
		}), want: api.Verdict{Effect: api.Deny, Check: api.CheckSchema}, reason: "cannot be used"},

		// path
		{name: "path/inside", in: in(func(i *Input) { i.Args = args("path", filepath.Join(root, "notes.txt")) }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "path/new file in a new directory inside", in: in(func(i *Input) { i.Args = args("path", filepath.Join(root, "sub", "new", "deeper", "f.txt")) }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "path/the root itself", in: in(func(i *Input) { i.Args = args("path", root) }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "path/dot-dot inside stays inside", in: in(func(i *Input) { i.Args = args("path", root+"/sub/../notes.txt") }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "path/dot-dot escape", in: in(func(i *Input) { i.Args = args("path", root+"/../outside/secret.txt") }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "is outside the allowed directories"},
		{name: "path/dot-dot escape past the filesystem root", in: in(func(i *Input) { i.Args = args("path", root+strings.Repeat("/..", 40)+"/etc/passwd") }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}},
		{name: "path/absolute elsewhere", in: in(func(i *Input) { i.Args = args("path", "/etc/passwd") }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: `argument "path" of filesystem__write_file (/etc/passwd) is outside`},
		{name: "path/sibling with the root as prefix", in: in(func(i *Input) { i.Args = args("path", root+"-evil/x") }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}},
		{name: "path/symlink inside the root pointing outside", in: in(func(i *Input) { i.Args = args("path", filepath.Join(root, "escape", "secret.txt")) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "through a symlink"},
		{name: "path/symlink itself pointing outside", in: in(func(i *Input) { i.Args = args("path", filepath.Join(root, "escape")) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}},
		{name: "path/new file under an escaping symlink", in: in(func(i *Input) { i.Args = args("path", filepath.Join(root, "escape", "new.txt")) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}},
		{name: "path/dangling symlink", in: in(func(i *Input) { i.Args = args("path", filepath.Join(root, "dangling")) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "symlink whose target does not exist"},
		{name: "path/symlink staying inside", in: in(func(i *Input) { i.Args = args("path", filepath.Join(root, "inner", "f.txt")) }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "path/root given through a symlink", in: in(func(i *Input) {
			i.Tool.PathRoots = []string{filepath.Join(root, "inner")}
			i.Args = args("path", filepath.Join(root, "sub", "f.txt"))
		}), want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "path/second root", in: in(func(i *Input) {
			i.Tool.PathRoots = []string{filepath.Join(root, "sub"), fx.outside}
			i.Args = args("path", filepath.Join(fx.outside, "secret.txt"))
		}), want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "path/relative", in: in(func(i *Input) { i.Args = args("path", "notes.txt") }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "is a relative path"},
		{name: "path/home", in: in(func(i *Input) { i.Args = args("path", "~/.ssh/id_rsa") }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "is a relative path"},
		{name: "path/empty", in: in(func(i *Input) { i.Args = args("path", "") }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "empty path"},
		{name: "path/NUL", in: in(func(i *Input) { i.Args = args("path", root+"/a\x00/../../etc") }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "NUL"},
		{name: "path/through a file", in: in(func(i *Input) { i.Args = args("path", filepath.Join(root, "notes.txt", "x")) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "cannot be checked"},
		{name: "path/not a string", in: in(func(i *Input) { i.Args = args("path", 7) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "not a number"},
		{name: "path/absent argument is not checked", in: in(func(i *Input) { i.Args = args("content", "x") }),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "path/no roots configured", in: in(func(i *Input) { i.Tool.PathRoots = nil }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "no allowed directories are configured"},
		{name: "path/relative root", in: in(func(i *Input) { i.Tool.PathRoots = []string{"sandbox"} }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "not an absolute path"},
		{name: "path/array all inside", in: in(func(i *Input) {
			i.Tool = readMultiple(root)
			i.Args = args("paths", []string{filepath.Join(root, "notes.txt"), filepath.Join(root, "sub")})
		}), want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "path/array with one escape", in: in(func(i *Input) {
			i.Tool = readMultiple(root)
			i.Args = args("paths", []string{filepath.Join(root, "notes.txt"), filepath.Join(root, "escape", "secret.txt")})
		}), want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: `argument "paths[1]"`},
		{name: "path/array with a non-string", in: in(func(i *Input) {
			i.Tool = readMultiple(root)
			i.Args = args("paths", []any{filepath.Join(root, "notes.txt"), 3})
		}), want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: "element 1 is a number"},
		{name: "path/second path argument escapes", in: in(func(i *Input) {
			i.Principal.Permissions = append(i.Principal.Permissions, "filesystem.delete")
			i.Tool = moveFile(root)
			i.Args = args("source", filepath.Join(root, "notes.txt"), "destination", "/tmp/../etc/x")
		}), want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}, reason: `argument "destination"`},

		// rules
		{name: "rule/deny", cfg: withRules(Rule{Name: "no-sub", When: `args.path.contains("/sub/")`, Effect: api.Deny, Reason: "sub/ is read-only; write elsewhere in the sandbox"}),
			in:   in(func(i *Input) { i.Args = args("path", filepath.Join(root, "sub", "f")) }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "no-sub"}, reason: `denied by policy rule "no-sub": sub/ is read-only`},
		{name: "rule/deny without reason", cfg: withRules(Rule{Name: "never", When: `true`, Effect: api.Deny}), in: in(),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "never"}, reason: "ask an operator"},
		{name: "rule/allow overrides the risk default", cfg: withRules(Rule{Name: "devs-move", When: `"dev" in principal.roles && tool.upstream == "move_file"`, Effect: api.Allow}),
			in: in(func(i *Input) {
				i.Principal.Permissions = []string{"filesystem.*"}
				i.Tool = moveFile(root)
				i.Args = args("source", root+"/notes.txt", "destination", root+"/n2.txt")
			}),
			want: api.Verdict{Effect: api.Allow, Check: api.CheckRule, Rule: "devs-move"}},
		{name: "rule/require approval with the rule's group", cfg: withRules(Rule{Name: "busy", When: `task.calls >= 3`, Effect: api.RequireApproval, Group: "leads", Quorum: 2, Reason: "many calls"}),
			in: in(), want: api.Verdict{Effect: api.RequireApproval, Check: api.CheckRule, Rule: "busy", Group: "leads", Quorum: 2}, reason: `waiting for 2 approval(s) from group "leads"`},
		{name: "rule/require approval falls back to the manifest", cfg: withRules(Rule{Name: "slow", When: `task.elapsed_seconds > 60`, Effect: api.RequireApproval}),
			in: in(func(i *Input) {
				i.Principal.Permissions = []string{"*"}
				i.Tool = moveFile(root)
				i.Args = args("source", root+"/notes.txt", "destination", root+"/n2.txt")
			}),
			want: api.Verdict{Effect: api.RequireApproval, Check: api.CheckRule, Rule: "slow", Group: "ops", Quorum: 2}},
		{name: "rule/rule quorum overrides the manifest's", cfg: withRules(Rule{Name: "slow", When: `task.elapsed_seconds > 60.0`, Effect: api.RequireApproval, Quorum: 3}),
			in: in(func(i *Input) {
				i.Principal.Permissions = []string{"*"}
				i.Tool = moveFile(root)
				i.Args = args("source", root+"/notes.txt", "destination", root+"/n2.txt")
			}),
			want: api.Verdict{Effect: api.RequireApproval, Check: api.CheckRule, Rule: "slow", Group: "ops", Quorum: 3}},
		{name: "rule/require approval falls back to the policy group", cfg: Config{ApprovalGroup: "admins", Rules: []Rule{{Name: "all", When: "true", Effect: api.RequireApproval}}},
			in: in(), want: api.Verdict{Effect: api.RequireApproval, Check: api.CheckRule, Rule: "all", Group: "admins", Quorum: 1}},
		{name: "rule/require approval without any group denies", cfg: withRules(Rule{Name: "all", When: "true", Effect: api.RequireApproval}),
			in: in(), want: api.Verdict{Effect: api.Deny, Check: api.CheckError, Rule: "all"}, reason: "no approver group is configured"},
		{name: "rule/first match wins", cfg: withRules(
			Rule{Name: "miss", When: `principal.name == "mallory"`, Effect: api.Deny},
			Rule{Name: "first", When: `tool.server == "filesystem"`, Effect: api.Allow},
			Rule{Name: "second", When: `true`, Effect: api.Deny},
		), in: in(), want: api.Verdict{Effect: api.Allow, Check: api.CheckRule, Rule: "first"}},
		{name: "rule/first match wins, deny first", cfg: withRules(
			Rule{Name: "first", When: `"write" in tool.side_effects`, Effect: api.Deny},
			Rule{Name: "second", When: `true`, Effect: api.Allow},
		), in: in(), want: api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "first"}},
		{name: "rule/none matches, default decides", cfg: withRules(Rule{Name: "miss", When: `tool.risk == "critical"`, Effect: api.Deny}),
			in: in(), want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "rule/missing key is an evaluation error that denies", cfg: withRules(
			Rule{Name: "by-mode", When: `args.mode == "0777"`, Effect: api.Deny},
			Rule{Name: "allow", When: `true`, Effect: api.Allow},
		), in: in(), want: api.Verdict{Effect: api.Deny, Check: api.CheckError, Rule: "by-mode"}, reason: `policy rule "by-mode" could not be evaluated for this call (no such key: mode)`},
		{name: "rule/optional syntax", cfg: withRules(Rule{Name: "by-mode", When: `args.?mode.orValue("") == "0777"`, Effect: api.Deny}),
			in: in(), want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "rule/optional syntax matches", cfg: withRules(Rule{Name: "by-mode", When: `args.?mode.orValue("") == "0777"`, Effect: api.Deny}),
			in: in(func(i *Input) { i.Args = args("path", root+"/a", "mode", "0777") }), want: api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "by-mode"}},
		{name: "rule/has guard", cfg: withRules(Rule{Name: "by-mode", When: `has(args.mode) && args.mode == "0777"`, Effect: api.Deny}),
			in: in(), want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "rule/JSON numbers compare with int literals", cfg: withRules(Rule{Name: "big", When: `args.?size.orValue(0) > 10 && args.size == 20`, Effect: api.Deny}),
			in: in(func(i *Input) { i.Args = args("path", root+"/a", "size", 20) }), want: api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "big"}},
		{name: "rule/principal fields", cfg: withRules(Rule{Name: "p", When: `principal.name == "alice" && "filesystem.write" in principal.permissions && principal.data_level == "confidential" && principal.slack_user_id == "U1"`, Effect: api.Deny}),
			in: in(func(i *Input) { i.Principal.SlackUserID = "U1" }), want: api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "p"}},
		{name: "rule/tool fields", cfg: withRules(Rule{Name: "t", When: `tool.name == "filesystem__write_file" && tool.data_access_level == "internal" && tool.required_permissions == ["filesystem.write"] && tool.risk == "medium" && !tool.idempotent && tool.covered`, Effect: api.Deny}),
			in: in(), want: api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "t"}},
		{name: "rule/task fields", cfg: withRules(Rule{Name: "k", When: `task.id == "t1" && task.calls == 3 && task.elapsed_seconds == 90.0`, Effect: api.Deny}),
			in: in(), want: api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "k"}},
		{name: "rule/uncovered tool facts", cfg: Config{ApprovalGroup: "admins", Rules: []Rule{{Name: "u", When: `!tool.covered && tool.side_effects == ["write"] && tool.data_access_level == "restricted" && tool.risk == "high" && size(tool.required_permissions) == 0`, Effect: api.Deny}}},
			in: in(func(i *Input) { i.Tool.Decl = nil; i.Principal.DataLevel = manifests.DataRestricted }), want: api.Verdict{Effect: api.Deny, Check: api.CheckRule, Rule: "u"}},
		{name: "rule/cost limit denies", cfg: withRules(Rule{Name: "heavy", When: `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, a+b+c+d+e > 0)))))`, Effect: api.Allow}),
			in: in(), want: api.Verdict{Effect: api.Deny, Check: api.CheckError, Rule: "heavy"}, reason: "cost limit exceeded"},
		{name: "rule/never reached after an earlier deny", cfg: withRules(Rule{Name: "allow-all", When: `true`, Effect: api.Allow}),
			in: in(func(i *Input) { i.Args = args("path", "/etc/passwd") }), want: api.Verdict{Effect: api.Deny, Check: api.CheckPath}},

		// default
		{name: "default/low allows", in: in(func(i *Input) { i.Tool.Decl.Risk = manifests.RiskLow }), want: api.Verdict{Effect: api.Allow, Check: api.CheckDefault}},
		{name: "default/high takes the manifest's approval", in: in(func(i *Input) {
			i.Principal.Permissions = []string{"*"}
			i.Tool = moveFile(root)
			i.Args = args("source", root+"/notes.txt", "destination", root+"/n2.txt")
		}), want: api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "ops", Quorum: 2}, reason: "high risk, which needs approval by default"},
		{name: "default/high without approval group denies", in: in(func(i *Input) { i.Tool.Decl.Risk = manifests.RiskHigh }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckError}, reason: "no approver group is configured"},
		{name: "default/high uses the policy group", cfg: Config{ApprovalGroup: "admins"}, in: in(func(i *Input) { i.Tool.Decl.Risk = manifests.RiskHigh }),
			want: api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "admins", Quorum: 1}},
		{name: "default/uncovered tool needs approval", cfg: Config{ApprovalGroup: "admins"}, in: in(func(i *Input) { i.Tool.Decl = nil; i.Principal.DataLevel = manifests.DataRestricted }),
			want: api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "admins", Quorum: 1}, reason: "no manifest covers it"},
		{name: "default/configured deny", cfg: Config{RiskDefaults: map[manifests.Risk]api.Effect{manifests.RiskMedium: api.Deny}}, in: in(),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckDefault}, reason: "ask an operator for a rule that allows this call"},
		{name: "default/configured approval for low risk", cfg: Config{ApprovalGroup: "admins", RiskDefaults: map[manifests.Risk]api.Effect{manifests.RiskMedium: api.RequireApproval}}, in: in(),
			want: api.Verdict{Effect: api.RequireApproval, Check: api.CheckDefault, Group: "admins", Quorum: 1}},
		{name: "default/unknown risk", in: in(func(i *Input) { i.Tool.Decl.Risk = "extreme" }),
			want: api.Verdict{Effect: api.Deny, Check: api.CheckError}, reason: `unknown risk tier "extreme"`},
	}

	var golden strings.Builder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustCompile(t, tt.cfg)
			got := p.Decide(tt.in)
			if diff := cmp.Diff(tt.want, got, decisionOpts); diff != "" {
				t.Errorf("Decide() mismatch (-want +got):\n%s\nreason: %s", diff, got.Reason)
			}
			if !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("reason %q does not contain %q", got.Reason, tt.reason)
			}
			if got.Version != p.Version() || got.Version == "" {
				t.Errorf("Version = %q, want the policy's %q", got.Version, p.Version())
			}
			if again := p.Decide(tt.in); again != got {
				t.Errorf("second Decide differs:\n%+v\n%+v", got, again)
			}
			fmt.Fprintf(&golden, "%s\n\t%s %s %s\n\t%s\n", tt.name, got.Effect, got.Check, got.Rule, strings.ReplaceAll(got.Reason, fx.dir, "$TMP"))
		})
	}
	checkGolden(t, "testdata/reasons.golden", golden.String())
}

// checkGolden compares got with the golden file, or rewrites it with
// -update. The golden file is the place to read every reason the model can
// get.
func checkGolden(t *testing.T, file, got string) {
	t.Helper()
	if t.Failed() {
		return
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", file, diff)
	}
}

// The schema validator stops at the first failure it meets while walking Go
// maps; the reason must still not change from one run to the next.
func TestDecideSchemaReasonIsDeterministic(t *testing.T) {
	schema := `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},"d":{"type":"integer"}},"additionalProperties":false}`
	in := Input{
		Principal: alice(),
		Tool:      Tool{Name: "x__y", Decl: &manifests.Tool{DataAccessLevel: manifests.DataPublic, Risk: manifests.RiskLow}, InputSchema: json.RawMessage(schema)},
		Args:      json.RawMessage(`{"a":1,"b":2,"c":3,"d":"x","e":true,"f":false}`),
		Task:      Task{AllowTools: []string{"*"}},
	}
	var first string
	for i := range 50 {
		d := mustCompile(t, Config{}).Decide(in) // a new cache each time
		if d.Check != api.CheckSchema {
			t.Fatalf("Check = %q, want schema (%s)", d.Check, d.Reason)
		}
		if i == 0 {
			first = d.Reason
			continue
		}
		if d.Reason != first {
			t.Fatalf("reason changed between runs:\n%s\n%s", first, d.Reason)
		}
	}
}

func TestVisible(t *testing.T) {
	p := mustCompile(t, Config{Rules: []Rule{{Name: "deny-all", When: "true", Effect: api.Deny}}})
	task := Task{ID: "t", AllowTools: []string{"filesystem__write_*"}}
	tests := []struct {
		name string
		pr   func(*api.Principal)
		task Task
		tool Tool
		want bool
	}{
		{name: "allowed (rules do not hide tools)", task: task, tool: writeFile("/srv"), want: true},
		{name: "not in allowlist", task: task, tool: readMultiple("/srv"), want: false},
		{name: "empty allowlist", task: Task{}, tool: writeFile("/srv"), want: false},
		{name: "malformed glob", task: Task{AllowTools: []string{"["}}, tool: writeFile("/srv"), want: false},
		{name: "missing permission", pr: func(p *api.Principal) { p.Permissions = []string{"filesystem.read"} }, task: task, tool: writeFile("/srv"), want: false},
		{name: "wildcard permission", pr: func(p *api.Principal) { p.Permissions = []string{"filesystem.*"} }, task: task, tool: writeFile("/srv"), want: true},
		{name: "data level too low", pr: func(p *api.Principal) { p.DataLevel = manifests.DataPublic }, task: task, tool: writeFile("/srv"), want: false},
		{name: "uncovered tool below restricted", task: Task{AllowTools: []string{"*"}}, tool: Tool{Name: "x__y"}, want: false},
		{name: "uncovered tool at restricted", pr: func(p *api.Principal) { p.DataLevel = manifests.DataRestricted }, task: Task{AllowTools: []string{"*"}}, tool: Tool{Name: "x__y"}, want: true},
		{name: "no path roots does not hide", task: task, tool: writeFile(), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr := alice()
			if tt.pr != nil {
				tt.pr(&pr)
			}
			if got := p.Visible(pr, tt.task, tt.tool); got != tt.want {
				t.Errorf("Visible() = %v, want %v", got, tt.want)
			}
		})
	}
}

// Decide is called from many activities at once; run with -race.
func TestDecideConcurrent(t *testing.T) {
	fx := newFS(t)
	p := mustCompile(t, Config{Rules: []Rule{{Name: "big", When: `size(args.?content.orValue("")) > 5`, Effect: api.Deny}}})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				content := strings.Repeat("x", (g+i)%10)
				d := p.Decide(Input{
					Principal: alice(),
					Tool:      func() Tool { t := writeFile(fx.root); t.InputSchema = json.RawMessage(writeFileSchema); return t }(),
					Args:      args("path", filepath.Join(fx.root, "f"), "content", content),
					Task:      Task{AllowTools: []string{"*"}},
				})
				want := api.Allow
				if len(content) > 5 {
					want = api.Deny
				}
				if d.Effect != want {
					t.Errorf("content %q: %+v", content, d)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestDecideNilPolicy(t *testing.T) {
	var p *Policy
	if d := p.Decide(Input{}); d.Effect != api.Deny || d.Check != api.CheckError {
		t.Errorf("nil policy: %+v", d)
	}
}
