package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
)

// TestApprovalsApproveWithEdits runs `airlock dev` in-process: alice's call
// waits for approval, bob approves it with edited arguments from a file
// (airlock approvals approve --args FILE). What runs is the edited call;
// alice's result says an approver changed the arguments, with the change
// masked (key is a redact path); airlock audit show shows the original and
// edited arguments, both digests and the editor. --args with deny is a
// usage error.
func TestApprovalsApproveWithEdits(t *testing.T) {
	upstream := buildTestupstream(t)
	cfg, effects := approvalsConfig(t, upstream)
	ctx, s := approvalsDev(t, cfg, filepath.Join(t.TempDir(), "data"))
	temporal := []string{"--config", cfg, "--temporal-address", s.srv.HostPort()}

	cs := approvalsSession(t, ctx, s, "alice-key")
	done := appendInBackground(t, ctx, cs, "cli-draft")

	idRE := regexp.MustCompile(`(?m)^(\S+~\S+)\s+\S+\s+counter__append\s+alice\s`)
	id := listedRequest(t, temporal, idRE)
	argsFile := filepath.Join(t.TempDir(), "args.json")
	if err := os.WriteFile(argsFile, []byte(`{"key": "cli-edited"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envAPIKey, "bob-key")
	if code, _, stderr := runCLI(t, append([]string{"approvals", "deny", id, "--args", argsFile}, temporal...)...); code != 2 || !strings.Contains(stderr, "--args applies to approve only") {
		t.Fatalf("deny --args: %d %s", code, stderr)
	}
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	code, stdout, stderr := runCLI(t, append([]string{"approvals", "approve", id, "--args", argsFile, "--audit-log", auditPath}, temporal...)...)
	digest := regexp.MustCompile(`edited arguments: digest ([0-9a-f]{64})`).FindStringSubmatch(stdout)
	if code != 0 || !strings.Contains(stdout, "(as bob): approved with edited arguments") || digest == nil {
		t.Fatalf("approve --args: %d %s %s", code, stdout, stderr)
	}
	if b, _ := os.ReadFile(auditPath); !strings.Contains(string(b), `"edit_digest":"`+digest[1]+`"`) || strings.Contains(string(b), "cli-edited") {
		t.Errorf("audit stream %s: want approval_decided with edit_digest, without argument values", b)
	}
	// Issue 25 §9: the same command again records nothing and says so.
	code, stdout, stderr = runCLI(t, append([]string{"approvals", "approve", id, "--args", argsFile, "--audit-log", auditPath}, temporal...)...)
	if code != 0 || !strings.Contains(stdout, "already decided: bob already approved request "+id+" via cli") || strings.Contains(stdout, "(as bob)") {
		t.Errorf("approve --args again: %d %s %s, want already decided", code, stdout, stderr)
	}
	if b, _ := os.ReadFile(auditPath); strings.Count(string(b), `"approval_decided"`) != 1 {
		t.Errorf("audit stream after a repeat %s: want one approval_decided line", b)
	}
	var r *mcp.CallToolResult
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the approved call did not finish")
	}
	if r.IsError {
		t.Fatalf("approved call: %+v", r)
	}
	text := textOf(r)
	if !strings.Contains(text, "approver bob changed the arguments") || !strings.Contains(text, `key: masked value changed`) ||
		strings.Contains(text, "cli-draft") {
		t.Errorf("the agent's result does not say, masked, that bob edited the arguments:\n%s", text)
	}
	meta, _ := json.Marshal(r.Meta[api.EditMetaKey])
	if !strings.Contains(string(meta), `"by":"bob"`) || !strings.Contains(string(meta), digest[1]) {
		t.Errorf("result _meta[%s] = %s", api.EditMetaKey, meta)
	}
	b, _ := os.ReadFile(effects)
	if string(b) != "append cli-edited\n" {
		t.Errorf("side effects %q, want only the edited call", b)
	}

	// Over MCP: bob decides alice's next call with airlock_approvals_decide
	// and arguments.
	bobCS, err := mcp.NewClient(&mcp.Implementation{Name: "bob", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + s.addr + "/mcp", HTTPClient: &http.Client{Transport: bearerRT("bob-key")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bobCS.Close()
	done = appendInBackground(t, ctx, cs, "mcp-draft")
	var view struct {
		Requests []struct {
			ID, Digest string
			Editable   bool
		}
	}
	testenv.WaitFor(t, "bob to see alice's second call", 60*time.Second, func() bool {
		lr, err := bobCS.CallTool(ctx, &mcp.CallToolParams{Name: "airlock_approvals_list"})
		if err != nil || lr.IsError {
			t.Fatalf("airlock_approvals_list: %v %+v", err, lr)
		}
		b, _ := json.Marshal(lr.StructuredContent)
		_ = json.Unmarshal(b, &view)
		return len(view.Requests) > 0
	})
	if !view.Requests[0].Editable {
		t.Errorf("the request is not marked editable: %+v", view.Requests[0])
	}
	dr, err := bobCS.CallTool(ctx, &mcp.CallToolParams{Name: "airlock_approvals_decide", Arguments: map[string]any{
		"request_id": view.Requests[0].ID, "decision": "approve", "digest": view.Requests[0].Digest[:12],
		"arguments": map[string]any{"key": "mcp-edited"}}})
	if err != nil || dr.IsError || !strings.Contains(textOf(dr), "approved with edited arguments") {
		t.Fatalf("airlock_approvals_decide with arguments: %v %+v", err, dr)
	}
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the call approved over MCP did not finish")
	}
	if r.IsError || !strings.Contains(textOf(r), "approver bob changed the arguments") {
		t.Fatalf("call approved over MCP: %+v", r)
	}
	if b, _ := os.ReadFile(effects); string(b) != "append cli-edited\nappend mcp-edited\n" {
		t.Errorf("side effects %q after the MCP approval", b)
	}

	task, _, _ := api.SplitRequestID(id)
	code, stdout, stderr = runCLI(t, "audit", "show", "--config", cfg, "--temporal-address", s.srv.HostPort(), task)
	if code != 0 || !strings.Contains(stdout, "arguments edited by bob via cli: key: masked value changed (digest ") ||
		!strings.Contains(stdout, digest[1][:12]) || strings.Contains(stdout, "cli-draft") || strings.Contains(stdout, "cli-edited") {
		t.Errorf("audit show: %d %s\n%s", code, stderr, stdout)
	}
	code, stdout, _ = runCLI(t, "audit", "show", "--json", "--config", cfg, "--temporal-address", s.srv.HostPort(), task)
	var tl struct {
		Calls []struct {
			Edit *struct {
				By             string          `json:"by"`
				Via            string          `json:"via"`
				OriginalDigest string          `json:"original_digest"`
				Digest         string          `json:"digest"`
				Original       json.RawMessage `json:"original"`
				Arguments      json.RawMessage `json:"arguments"`
			} `json:"edit"`
		}
	}
	if err := json.Unmarshal([]byte(stdout), &tl); err != nil || code != 0 {
		t.Fatalf("audit show --json: %d %v\n%s", code, err, stdout)
	}
	if len(tl.Calls) != 2 || tl.Calls[0].Edit == nil || tl.Calls[1].Edit == nil || tl.Calls[1].Edit.Via != "mcp" {
		t.Fatalf("audit show --json: calls %s", stdout)
	}
	ed := tl.Calls[0].Edit
	if ed.By != "bob" || ed.Via != "cli" || ed.Digest != digest[1] || ed.OriginalDigest == "" || ed.OriginalDigest == ed.Digest ||
		compact(ed.Original) != `{"key":"[redacted]"}` || compact(ed.Arguments) != `{"key":"[redacted]"}` {
		t.Errorf("audit show --json: edit %+v", ed)
	}

	// tasks show says which recent calls ran with an approver's arguments.
	code, stdout, stderr = runCLI(t, "tasks", "show", "--temporal-address", s.srv.HostPort(), task)
	want := []string{
		fmt.Sprintf("arguments edited by bob via cli (digest %s → %s)", ed.OriginalDigest[:12], ed.Digest[:12]),
		fmt.Sprintf("arguments edited by bob via mcp (digest %s → %s)", tl.Calls[1].Edit.OriginalDigest[:12], tl.Calls[1].Edit.Digest[:12]),
	}
	for _, w := range want {
		if code != 0 || !strings.Contains(stdout, w) {
			t.Errorf("tasks show: %d %s\nwant %q in\n%s", code, stderr, w, stdout)
		}
	}
	if strings.Contains(stdout, "cli-edited") || strings.Contains(stdout, "cli-draft") {
		t.Errorf("tasks show prints redacted arguments:\n%s", stdout)
	}
}

func textOf(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func compact(raw json.RawMessage) string {
	var b strings.Builder
	for _, f := range strings.Fields(string(raw)) {
		b.WriteString(f)
	}
	return b.String()
}
