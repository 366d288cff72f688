package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
)

// TestApprovalsGrantArguments: grant flags are checked before anything is
// dialed.
func TestApprovalsGrantArguments(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "")
	t.Setenv(envAPIKey, "")
	id := "task-1~call-1"
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"deny", id, "--grant-calls", "2"}, "--grant-calls, --grant-for and --grant-principal apply to approve only"},
		{[]string{"approve", id, "--grant-calls", "many"}, `grant calls "many": give a whole number`},
		{[]string{"approve", id, "--grant-for", "soon"}, `grant duration "soon": give how long`},
		{[]string{"approve", id, "--grant-principal"}, "a grant for the principal needs a number of calls or a duration too"},
		{[]string{"approve", id, "--reason", "x"}, "--reason applies to revoke only"},
		{[]string{"revoke", id}, `"task-1~call-1" is not a grant ID`},
		{[]string{"revoke"}, "name one request ID"},
	} {
		code, _, stderr := runCLI(t, append([]string{"approvals"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.stderr) {
			t.Errorf("approvals %v: exit %d, want 2 and %q:\n%s", c.args, code, c.stderr, stderr)
		}
	}
}

// TestApprovalsGrants runs airlock dev in-process with a tool whose
// manifest allows grants (max_grant 3 calls / 1h, grant_args [key]): bob
// approves alice's call with airlock_approvals_decide and a grant of 1
// call (a grant of 4 is refused, naming max_grant); alice's next call with
// the same key runs without asking; the one after asks, and bob approves it
// from the CLI with --grant-for 1h; airlock tasks show lists both grants;
// airlock approvals revoke ends the second; the next call asks again; and
// airlock audit show tells the grant decisions and the revocation.
func TestApprovalsGrants(t *testing.T) {
	upstream := buildTestupstream(t)
	cfg, effects := approvalsConfig(t, upstream)
	allowGrants(t, cfg, "{calls: 3, duration: 1h}")
	ctx, s := approvalsDev(t, cfg, filepath.Join(t.TempDir(), "data"))
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	temporal := []string{"--config", cfg, "--temporal-address", s.srv.HostPort(), "--audit-log", auditPath}
	session := func(key string) *mcp.ClientSession { return approvalsSession(t, ctx, s, key) }
	alice, bob := session("alice-key"), session("bob-key")
	waitAvailable(t, ctx, alice, "counter__append")
	// call runs alice's append in the background.
	call := func(key string) chan *mcp.CallToolResult {
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": key}})
			if err != nil {
				t.Errorf("call %s: %v", key, err)
				res = &mcp.CallToolResult{IsError: true}
			}
			done <- res
		}()
		return done
	}
	wait := func(done chan *mcp.CallToolResult, what string) *mcp.CallToolResult {
		t.Helper()
		select {
		case r := <-done:
			return r
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not finish", what)
		}
		return nil
	}
	idRE := regexp.MustCompile(`(?m)^(\S+~\S+)\s+\S+\s+counter__append\s+alice\s+ops\s+0/1\s`)
	pending := func() (id, digest string) {
		t.Helper()
		id = listedRequest(t, temporal, idRE)
		_, show, _ := runCLI(t, append([]string{"approvals", "show", id}, temporal...)...)
		d := regexp.MustCompile(`(?m)^digest:\s+([0-9a-f]{64})$`).FindStringSubmatch(show)
		if d == nil {
			t.Fatalf("show %s:\n%s", id, show)
		}
		return id, d[1]
	}
	mcpDecide := func(id, digest string, calls int) *mcp.CallToolResult {
		t.Helper()
		res, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: "airlock_approvals_decide", Arguments: map[string]any{
			"request_id": id, "decision": "approve", "digest": digest, "grant_calls": calls}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	text := func(r *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}

	// 1: approved over MCP with a grant of 1 call (4 is above max_grant).
	first := call("k1")
	id1, digest1 := pending()
	task, call1, _ := api.SplitRequestID(id1)
	list, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: "airlock_approvals_list", Arguments: map[string]any{}})
	if err != nil || !strings.Contains(text(list), "an approval may also grant later calls of counter__append in task "+task+" (grant_calls, grant_for): at most 3 calls, 1h0m0s") {
		t.Fatalf("airlock_approvals_list: %v %s", err, text(list))
	}
	if r := mcpDecide(id1, digest1, 4); !r.IsError || !strings.Contains(text(r), "above counter__append's approval.max_grant of 3 calls, 1h0m0s") {
		t.Fatalf("grant of 4: %s", text(r))
	}
	if r := mcpDecide(id1, digest1, 1); r.IsError || !strings.Contains(text(r), "with a grant of 1 call of counter__append") {
		t.Fatalf("grant of 1: %s", text(r))
	}
	if r := wait(first, "the approved call"); r.IsError {
		t.Fatalf("approved call: %s", text(r))
	}
	// 2: the grant allows it.
	if r := wait(call("k1"), "the granted call"); r.IsError {
		t.Fatalf("granted call: %s", text(r))
	}
	// 3: the grant is used up: asks; approved from the CLI for 1h.
	third := call("k1")
	id3, _ := pending()
	t.Setenv(envAPIKey, "bob-key")
	code, _, stderr := runCLI(t, append([]string{"approvals", "approve", id3, "--grant-for", "1h", "--grant-principal"}, temporal...)...)
	if code != 1 || !strings.Contains(stderr, "allows grants in one task only (approval.max_grant.principal is false)") {
		t.Fatalf("approve --grant-principal on a tool without max_grant.principal: %d %s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, append([]string{"approvals", "approve", id3, "--grant-for", "1h"}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, "with a grant of 1h0m0s") {
		t.Fatalf("approve --grant-for 1h: %d %s %s", code, stdout, stderr)
	}
	wait(third, "the third call")
	code, stdout, _ = runCLI(t, "tasks", "show", task, "--temporal-address", s.srv.HostPort())
	_, call3, _ := api.SplitRequestID(id3)
	g1, g3 := api.GrantIDOf(task, call1), api.GrantIDOf(task, call3)
	if code != 0 || !regexp.MustCompile(`used\s+`+regexp.QuoteMeta(g1)+`  counter__append by bob key="k1"; used 1; 0 of 1 calls left`).MatchString(stdout) ||
		!regexp.MustCompile(`active\s+`+regexp.QuoteMeta(g3)+`  counter__append by bob key="k1"; used 0; 3 of 3 calls left, until `).MatchString(stdout) {
		t.Fatalf("tasks show:\n%s", stdout)
	}
	// 4: revoked: asks again; denied.
	code, stdout, stderr = runCLI(t, append([]string{"approvals", "revoke", g3, "--reason", "enough"}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, g3+" (as bob): revoked") {
		t.Fatalf("revoke: %d %s %s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, append([]string{"approvals", "revoke", g3}, temporal...)...)
	if code != 1 || !strings.Contains(stderr, "already revoked by bob") {
		t.Fatalf("revoke again: %d %s", code, stderr)
	}
	fourth := call("k1")
	id4, _ := pending()
	if code, _, stderr = runCLI(t, append([]string{"approvals", "deny", id4}, temporal...)...); code != 0 {
		t.Fatalf("deny: %s", stderr)
	}
	if r := wait(fourth, "the denied call"); !r.IsError {
		t.Fatalf("the call after the revocation ran: %s", text(r))
	}
	b, _ := os.ReadFile(effects)
	if n := strings.Count(string(b), "append k1\n"); n != 3 {
		t.Errorf("append k1 ran %d times, want 3", n)
	}
	audit, _ := os.ReadFile(auditPath)
	for _, want := range []string{
		`"event":"approval_decided","task":"` + task + `","request":"` + id3 + `","approver":"bob","decision":"approve","via":"cli","update_id":"cli:` + id3 + `:bob:approve:grant:0:1h0m0s","state":"approved","grant":"1h0m0s"`,
		`"event":"grant_revoked","grant":"` + g3 + `","by":"bob","via":"cli"}`,
		`"event":"grant_revoked","grant":"` + g3 + `","by":"bob","via":"cli","refused":"grant ` + g3 + ` was already revoked by bob`,
	} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("audit stream lacks %s:\n%s", want, audit)
		}
	}
	code, stdout, stderr = runCLI(t, "audit", "show", task, "--temporal-address", s.srv.HostPort())
	for _, want := range []string{"policy: allow (grant", "allowed by grant " + g1, "with a grant of 1 call", "grant " + g3 + " revoked by bob (\"enough\")"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("audit show lacks %q: %d %s\n%s", want, code, stderr, stdout)
		}
	}
}
