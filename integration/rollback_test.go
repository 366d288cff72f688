package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/slack"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
)

// npmStack serves the example filesystem manifest (a sandbox and the
// rollback trash) and the example memory manifest on the real npm servers.
// The sandbox starts with notes.txt and the graph with the entity alice.
type npmStack struct {
	*stack
	sandbox, trash, memFile string
}

func newNPMStack(t *testing.T, o stackOptions) *npmStack {
	return newNPMStackIn(t, o, t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "memory.jsonl"), nil)
}

// newNPMStackIn is newNPMStack on the given directories and memory file;
// prepare, when set, runs once the seed files are written.
func newNPMStackIn(t *testing.T, o stackOptions, sandbox, trash, memFile string, prepare func()) *npmStack {
	n := &npmStack{sandbox: sandbox, trash: trash, memFile: memFile}
	if err := os.WriteFile(filepath.Join(n.sandbox, "notes.txt"), []byte("original notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.memFile, []byte(`{"type":"entity","name":"alice","entityType":"person","observations":["likes tea"]}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare()
	}
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{n.sandbox, n.trash}, nil)
	mem := loadExample(t, "memory.yaml", "server-memory", nil, map[string]string{"MEMORY_FILE_PATH": n.memFile})
	o.manifests = []*manifests.Manifest{fsm, mem}
	n.stack = newStack(t, o)
	return n
}

