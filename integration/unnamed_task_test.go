package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// callMeta calls name with the given _meta (the task handle, a key).
func callMeta(t testing.TB, cs *mcp.ClientSession, name string, args any, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

// TestStatelessAgentsDoNotShareATask: issue 28 §2. Two agents of one
// principal on protocol 2026-07-28 that name no task each get a task of
// their own, so one's max_calls (and state, budget, locks, history) is
// not the other's; an agent that sends back the task handle its results
// carry (_meta airlock.dev/task) keeps one task; a retry by idempotency key
// without a handle lands in the task that ran the call and does not run it
// again; another principal can neither use the handle nor collide on the
// key.
func TestStatelessAgentsDoNotShareATask(t *testing.T) {
	t.Parallel()
	effects := filepath.Join(t.TempDir(), "effects.log")
	m := testupstreamManifest(t, effects)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: twoPrincipals(), maxCalls: 2})
	agentA := connectStateless(t, s.url, bearer("alice-key"))
	agentB := connectStateless(t, s.url, bearer("alice-key"))
	waitTools(t, agentA, "counter__echo", "counter__append")

	// Agent A keeps its task by sending the handle back.
	a1 := call(t, agentA, "counter__echo", map[string]any{"text": "a1"}, "")
	taskA, _ := a1.Meta[gateway.MetaTask].(string)
	if a1.IsError || !strings.HasPrefix(taskA, "task-") {
		t.Fatalf("agent A's first call: isError=%v in %q: %s", a1.IsError, taskA, text(a1))
	}
	handle := mcp.Meta{gateway.MetaTask: taskA}
	if a2 := callMeta(t, agentA, "counter__echo", map[string]any{"text": "a2"}, handle); a2.IsError || a2.Meta[gateway.MetaTask] != taskA {
		t.Fatalf("agent A's second call: isError=%v in %v: %s", a2.IsError, a2.Meta[gateway.MetaTask], text(a2))
	}
	// Its task is at max_calls 2.
	if a3 := callMeta(t, agentA, "counter__echo", map[string]any{"text": "a3"}, handle); !a3.IsError || !strings.Contains(text(a3), "limit of 2 tool calls") {
		t.Fatalf("agent A's third call: isError=%v %q; want its task's max_calls", a3.IsError, text(a3))
	}
	// Agent B, same principal, no handle: a task of its own, not at A's limit.
	b1 := call(t, agentB, "counter__echo", map[string]any{"text": "b1"}, "")
	if taskB, _ := b1.Meta[gateway.MetaTask].(string); b1.IsError || taskB == taskA || !strings.HasPrefix(taskB, "task-") {
		t.Fatalf("agent B's call: isError=%v in %v: %s; want a task of its own", b1.IsError, b1.Meta[gateway.MetaTask], text(b1))
	}
	// airlock_status of A's task, named by argument: A's two calls only.
	st := call(t, agentB, gateway.ToolStatus, map[string]any{"task": taskA}, "")
	if st.IsError || !strings.Contains(text(st), "task "+taskA) || !strings.Contains(text(st), "2 call(s)") {
		t.Fatalf("airlock_status {task: A's}: %q", text(st))
	}

	// A retry by key, naming no task, finds the call: it ran once.
	k1 := call(t, agentB, "counter__append", map[string]any{"key": "once"}, "retry-me")
	k2 := call(t, agentA, "counter__append", map[string]any{"key": "once"}, "retry-me")
	if k1.IsError || k2.IsError || k1.Meta[gateway.MetaTask] != k2.Meta[gateway.MetaTask] || text(k1) != text(k2) {
		t.Fatalf("a keyed call and its retry: %q in %v, %q in %v; want one task and one answer", text(k1), k1.Meta[gateway.MetaTask], text(k2), k2.Meta[gateway.MetaTask])
	}
	if n := sideEffects(t, effects, "append", "once"); n != 1 {
		t.Fatalf("append once ran %d times, want 1", n)
	}
	// airlock_await of the keyed call names its task by the key alone.
	if aw := call(t, agentB, gateway.ToolAwait, map[string]any{"call": k1.Meta[gateway.MetaCall]}, ""); aw.IsError || aw.Meta[gateway.MetaTask] != k1.Meta[gateway.MetaTask] {
		t.Fatalf("airlock_await of the keyed call: isError=%v in %v: %s", aw.IsError, aw.Meta[gateway.MetaTask], text(aw))
	}

	// bob: alice's handle is refused, by _meta and by argument; his same
	// key is his own call in his own task.
	bob := connectStateless(t, s.url, bearer("bob-key"))
	if r := callMeta(t, bob, "counter__echo", map[string]any{"text": "theirs"}, handle); !r.IsError || !strings.Contains(text(r), "belongs to another principal") {
		t.Fatalf("bob with alice's task handle: isError=%v %q", r.IsError, text(r))
	}
	if r := call(t, bob, gateway.ToolStatus, map[string]any{"task": taskA}, ""); !r.IsError || strings.Contains(text(r), "a1") {
		t.Fatalf("bob's airlock_status of alice's task: isError=%v %q", r.IsError, text(r))
	}
	kb := call(t, bob, "counter__append", map[string]any{"key": "once"}, "retry-me")
	if kb.IsError || kb.Meta[gateway.MetaTask] == k1.Meta[gateway.MetaTask] {
		t.Fatalf("bob's call with alice's key: isError=%v in %v: %s", kb.IsError, kb.Meta[gateway.MetaTask], text(kb))
	}
	if n := sideEffects(t, effects, "append", "once"); n != 2 {
		t.Fatalf("append once ran %d times, want 2 (alice's and bob's)", n)
	}
}
