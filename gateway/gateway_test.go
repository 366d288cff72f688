package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// --- toMCP and errorResult -------------------------------------------------

func TestToMCPPassesUpstreamResultsThrough(t *testing.T) {
	upstream := `{"content":[{"type":"text","text":"hi"},{"type":"image","data":"iVBORw==","mimeType":"image/png"},` +
		`{"type":"resource","resource":{"uri":"mem://x","mimeType":"text/plain","text":"embedded"}}],` +
		`"structuredContent":{"n":1},"_meta":{"upstream.example/trace":"abc"}}`
	for _, tc := range []struct {
		outcome api.Outcome
		result  string
		isError bool
	}{
		{api.OutcomeOK, upstream, false},
		{api.OutcomeToolError, `{"content":[{"type":"text","text":"the disk is full"}],"isError":true}`, true},
	} {
		t.Run(string(tc.outcome), func(t *testing.T) {
			got := toMCP("task-1", api.CallResult{CallID: "call-1", Tool: "s__t", Outcome: tc.outcome, Result: json.RawMessage(tc.result)})
			if got.IsError != tc.isError {
				t.Errorf("IsError = %v, want %v", got.IsError, tc.isError)
			}
			// Everything the upstream sent, plus airlock's two _meta keys.
			want := jsonValue(t, json.RawMessage(tc.result)).(map[string]any)
			meta, _ := want["_meta"].(map[string]any)
			if meta == nil {
				meta = map[string]any{}
			}
			meta[MetaTask], meta[MetaCall] = "task-1", "call-1"
			want["_meta"] = meta
			if diff := cmp.Diff(want, jsonValue(t, got)); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToMCPEmptyContentIsAList(t *testing.T) {
	got := toMCP("task-1", api.CallResult{CallID: "call-1", Outcome: api.OutcomeOK, Result: json.RawMessage(`{}`)})
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"content":[]`) {
		t.Fatalf("result %s: content must be [] (clients reject null)", b)
	}
}

func TestToMCPUndecodableResult(t *testing.T) {
	got := toMCP("task-1", api.CallResult{CallID: "call-1", Tool: "s__t", Outcome: api.OutcomeOK, Result: json.RawMessage(`[1,2]`)})
	if !got.IsError || !strings.Contains(textOf(got), "could not decode the result of s__t") {
		t.Fatalf("got isError=%v %q", got.IsError, textOf(got))
	}
	assertMeta(t, got, "task-1", "call-1")
}

func TestToMCPAirlockOutcomesAreErrors(t *testing.T) {
	for _, o := range []api.Outcome{
		api.OutcomeLimit, api.OutcomeUnavailable, api.OutcomeUnknown,
		api.OutcomeRejected, api.OutcomeFailed, api.Outcome("something-new"),
	} {
		t.Run(string(o), func(t *testing.T) {
			reason := "reason for " + string(o)
			// A stray Result must not leak into an airlock outcome.
			got := toMCP("task-1", api.CallResult{CallID: "call-1", Tool: "s__t", Outcome: o, Reason: reason,
				Result: json.RawMessage(`{"content":[{"type":"text","text":"stale"}]}`)})
			if !got.IsError {
				t.Error("IsError = false, want true")
			}
			if len(got.Content) != 1 || textOf(got) != reason {
				t.Errorf("content %s, want the one text %q", mustJSON(t, got.Content), reason)
			}
			if got.StructuredContent != nil {
				t.Errorf("structuredContent = %v, want none", got.StructuredContent)
			}
			assertMeta(t, got, "task-1", "call-1")
		})
	}
}

func TestErrorResultOmitsUnknownIDs(t *testing.T) {
	got := errorResult("", "", "no task")
	if !got.IsError || textOf(got) != "no task" {
		t.Fatalf("got isError=%v %q", got.IsError, textOf(got))
	}
	if len(got.Meta) != 0 {
		t.Fatalf("_meta = %v, want no keys when task and call are unknown", got.Meta)
	}
	got = errorResult("task-1", "", "x")
	if _, ok := got.Meta[MetaCall]; ok || got.Meta[MetaTask] != "task-1" {
		t.Fatalf("_meta = %v, want only the task", got.Meta)
	}
}

// --- taskFor ---------------------------------------------------------------

func TestTaskForStatelessRequests(t *testing.T) {
	g := New(Options{Principal: "alice"})
	hdr := func(kv ...string) *mcp.CallToolRequest {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{}, Extra: &mcp.RequestExtra{Header: h}}
	}
	meta := func(m mcp.Meta, kv ...string) *mcp.CallToolRequest {
		r := hdr(kv...)
		r.Params.Meta = m
		return r
	}
	for _, tc := range []struct {
		name    string
		req     *mcp.CallToolRequest
		hint    taskHint
		want    string
		wantErr string
	}{
		{"header names the task", hdr(HeaderTask, "t-1"), taskHint{}, "t-1", ""},
		{"header value is trimmed", hdr(HeaderTask, "  t-2 "), taskHint{}, "t-2", ""},
		{"invalid header", hdr(HeaderTask, "bad id!"), taskHint{}, "", "header Airlock-Task"},
		{"too long", hdr(HeaderTask, strings.Repeat("a", 129)), taskHint{}, "", "at most 128"},
		{"own default task named", hdr(HeaderTask, "alice-default"), taskHint{}, "alice-default", ""},
		{"another principal's default task", hdr(HeaderTask, "bob-default"), taskHint{}, "", `"bob-default" is reserved`},
		{"a rollback's ID", hdr(HeaderTask, "rollback-alice-default"), taskHint{}, "", "reserved"},
		{"_meta names the task", meta(mcp.Meta{MetaTask: "t-3"}), taskHint{}, "t-3", ""},
		{"_meta naming another's default task", meta(mcp.Meta{MetaTask: "bob-default"}), taskHint{}, "", "_meta airlock.dev/task"},
		{"_meta task not a string", meta(mcp.Meta{MetaTask: 7}), taskHint{key: ""}, "", ""},
		{"the header wins over _meta", meta(mcp.Meta{MetaTask: "t-4"}, HeaderTask, "t-5"), taskHint{}, "t-5", ""},
		{"argument names the task", hdr(), taskHint{task: "t-6"}, "t-6", ""},
		{"argument naming another's default task", hdr(), taskHint{task: "bob-default"}, "", "argument task"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tref, err := g.resolveTask(tc.req, "alice", tc.hint)
			got := tref.id
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("taskFor: %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("taskFor = %q, %v", got, err)
			}
			if tc.want == "" {
				if !strings.HasPrefix(got, "task-") {
					t.Fatalf("taskFor = %q; want a task of its own", got)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("taskFor = %q; want %q", got, tc.want)
			}
		})
	}
}

// TestUnnamedStatelessRequests: a stateless request that names no task
// gets a task of its own (two of them never share one), except that the
// same idempotency key of the same principal always lands in the same
// task (its retry must find the call), which another principal's same key
// does not; and with gateway.unnamed_calls principal_task they all share
// <principal>-default.
func TestUnnamedStatelessRequests(t *testing.T) {
	g := New(Options{Principal: "alice"})
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{}, Extra: &mcp.RequestExtra{Header: http.Header{}}}
	resolve := func(g *Gateway, principal string, hint taskHint) taskRef {
		t.Helper()
		tref, err := g.resolveTask(req, principal, hint)
		if err != nil {
			t.Fatal(err)
		}
		return tref
	}
	a, b := resolve(g, "alice", taskHint{}), resolve(g, "alice", taskHint{})
	if a.id == b.id || a.named || !strings.HasPrefix(a.id, "task-") {
		t.Errorf("two unnamed requests: %+v and %+v; want two fresh tasks", a, b)
	}
	k1, k2 := resolve(g, "alice", taskHint{key: "k1"}), resolve(g, "alice", taskHint{key: "k1"})
	if k1.id != k2.id || !k1.named {
		t.Errorf("the same key twice: %+v and %+v; want the same task, created first (named)", k1, k2)
	}
	// The key the awaited call was made from names the same task.
	if aw := resolve(g, "alice", taskHint{key: keyOfCall(api.CallIDForKey("k1"))}); aw.id != k1.id {
		t.Errorf("airlock_await of k-k1: %s, want %s", aw.id, k1.id)
	}
	if pg := resolve(g, "alice", taskHint{key: keyOfCall(ProgramIDForKey("k1"))}); pg.id != k1.id {
		t.Errorf("airlock_await of the program of k1: %s, want %s", pg.id, k1.id)
	}
	for _, other := range []taskRef{
		resolve(g, "bob", taskHint{key: "k1"}),   // another principal, same key
		resolve(g, "alice", taskHint{key: "K1"}), // case-folded key
		resolve(g, "alice", taskHint{key: "k1 "}),
		resolve(New(Options{Principal: "alice"}), "alice", taskHint{key: "k1"}), // another session key
	} {
		if other.id == k1.id {
			t.Errorf("%+v shares alice's task of key k1", other)
		}
	}
	// "alice\x00k" and "alice" + "\x00k": no two (principal, key) pairs collide.
	if x, y := resolve(g, "a", taskHint{key: "b\x00c"}), resolve(g, "a\x00b", taskHint{key: "c"}); x.id == y.id {
		t.Errorf("(a, b\\0c) and (a\\0b, c) share task %s", x.id)
	}
	shared := New(Options{Principal: "alice", SharedUnnamedTask: true})
	if s1, s2 := resolve(shared, "alice", taskHint{}), resolve(shared, "alice", taskHint{key: "k1"}); s1.id != "alice-default" || s2.id != "alice-default" {
		t.Errorf("principal_task: %s and %s, want alice-default", s1.id, s2.id)
	}
}

// --- the call path, against a fake Temporal ---------------------------------

func TestCallBecomesUpdateWithStart(t *testing.T) {
	ft := &fakeTemporal{}
	g := newTestGateway(t, ft, Options{Principal: "alice", MaxCalls: 9, IdleTimeout: time.Hour, DeadlineAfter: time.Hour})
	cs := connectMemory(t, g)

	res := callTool(t, cs, "counter__echo", map[string]any{"text": "hi"}, "key-1")
	if res.IsError || textOf(res) != "echo hi" {
		t.Fatalf("result isError=%v %q", res.IsError, textOf(res))
	}
	u := ft.last(t)
	task := u.update.WorkflowID
	if !u.withStart {
		t.Error("the first call of a task was a plain Update; want Update-with-Start, which creates the task")
	}
	if !strings.HasPrefix(task, "task-") {
		t.Errorf("workflow ID %q: want a new task-… ID for a connection without headers", task)
	}
	assertMeta(t, res, task, "k-key-1")
	if u.update.UpdateID != "k-key-1" || u.update.UpdateName != api.UpdateCallTool ||
		u.update.WaitForStage != client.WorkflowUpdateStageCompleted {
		t.Errorf("update options %+v", u.update)
	}
	wantReq := api.CallRequest{CallID: "k-key-1", Tool: "counter__echo", Server: "counter", UpstreamTool: "echo",
		Arguments: json.RawMessage(`{"text":"hi"}`), Spec: api.SpecFor(counterManifest().Tools["echo"]), Principal: "alice"}
	if diff := cmp.Diff(wantReq, u.req); diff != "" {
		t.Errorf("call request (-want +got):\n%s", diff)
	}
	if u.start.ID != task || u.start.TaskQueue != api.DefaultTaskQueue ||
		u.start.WorkflowIDConflictPolicy != enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING ||
		u.start.WorkflowIDReusePolicy != enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE {
		t.Errorf("start options %+v", u.start)
	}
	if u.in.TaskID != task || u.in.Principal != "alice" || u.in.Limits.MaxCalls != 9 || u.in.Limits.IdleTimeout != time.Hour {
		t.Errorf("task input %+v", u.in)
	}
	if d := time.Until(u.in.Limits.Deadline); d <= 0 || d > time.Hour {
		t.Errorf("deadline %v: want about an hour from now", u.in.Limits.Deadline)
	}

	// The connection stays on its task; calls without a key get fresh IDs
	// and "{}" for missing arguments.
	res = callTool(t, cs, "counter__echo", nil, "")
	u = ft.last(t)
	if u.update.WorkflowID != task {
		t.Errorf("second call went to %q, want the connection's task %q", u.update.WorkflowID, task)
	}
	if u.withStart {
		t.Error("the second call used Update-with-Start; want a plain Update of the task known to run")
	}
	if u.update.RunID != fakeRunID {
		t.Errorf("second call's Update names run %q, want the run that answered the first, %q", u.update.RunID, fakeRunID)
	}
	if !strings.HasPrefix(u.req.CallID, "call-") || u.update.UpdateID != u.req.CallID {
		t.Errorf("call ID %q / update ID %q: want one fresh call-… ID", u.req.CallID, u.update.UpdateID)
	}
	if string(u.req.Arguments) != "{}" {
		t.Errorf("arguments %s, want {}", u.req.Arguments)
	}
	assertMeta(t, res, task, u.req.CallID)
}

func TestCallRejectsLongIdempotencyKey(t *testing.T) {
	ft := &fakeTemporal{}
	cs := connectMemory(t, newTestGateway(t, ft, Options{}))
	res := callTool(t, cs, "counter__echo", map[string]any{}, strings.Repeat("k", 201))
	if !res.IsError || !strings.Contains(textOf(res), MetaIdempotencyKey) {
		t.Fatalf("result isError=%v %q; want an error naming %s", res.IsError, textOf(res), MetaIdempotencyKey)
	}
	if n := ft.count(); n != 0 {
		t.Fatalf("%d updates sent, want none", n)
	}
}

func TestCallRetriesWhileTaskContinuesAsNew(t *testing.T) {
	ft := &fakeTemporal{answer: func(_ sentUpdate, n int) (api.CallResult, error) {
		if n < 3 {
			return api.CallResult{}, temporal.NewApplicationError(api.ErrContinuingAsNew+": task x", api.ErrTypeContinuingAsNew)
		}
		return okResult("done"), nil
	}}
	cs := connectMemory(t, newTestGateway(t, ft, Options{}))
	res := callTool(t, cs, "counter__echo", map[string]any{}, "")
	if res.IsError || textOf(res) != "done" {
		t.Fatalf("result isError=%v %q", res.IsError, textOf(res))
	}
	ups := ft.all()
	if len(ups) != 3 {
		t.Fatalf("%d update attempts, want 3", len(ups))
	}
	for _, u := range ups[1:] {
		if u.update.UpdateID != ups[0].update.UpdateID {
			t.Fatalf("update IDs %q then %q: a retry must reuse the call's ID", ups[0].update.UpdateID, u.update.UpdateID)
		}
	}
}

// A task moving to a new run waits for its calls in flight, one of them
// waiting for approval; a new call turned away for the whole inline wait
// has not started, and is told so (not that it is "still running"), with
// what holds the task and the key to call again with.
func TestCallTurnedAwayWhileTaskDrains(t *testing.T) {
	ft := &fakeTemporal{
		answer: func(sentUpdate, int) (api.CallResult, error) {
			return api.CallResult{}, temporal.NewApplicationError(api.ErrContinuingAsNew+": task x", api.ErrTypeContinuingAsNew)
		},
		queries: map[string]any{api.QueryApprovals: []api.ApprovalRequest{
			{ID: "req-1", CallID: "k-deploy", Tool: "ops__deploy", Group: "oncall", State: api.ApprovalPending},
		}},
	}
	cs := connectMemory(t, newTestGateway(t, ft, Options{InlineWait: 300 * time.Millisecond}))
	res := callTool(t, cs, "counter__echo", map[string]any{}, "next-1")
	text := textOf(res)
	for _, w := range []string{"counter__echo has not run", "moving to a new run", "ops__deploy", "req-1", `"oncall"`, `"next-1"`} {
		if !res.IsError || !strings.Contains(text, w) {
			t.Fatalf("result isError=%v %q; want an error containing %q", res.IsError, text, w)
		}
	}
	if strings.Contains(text, "still running") || res.Meta[MetaCall] != nil {
		t.Fatalf("result %q (meta %v) presents the call as started", text, res.Meta)
	}
	if ft.count() < 2 {
		t.Fatalf("%d update attempts, want the call retried while the task drains", ft.count())
	}
}

// A task the gateway saw running has ended since: the plain Update finds
// nothing, and the gateway falls back to Update-with-Start, whose answer
// (the ID may not be reused) says the task has ended.
func TestCallToTaskThatEndedSince(t *testing.T) {
	ft := &fakeTemporal{answer: func(u sentUpdate, n int) (api.CallResult, error) {
		switch n {
		case 1:
			return okResult("first"), nil
		case 2:
			return api.CallResult{}, serviceerror.NewNotFound("workflow execution already completed")
		}
		return api.CallResult{}, serviceerror.NewWorkflowExecutionAlreadyStarted("workflow execution already finished", "", "")
	}}
	cs := connectMemory(t, newTestGateway(t, ft, Options{}))
	if res := callTool(t, cs, "counter__echo", map[string]any{}, ""); res.IsError {
		t.Fatalf("first call: %q", textOf(res))
	}
	res := callTool(t, cs, "counter__echo", map[string]any{}, "")
	if !res.IsError || !strings.Contains(textOf(res), "has ended") {
		t.Fatalf("call after the task ended: isError=%v %q; want 'has ended'", res.IsError, textOf(res))
	}
	var kinds []bool
	for _, u := range ft.all() {
		kinds = append(kinds, u.withStart)
	}
	if diff := cmp.Diff([]bool{true, false, true}, kinds); diff != "" {
		t.Fatalf("updates sent, withStart (-want +got):\n%s", diff)
	}
}

// An Update admitted while the run it names continues as new is aborted
// with a retryable error, which the SDK retries against that closed run
// until its context ends. The call is sent again, unpinned, after a
// bounded attempt, under the same Update ID, and gets its result well
// within the inline wait.
func TestCallPinnedToAClosingRunIsSentAgain(t *testing.T) {
	defer func(d time.Duration) { pinnedAttempt = d }(pinnedAttempt)
	pinnedAttempt = 100 * time.Millisecond
	ft := &fakeTemporal{hangPinned: true}
	cs := connectMemory(t, newTestGateway(t, ft, Options{InlineWait: 8 * time.Second}))
	if res := callTool(t, cs, "counter__echo", map[string]any{"text": "one"}, ""); res.IsError {
		t.Fatalf("first call: %q", textOf(res))
	}
	res := callTool(t, cs, "counter__echo", map[string]any{"text": "two"}, "")
	if res.IsError || textOf(res) != "echo two" {
		t.Fatalf("call whose pinned Update hangs: isError=%v %q; want its result, not pending after the inline wait", res.IsError, textOf(res))
	}
	ups := ft.all()
	var kinds []bool
	for _, u := range ups {
		kinds = append(kinds, u.withStart)
	}
	if diff := cmp.Diff([]bool{true, false, true}, kinds); diff != "" {
		t.Fatalf("updates sent, withStart (-want +got):\n%s", diff)
	}
	if ups[1].update.RunID != fakeRunID || ups[2].update.RunID != "" || ups[1].update.UpdateID != ups[2].update.UpdateID {
		t.Fatalf("second call: pinned to %q then %q, IDs %q and %q; want the run then none, one ID",
			ups[1].update.RunID, ups[2].update.RunID, ups[1].update.UpdateID, ups[2].update.UpdateID)
	}
}

func TestCallFailuresAreExplained(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want []string
		// exact, when set, is the whole text the result must have.
		exact string
	}{
		{"task ended", serviceerror.NewWorkflowExecutionAlreadyStarted("finished", "", ""), []string{"has ended", HeaderTask}, ""},
		{"other", errors.New("frontend unreachable"), []string{"could not run counter__echo", "frontend unreachable"}, ""},
		// The validator's own words, without the type the error carries.
		{"finishing", temporal.NewApplicationError("task t is finishing; start a new task", api.ErrTypeFinishing), nil, "task t is finishing; start a new task"},
		// Only the type decides: the words alone are an ordinary failure.
		{"finishing words untyped", errors.New("task t is finishing; start a new task"), []string{"could not run counter__echo", "is finishing"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := &fakeTemporal{answer: func(sentUpdate, int) (api.CallResult, error) { return api.CallResult{}, tc.err }}
			cs := connectMemory(t, newTestGateway(t, ft, Options{}))
			res := callTool(t, cs, "counter__echo", map[string]any{}, "")
			for _, w := range tc.want {
				if !res.IsError || !strings.Contains(textOf(res), w) {
					t.Fatalf("result isError=%v %q; want an error containing %q", res.IsError, textOf(res), w)
				}
			}
			if tc.exact != "" && (!res.IsError || textOf(res) != tc.exact) {
				t.Fatalf("result isError=%v %q; want an error saying exactly %q", res.IsError, textOf(res), tc.exact)
			}
		})
	}
}

func TestCallStillRunningAfterInlineWait(t *testing.T) {
	ft := &fakeTemporal{block: true}
	cs := connectMemory(t, newTestGateway(t, ft, Options{InlineWait: 50 * time.Millisecond}))
	res := callTool(t, cs, "counter__echo", map[string]any{}, "slow-1")
	if res.IsError || !strings.Contains(textOf(res), "still running") || !strings.Contains(textOf(res), `"k-slow-1"`) ||
		!strings.Contains(textOf(res), ToolAwait) || res.Meta[MetaCall] != "k-slow-1" {
		t.Fatalf("result isError=%v %q; want a pending (non-error) result naming the call and %s", res.IsError, textOf(res), ToolAwait)
	}
	sc, _ := res.StructuredContent.(map[string]any)
	if sc["status"] != "pending" || sc["call"] != "k-slow-1" {
		t.Fatalf("structured content %v", res.StructuredContent)
	}
}

// --- sessions over HTTP -----------------------------------------------------

func TestHTTPSessionsBindTasks(t *testing.T) {
	ft := &fakeTemporal{}
	ft.describe = func(id string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		if id == "t-done" {
			return describedTask("alice", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED), nil
		}
		return nil, serviceerror.NewNotFound("no such workflow")
	}
	g := newTestGateway(t, ft, Options{Principal: "alice"})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)

	t.Run("header binds the session at initialize", func(t *testing.T) {
		rt := &headerRT{h: map[string]string{HeaderTask: "t-a"}}
		cs, err := connectHTTP(srv.URL, rt)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if got := cs.InitializeResult().Meta[MetaTask]; got != "t-a" {
			t.Errorf("initialize _meta %q = %v, want t-a", MetaTask, got)
		}
		// A later request with another header stays in the session's task.
		rt.set(HeaderTask, "t-b")
		res := callTool(t, cs, "counter__echo", map[string]any{}, "")
		if got := res.Meta[MetaTask]; got != "t-a" || ft.last(t).update.WorkflowID != "t-a" {
			t.Fatalf("call went to %v, want the session's task t-a", got)
		}
	})
	t.Run("no header: a new task per session", func(t *testing.T) {
		var tasks []any
		for range 2 {
			cs, err := connectHTTP(srv.URL, &headerRT{})
			if err != nil {
				t.Fatal(err)
			}
			tasks = append(tasks, cs.InitializeResult().Meta[MetaTask])
			cs.Close()
		}
		a, _ := tasks[0].(string)
		if !strings.HasPrefix(a, "task-") || tasks[0] == tasks[1] {
			t.Fatalf("tasks of two sessions: %v; want two distinct task-… IDs", tasks)
		}
	})
	t.Run("invalid header", func(t *testing.T) {
		_, err := connectHTTP(srv.URL, &headerRT{h: map[string]string{HeaderTask: "bad id!"}})
		if err == nil || !strings.Contains(err.Error(), HeaderTask) {
			t.Fatalf("connect: %v; want an error naming %s", err, HeaderTask)
		}
	})
	t.Run("another principal's default task", func(t *testing.T) {
		// Squatting: starting bob's default task first would lock bob out.
		_, err := connectHTTP(srv.URL, &headerRT{h: map[string]string{HeaderTask: "bob-default"}})
		if err == nil || !strings.Contains(err.Error(), `"bob-default" is reserved`) {
			t.Fatalf("connect: %v; want an error saying bob-default is reserved", err)
		}
	})
	t.Run("ended task", func(t *testing.T) {
		_, err := connectHTTP(srv.URL, &headerRT{h: map[string]string{HeaderTask: "t-done"}})
		if err == nil || !strings.Contains(err.Error(), "t-done has ended") {
			t.Fatalf("connect: %v; want an error saying t-done has ended", err)
		}
	})
}

func TestServeStdio(t *testing.T) {
	ft := &fakeTemporal{describe: func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		return describedTask("local", enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED), nil
	}}
	g := newTestGateway(t, ft, Options{})
	_, st := mcp.NewInMemoryTransports()
	if err := g.ServeStdio(context.Background(), st, "bad id!"); err == nil || !strings.Contains(err.Error(), "--task") {
		t.Errorf("ServeStdio(bad id): %v; want an error naming --task", err)
	}
	if err := g.ServeStdio(context.Background(), st, "t-gone"); err == nil || !strings.Contains(err.Error(), "has ended") {
		t.Errorf("ServeStdio(ended task): %v; want an error saying it has ended", err)
	}

	ft.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		return nil, serviceerror.NewNotFound("no such workflow")
	}
	ct, st := mcp.NewInMemoryTransports()
	done := make(chan error, 1)
	go func() { done <- g.ServeStdio(context.Background(), st, "my-task-1") }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := callTool(t, cs, "counter__echo", map[string]any{}, "")
	if got := res.Meta[MetaTask]; got != "my-task-1" {
		t.Errorf("stdio call went to %v, want my-task-1", got)
	}
	cs.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not return after the client closed")
	}
}

func TestToolsListedBeforeUpstreamsConnect(t *testing.T) {
	cs := connectMemory(t, newTestGateway(t, &fakeTemporal{}, Options{}))
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var echo *mcp.Tool
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Name == "counter__echo" {
			echo = tool
		}
	}
	if len(res.Tools) != 7 || echo == nil {
		t.Fatalf("tools %v, want counter__echo and the built-ins %s, %s, %s and the three state tools", names, ToolStatus, ToolAwait, ToolRollback)
	}
	if d := echo.Description; !strings.HasPrefix(d, "[unavailable: upstream counter is not connected yet]") || !strings.Contains(d, "Echo it.") {
		t.Fatalf("description %q: want it marked unavailable, keeping the manifest's description", d)
	}
}

// --- helpers ----------------------------------------------------------------

func counterManifest() *manifests.Manifest {
	return &manifests.Manifest{
		File:   "counter.yaml",
		Server: manifests.Server{Name: "counter", Stdio: &manifests.StdioServer{Command: "testupstream"}},
		Tools: map[string]*manifests.Tool{"echo": {
			Description: "Echo it.", SideEffects: []manifests.SideEffect{manifests.SideEffectNone},
			DataAccessLevel: manifests.DataPublic, Risk: manifests.RiskLow, Idempotent: true,
			Timeout: manifests.Duration(5 * time.Second), Retry: &manifests.Retry{MaxAttempts: 2},
		}},
	}
}

func newTestGateway(t *testing.T, ft *fakeTemporal, o Options) *Gateway {
	t.Helper()
	return newTestGatewayWith(t, ft, o)
}

// newTestGatewayWith is newTestGateway with any client.
func newTestGatewayWith(t *testing.T, c client.Client, o Options) *Gateway {
	t.Helper()
	o.Temporal = c
	o.Manifests = []*manifests.Manifest{counterManifest()}
	return New(o)
}

// connectMemory connects a client over in-memory transports: a connection
// without HTTP headers, like stdio.
func connectMemory(t *testing.T, g *Gateway) *mcp.ClientSession {
	t.Helper()
	return connectMemoryWith(t, g, nil)
}

// connectMemoryWith is connectMemory with the client's options.
func connectMemoryWith(t *testing.T, g *Gateway, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := g.Server().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// connectHTTP opens an MCP session (protocol 2025-11-25: a go-sdk v1.8.0
// client left to itself speaks the sessionless 2026-07-28, see
// replica_test.go).
func connectHTTP(url string, rt *headerRT) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}, MaxRetries: 1},
		&mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
}

// legacyProtocol is the newest revision with sessions.
const legacyProtocol = "2025-11-25"

type headerRT struct {
	mu sync.Mutex
	h  map[string]string
}

func (r *headerRT) set(k, v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h[k] = v
}

func (r *headerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	r.mu.Lock()
	for k, v := range r.h {
		req.Header.Set(k, v)
	}
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any, key string) *mcp.CallToolResult {
	t.Helper()
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	if key != "" {
		p.Meta = mcp.Meta{MetaIdempotencyKey: key}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

func okResult(text string) api.CallResult {
	b, _ := json.Marshal(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}})
	return api.CallResult{Outcome: api.OutcomeOK, Result: b, Attempts: 1}
}

func textOf(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func assertMeta(t *testing.T, r *mcp.CallToolResult, task, call string) {
	t.Helper()
	if r.Meta[MetaTask] != task || r.Meta[MetaCall] != call {
		t.Errorf("_meta = %v, want %s=%s and %s=%s", r.Meta, MetaTask, task, MetaCall, call)
	}
}

func jsonValue(t *testing.T, v any) any {
	t.Helper()
	var out any
	if err := json.Unmarshal([]byte(mustJSON(t, v)), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeTemporal is the part of client.Client the gateway uses. Unimplemented
// methods panic (the embedded interface is nil).
type fakeTemporal struct {
	client.Client
	// queries answer QueryWorkflow by query type; absent ones fail.
	queries map[string]any

	// answer decides the outcome of the nth update (from 1); default: the
	// call's arguments echoed as "echo <text>".
	answer func(u sentUpdate, n int) (api.CallResult, error)
	// program answers a run_program Update (default: ok, null).
	program func(u sentUpdate) (api.ProgramResult, error)
	// block makes results wait until the caller gives up; hangPinned
	// does so for Updates that name a run only.
	block, hangPinned bool
	describe          func(id string) (*workflowservice.DescribeWorkflowExecutionResponse, error)

	mu      sync.Mutex
	pending []pendingStart
	updates []sentUpdate
	signals []string

	starts  []pendingStart // tasks started alone (claimTask)
	queried []string       // "<query> <task>" of each QueryWorkflow
	// startErr, when set, is ExecuteWorkflow's answer.
	startErr func(id string) error
	// described counts DescribeWorkflowExecution calls.
	described int
}

type pendingStart struct {
	op    *fakeStartOp
	start client.StartWorkflowOptions
	in    api.TaskInput
}

type sentUpdate struct {
	// withStart: Update-with-Start (start and in are set), else a plain
	// Update of a task known to run.
	withStart bool
	start     client.StartWorkflowOptions
	in        api.TaskInput
	update    client.UpdateWorkflowOptions
	req       api.CallRequest
	prog      *api.ProgramRequest // a run_program Update's
}

type fakeStartOp struct {
	client.WithStartWorkflowOperation
}

func (f *fakeTemporal) NewWithStartWorkflowOperation(o client.StartWorkflowOptions, wf any, args ...any) client.WithStartWorkflowOperation {
	op := &fakeStartOp{}
	in, _ := args[0].(api.TaskInput)
	if wf != api.AgentTaskName || len(args) != 1 {
		panic("unexpected workflow start")
	}
	f.mu.Lock()
	f.pending = append(f.pending, pendingStart{op: op, start: o, in: in})
	f.mu.Unlock()
	return op
}

func (f *fakeTemporal) UpdateWithStartWorkflow(ctx context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	u := sentUpdate{withStart: true, update: o.UpdateOptions}
	for _, p := range f.pending {
		if p.op == o.StartWorkflowOperation {
			u.start, u.in = p.start, p.in
		}
	}
	f.mu.Unlock()
	return f.send(ctx, u)
}

func (f *fakeTemporal) UpdateWorkflow(ctx context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return f.send(ctx, sentUpdate{update: o})
}

func (f *fakeTemporal) send(ctx context.Context, u sentUpdate) (client.WorkflowUpdateHandle, error) {
	u.req, _ = u.update.Args[0].(api.CallRequest) // a rollback sends a RollbackRequest
	if p, ok := u.update.Args[0].(api.ProgramRequest); ok {
		u.prog = &p
	}
	f.mu.Lock()
	f.updates = append(f.updates, u)
	n := len(f.updates)
	f.mu.Unlock()
	if f.hangPinned && !u.withStart && u.update.RunID != "" {
		// As gRPC may: its deadline error comes a moment before the
		// context is marked done. (The sleep is the fake's behaviour,
		// not synchronisation.)
		if dl, ok := ctx.Deadline(); ok {
			time.Sleep(time.Until(dl) - 20*time.Millisecond)
		}
		return nil, client.NewWorkflowUpdateServiceTimeoutOrCanceledError(context.DeadlineExceeded)
	}
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if u.prog != nil {
		res := api.ProgramResult{ProgramID: u.prog.ProgramID, Outcome: api.ProgramOK}
		if f.program != nil {
			var err error
			if res, err = f.program(u); err != nil {
				return nil, err
			}
		}
		return fakeHandle{val: res}, nil
	}
	answer := f.answer
	if answer == nil {
		answer = func(u sentUpdate, _ int) (api.CallResult, error) {
			var a struct{ Text string }
			_ = json.Unmarshal(u.req.Arguments, &a)
			return okResult("echo " + a.Text), nil
		}
	}
	res, err := answer(u, n)
	if err != nil {
		return nil, err
	}
	res.CallID, res.Tool = u.req.CallID, u.req.Tool
	return fakeHandle{res: res}, nil
}

// SignalWorkflow records a signal. The gateway signals a task when a
// client cancels a call (relay.go); the go-sdk client may cancel a call
// whose answer it is just reading, which is harmless for a finished call.
func (f *fakeTemporal) SignalWorkflow(_ context.Context, id, _, name string, arg any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, name+" "+id)
	return nil
}

func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	f.described++
	f.mu.Unlock()
	if f.describe == nil {
		return nil, serviceerror.NewNotFound("no such workflow")
	}
	return f.describe(id)
}

// describedTask is what DescribeWorkflowExecution says of a task of owner
// in status st.
func describedTask(owner string, st enumspb.WorkflowExecutionStatus) *workflowservice.DescribeWorkflowExecutionResponse {
	p, err := converter.GetDefaultDataConverter().ToPayload(owner)
	if err != nil {
		panic(err)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status: st, SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{api.SAPrincipal.GetName(): p}}}}
}

// ExecuteWorkflow records the start of a task its client named
// (claimTask), which then exists.
func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		if err := f.startErr(o.ID); err != nil {
			return nil, err
		}
	}
	in, _ := args[0].(api.TaskInput)
	f.starts = append(f.starts, pendingStart{start: o, in: in})
	return fakeRun{}, nil
}

type fakeRun struct{ client.WorkflowRun }

func (fakeRun) GetRunID() string { return fakeRunID }

func (f *fakeTemporal) all() []sentUpdate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentUpdate(nil), f.updates...)
}

func (f *fakeTemporal) count() int { return len(f.all()) }

func (f *fakeTemporal) last(t *testing.T) sentUpdate {
	t.Helper()
	all := f.all()
	if len(all) == 0 {
		t.Fatal("no update was sent")
	}
	return all[len(all)-1]
}

type fakeHandle struct {
	client.WorkflowUpdateHandle
	res api.CallResult
	val any // the result instead of res (a program's)
}

// fakeRunID is the run every fake Update reports.
const fakeRunID = "run-1"

func (h fakeHandle) RunID() string { return fakeRunID }

func (h fakeHandle) Get(_ context.Context, v any) error {
	var b []byte
	var err error
	if h.val != nil {
		b, err = json.Marshal(h.val)
	} else {
		b, err = json.Marshal(h.res)
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func (f *fakeTemporal) QueryWorkflow(_ context.Context, id, _ string, queryType string, _ ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	v, ok := f.queries[queryType]
	f.queried = append(f.queried, queryType+" "+id)
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("workflow %s: no %s query in this fake", id, queryType)
	}
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		return nil, err
	}
	return encodedValue{p}, nil
}

type encodedValue struct{ p *commonpb.Payload }

func (e encodedValue) HasValue() bool { return e.p != nil }
func (e encodedValue) Get(v any) error {
	return converter.GetDefaultDataConverter().FromPayload(e.p, v)
}
