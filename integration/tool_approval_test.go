package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// approvalExtensions is what a client of both approval extensions
// declares (SEP-2848 builds on the Tasks extension).
var approvalExtensions = map[string]any{gateway.ExtTasks: map[string]any{}, gateway.ExtToolApproval: map[string]any{}}

// connectDeclaring connects a go-sdk client at protocol 2026-07-28 as key's
// principal, naming task, that declares extensions in its capabilities
// (the go-sdk sends them in server/discover and in every request's _meta).
func connectDeclaring(t *testing.T, url, key, task string, extensions map[string]any) *mcp.ClientSession {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + key, gateway.HeaderTask: task}
	c := mcp.NewClient(&mcp.Implementation{Name: "approval-client", Version: "1"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{Extensions: extensions}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: headerRT{headers: h}}},
		&mcp.ClientSessionOptions{ProtocolVersion: gateway.StatelessProtocol})
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestToolApprovalExtension: issue 29 item 4. A go-sdk client that declares
// SEP-2848 (tool-approval, with tasks) gets, for a call that needs
// approval, a task handle carrying the SEP-2643 envelope instead of the
// pending text; approving runs the tool once and the task's result is the
// tool's result (approved-executed); an approver's denial, an expiry and
// a tasks/cancel come back as the drafts' shapes; a policy denial is a
// structured denial; another principal cannot read or cancel the handle;
// a malformed declaration is refused before anything runs; a client that
// declares nothing gets today's answers.
func TestToolApprovalExtension(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, appendNeedsOps+
		"  put: {side_effects: [write], data_access_level: internal, risk: high, idempotent: true, approval: {group: ops, timeout: 3s}}\n")
	dir := allGrants(nil, "alice", "bob")
	groups := map[string][]string{"ops": {"bob"}}
	noSecrets := policy.Rule{Name: "no-secrets", When: `args.?key.orValue("") == "secret"`, Effect: api.Deny, Reason: "secrets stay out of tools"}
	var current atomic.Pointer[activities.Judge] // the worker's configuration, hot-reloaded below
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir, groups: groups,
		inlineWait: 3 * time.Second, judge: current.Load, policy: &policy.Config{Rules: []policy.Rule{noSecrets}}})
	ctx := context.Background()
	cs := connectDeclaring(t, s.url, "alice-key", "t-approval", approvalExtensions)
	for _, ext := range []string{gateway.ExtTasks, gateway.ExtToolApproval, gateway.ExtAuthorization} {
		if _, ok := cs.InitializeResult().Capabilities.Extensions[ext]; !ok {
			t.Errorf("server/discover capabilities %+v: want the %s extension", cs.InitializeResult().Capabilities.Extensions, ext)
		}
	}
	waitTools(t, cs, "counter__append", "counter__put")

	// handleOf calls tool as cs and returns the task handle it answers.
	handleOf := func(cs *mcp.ClientSession, tool, key string) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"key": key}})
		if err != nil {
			t.Fatalf("%s %s: %v", tool, key, err)
		}
		rel, _ := res.Meta[gateway.MetaRelatedTask].(map[string]any)
		handle, _ := rel["taskId"].(string)
		env, _ := res.Meta[gateway.MetaAuthorization].(map[string]any)
		hints, _ := env["remediationHints"].([]any)
		if !strings.HasPrefix(handle, "t-approval~") || env["reason"] != "insufficient_authorization" || env["remediation"] != "available" ||
			len(hints) != 1 || mustJSON(t, hints[0]) != `{"type":"task"}` || res.StructuredContent != nil {
			t.Fatalf("%s %s with tool-approval: %s; want a task handle with the envelope (available, a task hint)", tool, key, mustJSON(t, res))
		}
		return handle
	}
	// get reads a handle with tasks/get, declaring tool-approval.
	get := func(key, handle string) (map[string]any, map[string]any) {
		t.Helper()
		return rpcCaps(t, s.url, key, "", "tasks/get", "", map[string]any{"taskId": handle}, map[string]any{"extensions": approvalExtensions})
	}
	// settled waits until handle is terminal and returns its state.
	settled := func(handle string) map[string]any {
		t.Helper()
		var got, rerr map[string]any
		waitFor(t, handle+" to finish", time.Minute, func() bool {
			got, rerr = get("alice-key", handle)
			return rerr == nil && got["status"] != "working"
		})
		return got
	}
	// decided checks a finished approval task: its status, disposition,
	// envelope (remediation, "" for none) and a body line.
	decided := func(got map[string]any, status, disp, remediation, line string) map[string]any {
		t.Helper()
		res, _ := got["result"].(map[string]any)
		meta, _ := res["_meta"].(map[string]any)
		env, hasEnv := meta[gateway.MetaAuthorization].(map[string]any)
		gotDisp, _ := meta[gateway.MetaDisposition].(string)
		if got["status"] != status || gotDisp != disp || hasEnv != (remediation != "") ||
			hasEnv && (env["remediation"] != remediation || env["authorizationContextId"] != nil) ||
			!strings.Contains(mustJSON(t, res["content"]), line) {
			t.Fatalf("finished task %s; want %s, %q, envelope %q, body with %q", mustJSON(t, got), status, disp, remediation, line)
		}
		return res
	}

	// Approve: the handle waits, the envelope is on every tasks/get; after
	// approval the tool runs once and the result is the tool's.
	h1 := handleOf(cs, "counter__append", "approved")
	got, rerr := get("alice-key", h1)
	if env, _ := mapAt(got, "_meta", gateway.MetaAuthorization); rerr != nil || got["status"] != "working" || env["remediation"] != "available" {
		t.Fatalf("tasks/get while it waits: %v %v; want working with the envelope", got, rerr)
	}
	// Hostile: bob holds alice's handle. He can neither read nor cancel it.
	for _, method := range []string{"tasks/get", "tasks/cancel"} {
		if _, rerr := rpcCaps(t, s.url, "bob-key", "", method, "", map[string]any{"taskId": h1}, map[string]any{"extensions": approvalExtensions}); rerr == nil ||
			rerr["code"] != float64(gateway.CodeAccessDenied) || !strings.Contains(fmt.Sprint(rerr["message"]), "another principal") {
			t.Fatalf("bob's %s of alice's handle: %v; want it refused", method, rerr)
		}
	}
	if ar, err := approver.Lookup(ctx, s.client, h1); err != nil || ar.State != api.ApprovalPending {
		t.Fatalf("after bob's tries the request is %+v %v; want still pending", ar, err)
	}
	if n := sideEffects(t, effects, "append", "approved"); n != 0 {
		t.Fatalf("the tool ran %d times before approval", n)
	}
	approve(t, s, h1) // the decide Update every channel delivers
	res := decided(settled(h1), "completed", gateway.DispositionExecuted, "", "")
	if !strings.Contains(mustJSON(t, res["structuredContent"]), `"count":1`) || res["isError"] == true {
		t.Fatalf("approved task's result %v; want the tool's result", res)
	}
	if n := sideEffects(t, effects, "append", "approved"); n != 1 {
		t.Fatalf("the approved tool ran %d times, want 1", n)
	}

	// Deny: a completed task with isError, denied-not-executed, the
	// envelope unavailable; the body says the tool did not run.
	h2 := handleOf(cs, "counter__append", "denied")
	ar, err := approver.Lookup(ctx, s.client, h2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := approver.Deliver(ctx, s.client, "test:bob:deny:"+h2, api.DecideRequest{RequestID: h2, Digest: ar.Digest, Approver: "bob", Approve: false, Via: "cli", Comment: "not today"}); err != nil {
		t.Fatal(err)
	}
	res = decided(settled(h2), "completed", gateway.DispositionDenied, "unavailable", "did not run")
	if res["isError"] != true || !strings.Contains(mustJSON(t, res["content"]), "bob denied") {
		t.Fatalf("denied task's result %v", res)
	}

	// Timeout: nobody decides within put's 3s; the same denial shape, the
	// body says it expired.
	h3 := handleOf(cs, "counter__put", "late")
	decided(settled(h3), "completed", gateway.DispositionDenied, "unavailable", "expired")
	if ar, err := approver.Lookup(ctx, s.client, h3); err != nil || ar.State != api.ApprovalExpired {
		t.Errorf("the late call's request: %+v %v; want expired", ar, err)
	}

	// Withdraw: tasks/cancel withdraws the request; the task is
	// cancelled, with no disposition.
	h4 := handleOf(cs, "counter__append", "withdrawn")
	got, rerr = rpcCaps(t, s.url, "alice-key", "", "tasks/cancel", "", map[string]any{"taskId": h4}, map[string]any{"extensions": approvalExtensions})
	if rerr != nil || got["status"] != "cancelled" {
		t.Fatalf("tasks/cancel: %v %v; want cancelled", got, rerr)
	}
	decided(settled(h4), "cancelled", "", "", "")
	if ar, err := approver.Lookup(ctx, s.client, h4); err != nil || ar.State != api.ApprovalWithdrawn {
		t.Errorf("the withdrawn call's request: %+v %v; want withdrawn", ar, err)
	}
	for _, key := range []string{"denied", "late", "withdrawn"} {
		tool := map[bool]string{true: "put", false: "append"}[key == "late"]
		if n := sideEffects(t, effects, tool, key); n != 0 {
			t.Errorf("%s %s ran %d times, want 0", tool, key, n)
		}
	}

	// Re-evaluated on approval: policy changed while the call waited (a
	// hot reload); the approved call is judged again, refused, and the
	// task completes as a denial that says why.
	h6 := handleOf(cs, "counter__append", "revoked")
	p, err := policy.Compile(policy.Config{Rules: []policy.Rule{noSecrets,
		{Name: "freeze", When: `args.?key.orValue("") == "revoked"`, Effect: api.Deny, Reason: "change freeze"}}})
	if err != nil {
		t.Fatal(err)
	}
	current.Store(&activities.Judge{Policy: p, Groups: groups,
		Catalog: activities.NewCatalog([]*manifests.Manifest{m}, []manifests.Server{m.Server}, s.pool, false)})
	approve(t, s, h6)
	decided(settled(h6), "completed", gateway.DispositionDenied, "unavailable", "judged again before it ran, policy")
	if n := sideEffects(t, effects, "append", "revoked"); n != 0 {
		t.Errorf("the call approved under the old policy ran %d times", n)
	}

	// A policy denial (not approvable): today's isError result, with the
	// SEP-2643 envelope: unavailable, a retry handle, the check that denied.
	pd, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	env, _ := pd.Meta[gateway.MetaAuthorization].(map[string]any)
	ctxID, _ := env["authorizationContextId"].(string)
	if !pd.IsError || env["reason"] != "insufficient_authorization" || env["remediation"] != "unavailable" || !strings.HasPrefix(ctxID, "t-approval~") ||
		!strings.Contains(mustJSON(t, env["remediationHints"]), `"check":"rule","policyVersion":`) ||
		!strings.Contains(mustJSON(t, env["remediationHints"]), `"rule":"no-secrets","type":"airlock.dev/policy"`) {
		t.Fatalf("policy denial with the extensions: %s; want the structured denial", mustJSON(t, pd))
	}
	// The client echoes the handle on a retry (SEP-2643): it is not
	// authority; the retry is judged afresh, and denied again.
	again, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": "secret"},
		Meta: mcp.Meta{gateway.MetaAuthorizationContext: ctxID}})
	if err != nil || !again.IsError || again.Meta[gateway.MetaAuthorization] == nil {
		t.Fatalf("retry echoing the handle: %v %v; want denied again", again, err)
	}
	if n := sideEffects(t, effects, "append", "secret"); n != 0 {
		t.Errorf("the denied call ran %d times", n)
	}

	// Hostile: a declared but malformed extension, and tool-approval
	// without tasks: refused, naming the field; nothing runs.
	for name, exts := range map[string]map[string]any{
		"settings a string": {gateway.ExtTasks: map[string]any{}, gateway.ExtToolApproval: "yes"},
		"without tasks":     {gateway.ExtToolApproval: map[string]any{}},
		"denials a list":    {gateway.ExtAuthorization: []any{}},
	} {
		_, rerr := rpcCaps(t, s.url, "alice-key", "t-approval", "tools/call", "counter__append",
			map[string]any{"name": "counter__append", "arguments": map[string]any{"key": "malformed"}}, map[string]any{"extensions": exts})
		if rerr == nil || rerr["code"] != float64(-32602) || !strings.Contains(fmt.Sprint(rerr["message"]), "extensions") {
			t.Errorf("%s: %v; want invalid params naming the extension", name, rerr)
		}
		// tasks/get reads its own declaration, and refuses it the same way.
		if _, rerr := rpcCaps(t, s.url, "alice-key", "", "tasks/get", "", map[string]any{"taskId": h1}, map[string]any{"extensions": exts}); rerr == nil ||
			rerr["code"] != float64(-32602) || !strings.Contains(fmt.Sprint(rerr["message"]), "extensions") {
			t.Errorf("tasks/get, %s: %v; want invalid params naming the extension", name, rerr)
		}
	}
	// The declaration twice, once well-formed and once not: the edge
	// refuses the repeated member before anyone reads either.
	dup := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"counter__append","arguments":{"key":"malformed"},"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"` + gateway.StatelessProtocol + `","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},` +
		`"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{},` +
		`"io.modelcontextprotocol/tool-approval":{},"io.modelcontextprotocol/tool-approval":"yes"}}}}}`
	req, _ := http.NewRequest("POST", s.url, strings.NewReader(dup))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Authorization": "Bearer alice-key", "Mcp-Protocol-Version": gateway.StatelessProtocol, "Mcp-Method": "tools/call",
		"Mcp-Name": "counter__append", gateway.HeaderTask: "t-approval"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "tool-approval") || strings.Contains(string(body), `"result"`) {
		t.Errorf("a repeated declaration: HTTP %d %s; want it refused, naming the member", resp.StatusCode, body)
	}
	for _, ar := range approvalsOf(t, s, "t-approval") {
		if strings.Contains(string(ar.Arguments), "malformed") {
			t.Errorf("a refused declaration left approval request %s", ar.ID)
		}
	}

	// A client that declares nothing: today's pending result and today's
	// denial, no envelope.
	plain := connectDeclaring(t, s.url, "alice-key", "t-plain", nil)
	pr, err := plain.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": "plain"}})
	sc, _ := pr.StructuredContent.(map[string]any)
	if err != nil || pr.IsError || sc["status"] != "pending" || pr.Meta[gateway.MetaAuthorization] != nil || pr.Meta[gateway.MetaRelatedTask] != nil {
		t.Fatalf("without the extensions: %s %v; want today's pending result", mustJSON(t, pr), err)
	}
	pd, err = plain.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": "secret"}})
	if err != nil || !pd.IsError || pd.Meta[gateway.MetaAuthorization] != nil {
		t.Fatalf("policy denial without the extensions: %s %v; want today's denial", mustJSON(t, pd), err)
	}
	// A tasks-only client: today's task handle and today's states.
	h5, _ := rpc2026(t, s.url, "alice-key", "t-approval", "tools/call", "counter__append",
		map[string]any{"name": "counter__append", "arguments": map[string]any{"key": "tasks-only"}}, true)
	m5, _ := h5["_meta"].(map[string]any)
	if h5["resultType"] != "task" || m5[gateway.MetaAuthorization] != nil || m5[gateway.MetaRelatedTask] != nil || h5["ttlMs"] != nil {
		t.Fatalf("tasks-only client: %v; want today's handle", h5)
	}
}

// mapAt is m[k1][k2] as a map.
func mapAt(m map[string]any, k1, k2 string) (map[string]any, bool) {
	a, _ := m[k1].(map[string]any)
	b, ok := a[k2].(map[string]any)
	return b, ok
}

// approvalsOf is task's approval requests.
func approvalsOf(t *testing.T, s *stack, task string) []api.ApprovalRequest {
	t.Helper()
	v, err := s.client.QueryWorkflow(context.Background(), task, "", api.QueryApprovals)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []api.ApprovalRequest
	if err := v.Get(&reqs); err != nil {
		t.Fatal(err)
	}
	return reqs
}
