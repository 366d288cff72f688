package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/testenv"
)

// approvalsConfig writes a configuration whose counter__append needs
// approval by ops (bob); alice and bob are principals.
func approvalsConfig(t *testing.T, upstreamBin string) (cfg, effects string) {
	t.Helper()
	dir := t.TempDir()
	// The upstream runs sandboxed: its side-effect log is in a directory
	// of its own, granted in sandbox.write_paths.
	effectsDir := t.TempDir()
	effects = filepath.Join(effectsDir, "effects.log")
	if upstreamBin == "" {
		upstreamBin = "testupstream-not-started"
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("counter.yaml", `server:
  name: counter
  stdio:
    command: `+upstreamBin+`
    env: {SIDE_EFFECT_LOG: `+effects+`}
  sandbox: {write_paths: [`+effectsDir+`]}
tools:
  append:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: false
    redact: [key]
    approval: {group: ops, timeout: 10m}
`)
	cfg = write("airlock.yaml", `manifests: [counter.yaml]
principals:
  - {name: alice, roles: [all], api_key_sha256: [`+identity.HashKey("alice-key")+`]}
  - {name: bob, roles: [all], api_key_sha256: [`+identity.HashKey("bob-key")+`]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
approver_groups:
  ops: {members: [alice, bob]}
`)
	return cfg, effects
}

// approvalsDev runs `airlock dev` in-process on cfg (embedded Temporal,
// worker and gateway; data and the default audit log in dataDir) until the
// test ends; ctx is cancelled after it stops.
// allowGrants gives the counter manifest's append approval the max_grant
// (a YAML flow mapping) and grant_args [key].
func allowGrants(t *testing.T, cfg, maxGrant string) {
	t.Helper()
	manifest := filepath.Join(filepath.Dir(cfg), "counter.yaml")
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	grants := strings.Replace(string(b), "approval: {group: ops, timeout: 10m}",
		"approval: {group: ops, timeout: 10m, max_grant: "+maxGrant+", grant_args: [key]}", 1)
	if grants == string(b) {
		t.Fatal("the counter manifest has no approval line to give grants to")
	}
	if err := os.WriteFile(manifest, []byte(grants), 0o600); err != nil {
		t.Fatal(err)
	}
}

func approvalsDev(t *testing.T, cfg, dataDir string) (context.Context, *stack) {
	t.Helper()
	t.Setenv("TEMPORAL_ADDRESS", "")
	t.Setenv("TEMPORAL_NAMESPACE", "")
	e, err := load(commonFlags{config: cfg, dataDir: dataDir, listen: "127.0.0.1:0", logLevel: "error", logFormat: "json"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := start(ctx, e, roles{embedded: true, worker: true, gateway: true}, 0)
	if s != nil {
		t.Cleanup(s.stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ctx, s
}

// approvalsSession connects to s's gateway with key, as a 2025-11-25
// client, until the test ends.
func approvalsSession(t *testing.T, ctx context.Context, s *stack, key string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + s.addr + "/mcp", HTTPClient: &http.Client{Transport: bearerRT(key)}},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// waitAvailable waits (60 s at most) until cs lists the tool name as
// available: its upstream has started.
func waitAvailable(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string) {
	t.Helper()
	testenv.WaitFor(t, name+" listed available", 60*time.Second, func() bool {
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			return false
		}
		for _, tool := range tools.Tools {
			if tool.Name == name {
				return !strings.HasPrefix(tool.Description, "[unavailable")
			}
		}
		return false
	})
}

// appendInBackground calls counter__append with key as cs's principal once
// the upstream has started (waitAvailable); the result arrives on the
// channel (a failed call is reported and arrives as an IsError result).
func appendInBackground(t *testing.T, ctx context.Context, cs *mcp.ClientSession, key string) <-chan *mcp.CallToolResult {
	t.Helper()
	waitAvailable(t, ctx, cs, "counter__append")
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": key}})
		if err != nil {
			t.Errorf("call %s: %v", key, err)
			res = &mcp.CallToolResult{IsError: true}
		}
		done <- res
	}()
	return done
}

// listedRequest waits (60 s at most) until approvals list shows a request
// that idRE matches and returns idRE's first group, its ID.
func listedRequest(t *testing.T, temporal []string, idRE *regexp.Regexp) string {
	t.Helper()
	var id string
	testenv.WaitFor(t, "approvals list to show the request", 60*time.Second, func() bool {
		code, stdout, stderr := runCLI(t, append([]string{"approvals", "list"}, temporal...)...)
		if code != 0 {
			t.Fatalf("approvals list: %d %s", code, stderr)
		}
		if m := idRE.FindStringSubmatch(stdout); m != nil {
			id = m[1]
		}
		return id != ""
	})
	return id
}

// TestApprovalsArguments: mistakes are reported before anything is dialed,
// naming the flag or variable to fix.
func TestApprovalsArguments(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "")
	t.Setenv("TEMPORAL_NAMESPACE", "")
	t.Setenv(envAPIKey, "")
	cfg, _ := approvalsConfig(t, "")
	emptyKey := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(emptyKey, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badKey := filepath.Join(t.TempDir(), "bad-key")
	if err := os.WriteFile(badKey, []byte("guessed-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := "task-1~call-1"
	cases := []struct {
		args   []string
		code   int
		stderr []string
	}{
		{nil, 2, []string{"airlock approvals list"}},
		{[]string{"-h"}, 0, []string{"AIRLOCK_API_KEY"}},
		{[]string{"decide"}, 2, []string{`unknown subcommand "decide"`}},
		{[]string{"list", "extra"}, 2, []string{`unexpected argument "extra"`}},
		{[]string{"show"}, 2, []string{"name one request ID"}},
		{[]string{"show", "not-an-id"}, 2, []string{`"not-an-id" is not an approval request ID`}},
		{[]string{"approve", id, "--json"}, 2, []string{"--json applies to show only"}},
		{[]string{"list", "--comment", "x"}, 2, []string{"--comment and --digest apply to approve and deny only"}},
		{[]string{"approve", id, "--key", "bob-key"}, 2, []string{"flag provided but not defined: -key"}},
		{[]string{"approve", id, "--config", cfg}, 2, []string{"no API key", "AIRLOCK_API_KEY", "--key-file FILE"}},
		{[]string{"approve", id, "--config", cfg, "--key-file", emptyKey}, 2, []string{"--key-file " + emptyKey + " is empty"}},
		{[]string{"approve", id, "--config", cfg, "--key-file", badKey}, 1, []string{"the key in --key-file", "not recognised"}},
		{[]string{"deny", id, "--config", "/nonexistent.yaml"}, 1, []string{"--config /nonexistent.yaml", "does not exist"}},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(t, append([]string{"approvals"}, c.args...)...)
		if code != c.code {
			t.Errorf("approvals %v: exit %d, want %d\n%s", c.args, code, c.code, stderr)
		}
		for _, want := range c.stderr {
			if !strings.Contains(stderr, want) {
				t.Errorf("approvals %v: stderr lacks %q:\n%s", c.args, want, stderr)
			}
		}
	}
}

// TestApprovalsCLI runs `airlock dev` in-process and decides a waiting call
// with the approvals command: list and show it (key masked), alice's own
// approval and a wrong --digest are refused with exit 1, bob's approval
// lets the call run once, and repeating it changes nothing. The gateway
// serves the /approvals page. The decisions are audited in the same file
// as the worker's lines.
func TestApprovalsCLI(t *testing.T) {
	upstream := buildTestupstream(t)
	cfg, effects := approvalsConfig(t, upstream)
	dataDir := filepath.Join(t.TempDir(), "data")
	auditPath := filepath.Join(dataDir, "audit.jsonl") // dev's default
	ctx, s := approvalsDev(t, cfg, dataDir)
	temporal := []string{"--config", cfg, "--temporal-address", s.srv.HostPort(), "--audit-log", auditPath}

	// The page is mounted on the gateway.
	resp, err := http.Get("http://" + s.addr + "/approvals")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `name="key"`) {
		t.Fatalf("GET /approvals: %d\n%s", resp.StatusCode, page)
	}

	// alice's call waits for approval.
	hc := &http.Client{Transport: bearerRT("alice-key")}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + s.addr + "/mcp", HTTPClient: hc},
			// A session (2026-07-28 has none: its calls share the default task).
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	waitAvailable(t, ctx, cs, "counter__append")
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": "cli-secret"}})
		done <- result{res, err}
	}()

	idRE := regexp.MustCompile(`(?m)^(\S+~\S+)\s+\S+\s+counter__append\s+alice\s+ops\s+0/1\s`)
	id := listedRequest(t, temporal, idRE)
	code, stdout, stderr := runCLI(t, append([]string{"approvals", "show", id}, temporal...)...)
	digest := regexp.MustCompile(`(?m)^digest:\s+([0-9a-f]{64})$`).FindStringSubmatch(stdout)
	if code != 0 || digest == nil || strings.Contains(stdout, "cli-secret") || !strings.Contains(stdout, "[redacted]") {
		t.Fatalf("approvals show: %d %s\n%s", code, stderr, stdout)
	}

	t.Setenv(envAPIKey, "alice-key")
	code, _, stderr = runCLI(t, append([]string{"approvals", "approve", id}, temporal...)...)
	if code != 1 || !strings.Contains(stderr, "refused: alice asked for this call and may not approve it") {
		t.Fatalf("alice approving her own call: %d %s", code, stderr)
	}
	t.Setenv(envAPIKey, "bob-key")
	code, _, stderr = runCLI(t, append([]string{"approvals", "approve", id, "--digest", "deadbeef"}, temporal...)...)
	if code != 1 || !strings.Contains(stderr, "refused:") || !strings.Contains(stderr, "not the call you saw") {
		t.Fatalf("approve with a wrong --digest: %d %s", code, stderr)
	}
	code, stdout, stderr = runCLI(t, append([]string{"approvals", "approve", id, "--digest", digest[1][:12], "--comment", "ok"}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, "(as bob): approved: 1 of 1 approvals") {
		t.Fatalf("bob approving: %d %s %s", code, stdout, stderr)
	}
	// The second run is the same decision: no new vote, and it says so
	// (issue 25 §9) instead of "approved" again.
	code, stdout, stderr = runCLI(t, append([]string{"approvals", "approve", id, "--digest", digest[1][:12], "--comment", "ok"}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, "already decided: bob already approved request "+id+" via cli") || strings.Contains(stdout, "(as bob)") {
		t.Fatalf("bob approving again: %d %s %s", code, stdout, stderr)
	}
	select {
	case r := <-done:
		if r.err != nil || r.res.IsError {
			t.Fatalf("approved call: %v %+v", r.err, r.res)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the approved call did not finish")
	}
	// Deny after approve by the same approver is refused, not reported as
	// the approval's outcome.
	code, stdout, stderr = runCLI(t, append([]string{"approvals", "deny", id}, temporal...)...)
	if code != 1 || !strings.Contains(stderr, "refused:") || !strings.Contains(stderr, "already approved") {
		t.Fatalf("bob denying after approving: %d %s %s", code, stdout, stderr)
	}
	b, _ := os.ReadFile(effects)
	if n := strings.Count(string(b), "append cli-secret\n"); n != 1 {
		t.Fatalf("the approved call ran %d times, want 1", n)
	}
	code, stdout, _ = runCLI(t, append([]string{"approvals", "show", id}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, "state:         approved") || strings.Count(stdout, "bob approved via cli") != 1 || !strings.Contains(stdout, ": ok") {
		t.Fatalf("approvals show after approval: %d\n%s", code, stdout)
	}

	audit, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	var decisions []string
	for _, line := range strings.Split(strings.TrimSpace(string(audit)), "\n") {
		var l struct{ Event, Approver, Decision, Via, State, Reason string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if strings.HasPrefix(l.Event, "approval_decided") || strings.HasPrefix(l.Event, "approval_refused") {
			decisions = append(decisions, strings.Join([]string{l.Event, l.Approver, l.Decision, l.Via, l.State}, " "))
		}
	}
	want := []string{ // the repeated approval is not audited again (issue 25 §9)
		"approval_refused alice approve cli ",
		"approval_refused bob approve cli ",
		"approval_decided bob approve cli approved",
		"approval_refused bob deny cli ",
	}
	if !slices.Equal(decisions, want) || strings.Contains(string(audit), "cli-secret") {
		t.Errorf("audited decisions %q, want %q, and no argument value:\n%s", decisions, want, audit)
	}
}

type bearerRT string

func (k bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}
