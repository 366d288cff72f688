package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// TestGuardRolesOnNPMFilesystem (issue 30 §1, per-role settings): three
// principals of different roles read the same file, holding a cloud key
// and an e-mail address, through the real filesystem server. The
// configuration redacts secrets in results. A role whose guard blocks
// them (strict) gets the result withheld; a principal of no such role
// gets it redacted; a role that annotates secrets (auditor) still gets
// them redacted — a role never loosens the guard: the strictest setting
// wins — and its personal_data: annotate (the configuration's is off)
// records the address, delivered. Each call's findings are in its
// task's history, with the action that applied to its caller.
func TestGuardRolesOnNPMFilesystem(t *testing.T) {
	t.Parallel()
	sandbox, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox}, nil)
	fsm.GuardDefault = exampleGuard(t).Results.Secrets // redact, as config.Load applies it
	strict := &manifests.Guard{Results: &manifests.GuardResults{Secrets: manifests.GuardBlock}, Arguments: &manifests.GuardResults{Secrets: manifests.GuardBlock}}
	fsm.ArgumentGuard = manifests.GuardDefaults{ArgumentSecrets: manifests.GuardRedact} // as config.Load applies guard.arguments
	auditor := &manifests.Guard{Results: &manifests.GuardResults{Secrets: manifests.GuardAnnotate, PersonalData: manifests.GuardAnnotate}}
	fsm.RoleGuards = map[string]*manifests.Guard{"strict": strict, "auditor": auditor} // as config.Load applies roles' guard
	// read_text_file runs on the fast path (the DecideAndCall local
	// activity); read_file, medium risk here, through the workflow's
	// CallTool activity: both read the caller's roles.
	fsm.Tools["read_file"].Risk = manifests.RiskMedium

	all := &config.Role{Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}}
	c := &config.Config{Roles: map[string]*config.Role{"all": all, "strict": {Guard: strict}, "auditor": {Guard: auditor}}}
	for name, roles := range map[string][]string{"alice": {"all", "strict"}, "bob": {"all"}, "carol": {"all", "auditor"}} {
		c.Principals = append(c.Principals, config.Principal{Name: name, Roles: roles, APIKeySHA256: []string{identity.HashKey(name + "-key")}})
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{fsm}, directory: identity.New(c), policy: &policy.Config{Rules: exampleRules(t)}})

	accessKey := "AKIA" + "R7TQ2LMX4PB5WN3K"                   // assembled: never a literal in the repository
	address := "billing.ops" + "@" + "northwind-" + "corp.com" // likewise (the corpus test counts addresses)
	file := filepath.Join(sandbox, "billing.conf")
	if err := os.WriteFile(file, []byte("contact = "+address+"\naws_access_key_id = "+accessKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func(who string, tool ...string) (string, bool, []api.Finding, []byte) {
		task := "guard-roles-" + who + strings.Join(tool, "")
		cs := s.connect(t, map[string]string{"Authorization": "Bearer " + who + "-key", gateway.HeaderTask: task})
		name := "filesystem__read_text_file"
		if len(tool) > 0 {
			name = tool[0]
		}
		waitTools(t, cs, name)
		res := call(t, cs, name, map[string]any{"path": file}, "")
		hist := fetchHistory(t, s.client, task, "")
		raw, err := proto.Marshal(hist)
		if err != nil {
			t.Fatal(err)
		}
		fs, _ := guardFindings(t, hist)
		return text(res), res.IsError, fs, raw
	}
	has := func(fs []api.Finding, rule, action string) bool {
		for _, f := range fs {
			if f.Rule == rule && f.Action == action && f.Path == "content[0].text" {
				return true
			}
		}
		return false
	}

	got, isErr, fs, raw := read("alice")
	if !isErr || !strings.Contains(got, "aws-access-key at content[0].text") || strings.Contains(got, accessKey) {
		t.Errorf("alice (strict: block) got isError=%v %q; want the result withheld, naming the finding", isErr, got)
	}
	if !has(fs, "aws-access-key", "block") {
		t.Errorf("alice's history: findings %v, want aws-access-key: block", fs)
	}
	if bytes.Contains(raw, []byte(accessKey)) {
		t.Error("alice's history holds the key")
	}

	got, isErr, fs, raw = read("alice", "filesystem__read_file")
	if !isErr || !strings.Contains(got, "aws-access-key at content[0].text") || strings.Contains(got, accessKey) {
		t.Errorf("alice (strict: block) got from read_file (the CallTool activity) isError=%v %q; want the result withheld", isErr, got)
	}
	if !has(fs, "aws-access-key", "block") || bytes.Contains(raw, []byte(accessKey)) {
		t.Errorf("alice's read_file: findings %v (want aws-access-key: block); the key in history: %v", fs, bytes.Contains(raw, []byte(accessKey)))
	}

	got, isErr, fs, raw = read("bob")
	if want := "contact = " + address + "\naws_access_key_id = [REDACTED:aws-access-key]\n"; isErr || got != want {
		t.Errorf("bob (the configuration: redact) got isError=%v %q, want %q", isErr, got, want)
	}
	if !has(fs, "aws-access-key", "redact") || has(fs, "email", "annotate") {
		t.Errorf("bob's history: findings %v, want aws-access-key: redact and no e-mail finding (personal data is off for him)", fs)
	}
	if bytes.Contains(raw, []byte(accessKey)) {
		t.Error("bob's history holds the key")
	}

	// Arguments: the configuration redacts a key in them, alice's role
	// refuses the call (the gateway and the worker both read her roles).
	write := func(who, name string) (*mcp.CallToolResult, string) {
		cs := s.connect(t, map[string]string{"Authorization": "Bearer " + who + "-key", gateway.HeaderTask: "guard-roles-write-" + who})
		waitTools(t, cs, "filesystem__write_file")
		path := filepath.Join(sandbox, name)
		return call(t, cs, "filesystem__write_file", map[string]any{"path": path, "content": "key = " + accessKey + "\n"}, ""), path
	}
	res, path := write("alice", "alice.conf")
	if got := text(res); !res.IsError || !strings.Contains(got, "aws-access-key at $.content") || strings.Contains(got, accessKey) {
		t.Errorf("alice's write (strict: block): isError=%v %s", res.IsError, got)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("alice's refused write made %s (%v)", path, err)
	}
	res, path = write("bob", "bob.conf")
	if b, err := os.ReadFile(path); res.IsError || err != nil || string(b) != "key = [REDACTED:aws-access-key]\n" {
		t.Errorf("bob's write (redact): isError=%v %s; the file holds %q (%v)", res.IsError, text(res), b, err)
	}

	got, isErr, fs, raw = read("carol")
	if want := "contact = " + address + "\naws_access_key_id = [REDACTED:aws-access-key]\n"; isErr || got != want {
		t.Errorf("carol (auditor: annotate, under the configuration's redact) got isError=%v %q, want %q", isErr, got, want)
	}
	if !has(fs, "aws-access-key", "redact") || !has(fs, "email", "annotate") {
		t.Errorf("carol's history: findings %v, want aws-access-key: redact (the strictest) and email: annotate (her role's)", fs)
	}
	if bytes.Contains(raw, []byte(accessKey)) {
		t.Error("carol's history holds the key")
	}
}
