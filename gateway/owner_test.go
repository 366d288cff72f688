package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/manifests"
)

// keysDirectory has the principals names, each with the key "<name>-key".
func keysDirectory(names ...string) *identity.Directory {
	c := &config.Config{Roles: map[string]*config.Role{
		"all": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}}}}
	for _, n := range names {
		c.Principals = append(c.Principals, config.Principal{Name: n, Roles: []string{"all"}, APIKeySHA256: []string{identity.HashKey(n + "-key")}})
	}
	return identity.New(c)
}

// aliceSecrets is a fake Temporal in which task alice-task is alice's and
// everything it would answer carries "secret".
func aliceSecrets() *fakeTemporal {
	return &fakeTemporal{
		describe: func(id string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
			switch id {
			case "alice-task":
				return describedTask("alice", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING), nil
			case "alice-ended":
				return describedTask("alice", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED), nil
			case "lock-workflow": // a workflow that is no airlock task: nobody's
				return describedTask("", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING), nil
			}
			return nil, serviceerror.NewNotFound("no such workflow")
		},
		queries: map[string]any{
			api.QueryStatus: api.Status{TaskID: "alice-task", Principal: "alice", State: api.StateRunning, Calls: 1,
				Recent: []api.CallRecord{{CallID: "k-k1", Tool: "counter__echo", Outcome: api.OutcomeOK, Reason: "secret reason"}}},
			api.QueryCall:      okResult("alice's secret result"),
			api.QueryApprovals: []api.ApprovalRequest{},
		},
		answer: func(sentUpdate, int) (api.CallResult, error) { return okResult("alice's secret result"), nil },
	}
}