// snapshot is everything the two servers hold: every file under the
// sandbox with its content, and the memory graph as read_graph returns it.
func (n *npmStack) snapshot(t *testing.T) (files map[string]string, graph string) {
	t.Helper()
	files = map[string]string{}
	err := filepath.Walk(n.sandbox, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(n.sandbox, p)
		if info.IsDir() {
			files[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		files[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cs := n.connect(t, map[string]string{gateway.HeaderTask: "snapshot-" + time.Now().Format("150405.000000000")})
	waitTools(t, cs, "memory__read_graph")
	res := call(t, cs, "memory__read_graph", map[string]any{}, "")
	if res.IsError {
		t.Fatalf("read_graph: %s", text(res))
	}
	return files, text(res)
}

func (n *npmStack) assertUnchanged(t *testing.T, files map[string]string, graph string) {
	t.Helper()
	f2, g2 := n.snapshot(t)
	if !mapsEqual(files, f2) {
		t.Errorf("sandbox changed:\nbefore %v\nafter  %v", files, f2)
	}
	if g2 != graph {
		t.Errorf("memory graph changed:\nbefore %s\nafter  %s", graph, g2)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// startPlan validates a plan against the stack's tools and starts it as
// the all-granted principal tester.
func (s *stack) startPlan(t *testing.T, src string, id string) client.WorkflowRun {
	t.Helper()
	p, err := plans.Parse(filepath.Join(t.TempDir(), "plan.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var tools []string
	for name := range s.gw.ToolNames() {
		tools = append(tools, name)
	}
	if probs := p.Validate(tools); len(probs) > 0 {
		t.Fatalf("plan: %v", manifests.Problems(probs))
	}
	vars, err := p.ResolveVars(nil)
	if err != nil {
		t.Fatal(err)
	}
	in := api.PlanInput{TaskID: id, Principal: "tester", Plan: p, Vars: vars,
		Identity: &api.Identity{Name: "tester", Permissions: []string{"*"}, DataLevel: string(manifests.DataRestricted), AllowTools: []string{"*"}},
		Limits:   api.Limits{MaxCalls: 50}, RollbackNotify: "ops"}
	run, err := s.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: api.DefaultTaskQueue}, api.PlanName, in)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func planResult(t *testing.T, run client.WorkflowRun) api.TaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var res api.TaskResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("plan %s: %v", run.GetID(), err)
	}
	return res
}

// TestPlanRollbackRestoresBothServers runs a four-step plan across the npm
// filesystem and memory servers whose last step fails: steps 3..1 are
// compensated, newest first, and both servers are back in their exact
// prior state.
func TestPlanRollbackRestoresBothServers(t *testing.T) {
	t.Parallel()
	n := newNPMStack(t, stackOptions{})
	files, graph := n.snapshot(t)

	run := n.startPlan(t, `name: seed
vars:
  dir: `+n.sandbox+`
steps:
  - id: notes
    tool: filesystem__write_file
    args: {path: "${{ vars.dir }}/notes.txt", content: "overwritten by the plan\n"}
  - id: project
    tool: filesystem__create_directory
    args: {path: "${{ vars.dir }}/project-x"}
  - id: entities
    tool: memory__create_entities
    args:
      entities:
        - {name: project-x, entityType: project, observations: ["created by plan seed"]}
  - id: observe
    tool: memory__add_observations
    # No entity "nobody": the server reports an error, and the plan rolls back.
    args:
      observations: [{entityName: nobody, contents: ["x"]}]
`, "plan-rollback-npm")
	res := planResult(t, run)
	if res.State != api.StateRolledBack || len(res.Undone) != 0 {
		t.Fatalf("plan ended %+v, want rolled_back with nothing left undone", res)
	}
	st := status(t, n.stack, "plan-rollback-npm")
	var undone []string
	for _, e := range st.Undone {
		undone = append(undone, e.CallID+">"+e.Compensation.Tool)
	}
	want := []string{"step-entities>memory__delete_entities", "step-project>filesystem__move_file", "step-notes>filesystem__write_file"}
	if !slices.Equal(undone, want) {
		t.Errorf("compensations ran %q, want %q (newest first)", undone, want)
	}
	if got := st.Plan.Steps[3]; got.State != api.StepFailed || !strings.Contains(got.Reason, "nobody") {
		t.Errorf("step observe = %+v", got)
	}
	n.assertUnchanged(t, files, graph)
	// The created directory is kept in the trash, not destroyed.
	if ents, _ := os.ReadDir(n.trash); len(ents) != 1 || !ents[0].IsDir() {
		t.Errorf("trash holds %v, want the one directory the plan created", ents)
	}
}

func status(t *testing.T, s *stack, id string) api.Status {
	t.Helper()
	v, err := s.client.QueryWorkflow(context.Background(), id, "", api.QueryStatus)
	if err != nil {
		t.Fatal(err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAgentRollbackOverMCP: an agent writes a new file, overwrites one and
// creates an entity, then calls airlock_rollback twice at once: one
// rollback runs, the other joins it, and everything is as before.
func TestAgentRollbackOverMCP(t *testing.T) {
	t.Parallel()
	n := newNPMStack(t, stackOptions{})
	files, graph := n.snapshot(t)
	cs := n.connect(t, map[string]string{gateway.HeaderTask: "agent-rollback"})
	waitTools(t, cs, "filesystem__write_file", "memory__create_entities", gateway.ToolRollback)
	// Before any call there is no task yet: nothing to roll back, not an error.
	if res := call(t, cs, gateway.ToolRollback, map[string]any{}, ""); res.IsError || !strings.Contains(text(res), "nothing to roll back") {
		t.Fatalf("rollback before any call: isError=%v %s", res.IsError, text(res))
	}

	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"filesystem__write_file", map[string]any{"path": filepath.Join(n.sandbox, "new.md"), "content": "new"}},
		{"filesystem__write_file", map[string]any{"path": filepath.Join(n.sandbox, "notes.txt"), "content": "changed"}},
		{"memory__create_entities", map[string]any{"entities": []any{map[string]any{"name": "bob", "entityType": "person", "observations": []any{}}}}},
		{"memory__read_graph", map[string]any{}}, // nothing to undo
	} {
		if res := call(t, cs, c.tool, c.args, ""); res.IsError {
			t.Fatalf("%s: %s", c.tool, text(res))
		}
	}
	if b, _ := os.ReadFile(filepath.Join(n.sandbox, "notes.txt")); string(b) != "changed" {
		t.Fatalf("notes.txt = %q before the rollback", b)
	}

	var wg sync.WaitGroup
	results := make([]api.RollbackResult, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := call(t, cs, gateway.ToolRollback, map[string]any{"reason": "test"}, "")
			if res.IsError {
				t.Errorf("rollback %d: %s", i, text(res))
				return
			}
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &results[i])
		}()
	}
	wg.Wait()
	joined := 0
	for _, r := range results {
		if r.State != api.StateRolledBack || len(r.Compensated) != 3 {
			t.Errorf("rollback result %+v, want rolled_back with 3 compensations", r)
		}
		if r.Joined {
			joined++
		}
	}
	if joined != 1 {
		t.Errorf("%d of 2 concurrent rollbacks joined the other; want exactly 1", joined)
	}
	if st := status(t, n.stack, "agent-rollback"); len(st.Undone) != 3 || len(st.Compensations) != 0 || st.Rollbacks != 1 {
		t.Errorf("task status: %d undone, %d pending, %d rollbacks; want 3, 0, 1", len(st.Undone), len(st.Compensations), st.Rollbacks)
	}
	n.assertUnchanged(t, files, graph)

	// A third request finds nothing to do; the task goes on.
	res := call(t, cs, gateway.ToolRollback, map[string]any{}, "")
	if res.IsError || !strings.Contains(text(res), "nothing to roll back") {
		t.Fatalf("rollback again: %s", text(res))
	}
	if res := call(t, cs, "memory__read_graph", map[string]any{}, ""); res.IsError {
		t.Fatalf("the task should take calls after a rollback: %s", text(res))
	}
}

// TestPlanDenialRollsBack: a plan with rollback_on_deny whose third step a
// policy rule denies is rolled back; the denied step never runs.
func TestPlanDenialRollsBack(t *testing.T) {
	t.Parallel()
	n := newNPMStack(t, stackOptions{policy: &policy.Config{Rules: []policy.Rule{{
		Name: "no-moves", When: `tool.name == "filesystem__move_file"`, Effect: api.Deny,
		Reason: "moves are off limits in this test"}}}})
	files, graph := n.snapshot(t)
	run := n.startPlan(t, `name: denied
rollback_on_deny: true
steps:
  - id: draft
    tool: filesystem__write_file
    args: {path: `+filepath.Join(n.sandbox, "draft.md")+`, content: "draft"}
  - id: who
    tool: memory__create_entities
    args: {entities: [{name: carol, entityType: person, observations: []}]}
  - id: publish
    tool: filesystem__move_file
    args: {source: `+filepath.Join(n.sandbox, "draft.md")+`, destination: `+filepath.Join(n.sandbox, "final.md")+`}
  - id: never
    tool: memory__read_graph
`, "plan-denied")
	res := planResult(t, run)
	if res.State != api.StateRolledBack {
		t.Fatalf("plan ended %s, want rolled_back", res.State)
	}
	st := status(t, n.stack, "plan-denied")
	if s := st.Plan.Steps[2]; s.State != api.StepDenied || !strings.Contains(s.Reason, "no-moves") || !strings.Contains(s.Reason, "rolled back") {
		t.Errorf("step publish = %+v", s)
	}
	if s := st.Plan.Steps[3]; s.State != api.StepPending {
		t.Errorf("step never = %+v, want it not run", s)
	}
	if len(st.Undone) != 2 {
		t.Errorf("undone %+v, want the two steps before the denial", st.Undone)
	}
	n.assertUnchanged(t, files, graph)
}

// TestCompensationFailsForGood: a compensation that keeps failing leaves
// the task in rollback_failed, tells the approver group in Slack what
// remains undone, refuses new calls, and the task can still be finished,
// its result listing what was not undone.
func TestCompensationFailsForGood(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, `  append:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: false
    compensation: {tool: fail, args: {text: '"undo " + args.key'}}
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true,
        compensation: {tool: put, args: {key: '"undo-" + args.key'}}}
  fail: {side_effects: [none], data_access_level: public, risk: low, idempotent: true, retry: {max_attempts: 2, initial_interval: 10ms}}
`)
	fake := newFakeSlackAPI(t)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, rollbackNotify: "ops", groups: map[string][]string{"ops": {"olivia"}},
		notifiers: []activities.Notifier{slack.NewNotifier(fake.client(), map[string]string{"ops": "C0OPS"})}})
	cs := s.connect(t, map[string]string{gateway.HeaderTask: "doomed"})
	waitTools(t, cs, "counter__append", "counter__put")
	for _, c := range []struct{ tool, key string }{{"counter__put", "p1"}, {"counter__append", "a1"}} {
		if res := call(t, cs, c.tool, map[string]any{"key": c.key}, ""); res.IsError {
			t.Fatalf("%s: %s", c.tool, text(res))
		}
	}
	res := call(t, cs, gateway.ToolRollback, map[string]any{}, "")
	if !res.IsError || !strings.Contains(text(res), "ROLLBACK FAILED") || !strings.Contains(text(res), "the disk is full") {
		t.Fatalf("rollback: isError=%v %s", res.IsError, text(res))
	}
	// The top entry failed, so the one below it was not attempted.
	if n := countEffects(t, effects, "put", "undo-p1"); n != 0 {
		t.Errorf("put undo-p1 ran %d times; the rollback should stop at the failed compensation", n)
	}
	post := fake.waitCall(t, "chat.postMessage", "the rollback failure alert", func(c slackAPICall) bool {
		return c.Form.Get("channel") == "C0OPS" && strings.Contains(c.Form.Get("text"), "Rollback failed")
	})
	if shown := post.shown(t); !strings.Contains(shown, "doomed") || !strings.Contains(shown, "counter__append") || !strings.Contains(shown, "airlock tasks rollback doomed") {
		t.Errorf("alert shows:\n%s", shown)
	}
	if st := status(t, s, "doomed"); st.State != api.StateRollbackFailed || len(st.Compensations) != 2 {
		t.Fatalf("task state %s with %d pending entries, want rollback_failed with 2", st.State, len(st.Compensations))
	}
	if res := call(t, cs, "counter__put", map[string]any{"key": "p2"}, ""); !res.IsError || !strings.Contains(text(res), "rolled back completely") {
		t.Fatalf("a call after the failed rollback: %s", text(res))
	}
	if err := s.client.SignalWorkflow(context.Background(), "doomed", "", api.SignalFinish, nil); err != nil {
		t.Fatal(err)
	}
	var out api.TaskResult
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.client.GetWorkflow(ctx, "doomed", "").Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.State != api.StateRollbackFailed || len(out.Undone) != 2 || out.Undone[0].State != api.CompensationFailed {
		t.Fatalf("task result %+v", out)
	}
}

// TestLargePreImageStaysOutOfHistory: overwriting a 400 KB file captures
// its content into the worker's blob store, not the task's history, and a
// rollback still restores it exactly.
func TestLargePreImageStaysOutOfHistory(t *testing.T) {
	t.Parallel()
	n := newNPMStack(t, stackOptions{})
	big := strings.Repeat("the original line of a big file\n", 13000) // ~400 KB
	path := filepath.Join(n.sandbox, "big.txt")
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	cs := n.connect(t, map[string]string{gateway.HeaderTask: "big-file"})
	waitTools(t, cs, "filesystem__write_file")
	if res := call(t, cs, "filesystem__write_file", map[string]any{"path": path, "content": "small now"}, ""); res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	hist := fetchHistory(t, n.client, "big-file", "")
	size := 0
	for _, ev := range hist.Events {
		size += proto.Size(ev)
	}
	if size > 100<<10 {
		t.Errorf("the task's history is %d bytes: the 400 KB pre-image went into it", size)
	}
	st := status(t, n.stack, "big-file")
	if len(st.Compensations) != 1 || st.Compensations[0].Compensation == nil || !strings.HasPrefix(st.Compensations[0].Compensation.ArgumentsRef, "sha256:") {
		t.Fatalf("compensations %+v: want one compensation whose arguments are in the blob store", st.Compensations)
	}
	if res := call(t, cs, gateway.ToolRollback, map[string]any{}, ""); res.IsError {
		t.Fatalf("rollback: %s", text(res))
	}
	if b, _ := os.ReadFile(path); string(b) != big {
		t.Fatalf("big.txt after the rollback: %d bytes, want the original %d", len(b), len(big))
	}
}