// connectStatelessHTTP opens a 2026-07-28 client (no session: every
// request carries rt's headers).
func connectStatelessHTTP(t *testing.T, url string, rt *headerRT) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}, MaxRetries: 1},
		&mcp.ClientSessionOptions{ProtocolVersion: StatelessProtocol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// assertRefused checks that res refuses another principal's task and
// shows nothing of it.
func assertRefused(t *testing.T, what string, res *mcp.CallToolResult) {
	t.Helper()
	got := textOf(res)
	if !res.IsError || !strings.Contains(got, "belongs to another principal") {
		t.Errorf("%s: isError=%v %q; want it refused as another principal's task", what, res.IsError, got)
	}
	if b, _ := json.Marshal(res); strings.Contains(string(b), "secret") || strings.Contains(string(b), "k-k1") {
		t.Errorf("%s: the answer shows alice's task: %s", what, b)
	}
}

// TestOwnershipOnEveryPath: issue 25 item 1, against a fake Temporal. bob
// names alice's task with the Airlock-Task header, or with a session ID
// signed for (alice's task, bob) on two replicas sharing the key; every
// path is refused before anything of the task is read or sent to it.
func TestOwnershipOnEveryPath(t *testing.T) {
	ft := aliceSecrets()
	key := []byte(NewSessionKey())
	dir := keysDirectory("alice", "bob")
	a := newTestGateway(t, ft, Options{Directory: dir, SessionKey: key, InlineWait: time.Second})
	b := newTestGateway(t, ft, Options{Directory: dir, SessionKey: key, InlineWait: time.Second})
	srvA, srvB := httptest.NewServer(a.Handler()), httptest.NewServer(b.Handler())
	t.Cleanup(srvA.Close)
	t.Cleanup(srvB.Close)

	paths := []struct {
		tool string
		args map[string]any
		key  string
	}{
		{ToolStatus, map[string]any{}, ""},
		{ToolStatus, map[string]any{"call": "k-k1"}, ""},
		{ToolAwait, map[string]any{"call": "k-k1", "timeout_seconds": 1}, ""},
		{api.ToolStateGet, map[string]any{}, ""},
		{api.ToolStateSet, map[string]any{"key": "x", "value": 1}, ""},
		{ToolRollback, map[string]any{}, ""},
		{"counter__echo", map[string]any{"text": "hi"}, "k1"}, // alice's idempotency key
	}
	// The signed session of a refused initialize, had it been issued.
	sid := a.issueSession(sessionToken{raw: newRawSessionID(), task: "alice-task", principal: "bob"})
	for name, rt := range map[string]*headerRT{
		"header":                   {h: map[string]string{"Authorization": "Bearer bob-key", HeaderTask: "alice-task"}},
		"signed session":           {h: map[string]string{"Authorization": "Bearer bob-key", headerSessionID: sid}},
		"signed session, header 2": {h: map[string]string{"Authorization": "Bearer bob-key", headerSessionID: sid, HeaderTask: "bob-task"}},
	} {
		for replica, url := range map[string]string{"A": srvA.URL, "B": srvB.URL} {
			cs := connectStatelessHTTP(t, url, rt)
			for _, p := range paths {
				assertRefused(t, name+" on "+replica+": "+p.tool, callTool(t, cs, p.tool, p.args, p.key))
			}
		}
	}
	if n := ft.count(); n != 0 {
		t.Errorf("%d Updates sent to alice's task, want none", n)
	}
	ft.mu.Lock()
	queried, starts := ft.queried, len(ft.starts)
	ft.mu.Unlock()
	if len(queried) != 0 || starts != 0 {
		t.Errorf("queries %v, %d starts: want nothing read from or started as alice's task", queried, starts)
	}
	// The owner is remembered: one Describe per replica, however many
	// requests.
	if n := ft.describes(); n > 2 {
		t.Errorf("%d DescribeWorkflowExecution calls, want one per replica", n)
	}

	// alice herself is served on every path.
	cs := connectStatelessHTTP(t, srvB.URL, &headerRT{h: map[string]string{"Authorization": "Bearer alice-key", HeaderTask: "alice-task"}})
	if res := callTool(t, cs, ToolStatus, map[string]any{"call": "k-k1"}, ""); res.IsError || !strings.Contains(textOf(res), "secret reason") {
		t.Errorf("alice's own airlock_status: %q", textOf(res))
	}
	if res := callTool(t, cs, "counter__echo", map[string]any{"text": "hi"}, "k1"); res.IsError || textOf(res) != "alice's secret result" {
		t.Errorf("alice's own retry: %q", textOf(res))
	}
}

// TestRefusedInitializeIssuesNoSession: an initialize refused for
// another principal's task answers without an Mcp-Session-Id.
func TestRefusedInitializeIssuesNoSession(t *testing.T) {
	g := newTestGateway(t, aliceSecrets(), Options{Directory: keysDirectory("alice", "bob")})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	rs := &rawSession{url: srv.URL, hc: &http.Client{}}
	resp, body := rs.post(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		map[string]string{"Authorization": "Bearer bob-key", HeaderTask: "alice-task"})
	if !strings.Contains(body, "belongs to another principal") {
		t.Fatalf("initialize naming alice's task: %d %s; want it refused", resp.StatusCode, body)
	}
	if sid := resp.Header.Get(headerSessionID); sid != "" {
		t.Errorf("the refused initialize carries %s %q; want none", headerSessionID, sid)
	}
	// Whether another principal's task has ended is not told either; a
	// workflow with no owner is nobody's.
	for _, task := range []string{"alice-ended", "lock-workflow"} {
		resp, body = rs.post(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
			map[string]string{"Authorization": "Bearer bob-key", HeaderTask: task})
		if !strings.Contains(body, "belongs to another principal") || strings.Contains(body, "has ended") || resp.Header.Get(headerSessionID) != "" {
			t.Errorf("initialize naming %s: %s %v; want it refused as another's, without a session", task, body, resp.Header)
		}
	}
	// An accepted one still gets its session.
	resp, _ = rs.post(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		map[string]string{"Authorization": "Bearer alice-key", HeaderTask: "alice-task"})
	if resp.Header.Get(headerSessionID) == "" {
		t.Error("alice's initialize of her own task has no session ID")
	}
}

// TestClaimedTaskRace: a task bob names does not exist when it is checked,
// and alice starts it (her call with key k1 done) before bob's call with
// the same key: bob's call starts nothing, sends no Update, and gets
// nothing of alice's result. A task alice names and that nobody holds is
// started as hers before her call's Update, and its owner is remembered.
func TestClaimedTaskRace(t *testing.T) {
	ft := aliceSecrets()
	var started atomic.Bool // by alice, between bob's check and his call
	ft.describe = func(id string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		if id == "race-task" && started.Load() {
			return describedTask("alice", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING), nil
		}
		return nil, serviceerror.NewNotFound("no such workflow")
	}
	ft.startErr = func(id string) error {
		if id == "race-task" {
			started.Store(true)
			return serviceerror.NewWorkflowExecutionAlreadyStarted("started", "", "run-a")
		}
		return nil
	}
	g := newTestGateway(t, ft, Options{Directory: keysDirectory("alice", "bob")})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	bob := connectStatelessHTTP(t, srv.URL, &headerRT{h: map[string]string{"Authorization": "Bearer bob-key", HeaderTask: "race-task"}})
	assertRefused(t, "bob's call with alice's key", callTool(t, bob, "counter__echo", map[string]any{"text": "hi"}, "k1"))
	if n := ft.count(); n != 0 {
		t.Fatalf("%d Updates sent, want none", n)
	}

	alice := connectStatelessHTTP(t, srv.URL, &headerRT{h: map[string]string{"Authorization": "Bearer alice-key", HeaderTask: "fresh-task"}})
	if res := callTool(t, alice, "counter__echo", map[string]any{"text": "hi"}, ""); res.IsError {
		t.Fatalf("alice's call in a new task: %q", textOf(res))
	}
	ft.mu.Lock()
	starts := append([]pendingStart(nil), ft.starts...)
	ft.mu.Unlock()
	if len(starts) != 1 || starts[0].start.ID != "fresh-task" || starts[0].in.Principal != "alice" ||
		starts[0].start.WorkflowIDConflictPolicy != enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL {
		t.Fatalf("starts %+v; want fresh-task started as alice's, failing if it exists", starts)
	}
	if u := ft.last(t); u.withStart || u.update.WorkflowID != "fresh-task" || u.update.RunID != fakeRunID {
		t.Errorf("alice's Update %+v; want a plain Update of the run just started", u.update)
	}
	before := ft.describes()
	callTool(t, alice, ToolStatus, map[string]any{}, "")
	if ft.describes() != before {
		t.Errorf("the owner of fresh-task was described again; want it remembered from its start")
	}
}

func (f *fakeTemporal) describes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.described
}
