package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/program"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
	"github.com/airlock-run/airlock/wasm"
	"github.com/airlock-run/airlock/worker"
)

// Code mode end to end (issue 27): programs sent to airlock_run_program
// through the gateway, run by the real interpreter (the wazero guest,
// wasm.Program) inside the agent task, every call through the pipeline to
// real upstreams.

// programs is the package's one program interpreter: compiling the guest
// takes seconds, so every stack with programs shares it (as every task of
// a worker does).
var programs struct {
	once sync.Once
	rt   *program.Runtime
	err  error
}

func programRuntime(t testing.TB) *program.Runtime {
	t.Helper()
	programs.once.Do(func() {
		dir, err := testenv.WazeroCache()
		if err != nil {
			programs.err = err
			return
		}
		rt, err := program.New(context.Background(), program.Options{CacheDir: dir, Module: wasm.Program})
		if err != nil {
			programs.err = err
			return
		}
		programs.rt, programs.err = rt, rt.Ready(context.Background())
	})
	if programs.err != nil {
		t.Fatalf("the program interpreter: %v", programs.err)
	}
	return programs.rt
}

// runProgram calls airlock_run_program; key "" sends none.
func runProgram(t testing.TB, cs *mcp.ClientSession, source string, atomic bool, key string) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	args := map[string]any{"source": source}
	if atomic {
		args["atomic"] = true
	}
	if key != "" {
		args["key"] = key
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: gateway.ToolRunProgram, Arguments: args})
	if err != nil {
		t.Fatalf("airlock_run_program: %v", err)
	}
	sc, _ := res.StructuredContent.(map[string]any)
	return res, sc
}

// fsProgramStack is a stack over the npm filesystem server, with the
// example policy (no-env-files) and code mode on.
func fsProgramStack(t *testing.T) (sandbox, trash string, cs *mcp.ClientSession, st *stack) {
	t.Helper()
	var err error
	if sandbox, err = filepath.EvalSymlinks(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if trash, err = filepath.EvalSymlinks(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	fsm := loadExample(t, "filesystem.yaml", "server-filesystem", []string{sandbox, trash}, nil)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{fsm}, policy: &policy.Config{Rules: exampleRules(t)},
		programs: &gateway.ProgramOptions{}})
	cs = s.connect(t, nil)
	waitTools(t, cs, "filesystem__write_file", gateway.ToolRunProgram)
	return sandbox, trash, cs, s
}

// TestProgramOnNPMFilesystem: a program with a loop, a condition,
// parallel reads, a denied call caught by attempt, print and a returned
// value runs on the real filesystem server; only its result comes back;
// its writes are on disk and the denied one is not.
func TestProgramOnNPMFilesystem(t *testing.T) {
	t.Parallel()
	sandbox, _, cs, _ := fsProgramStack(t)
	src := fmt.Sprintf(`dir = %q

def main():
    names = []
    for i in range(6):
        p = dir + "/note%%d.txt" %% i
        fruit = "apple" if i %% 2 == 0 else "pear"
        filesystem.write_file(path=p, content="note %%d mentions %%s" %% (i, fruit))
        names.append(p)
    texts = parallel([lambda p=p: filesystem.read_text_file(path=p) for p in names])
    keep = [names[i] for i, t in enumerate(texts) if "apple" in str(t)]
    r = attempt(filesystem.write_file, path=dir + "/x.env", content="SECRET=1")
    print("kept", len(keep), "of", len(names))
    return {"kept": keep, "env": r.outcome, "why": r.error}
`, sandbox)
	okBefore := testutil.ToFloat64(metrics.Programs.WithLabelValues("ok"))
	res, sc := runProgram(t, cs, src, false, "")
	if res.IsError || sc["outcome"] != "ok" {
		t.Fatalf("program: isError=%v %s", res.IsError, text(res))
	}
	if testutil.ToFloat64(metrics.Programs.WithLabelValues("ok")) <= okBefore {
		t.Error("airlock_programs_total{outcome=\"ok\"} did not count the program")
	}
	got := mustJSON(t, sc["result"])
	for i := 0; i < 6; i += 2 {
		if !strings.Contains(got, fmt.Sprintf("note%d.txt", i)) || strings.Contains(got, fmt.Sprintf("note%d.txt", i+1)) {
			t.Errorf("result %s: want the even notes only", got)
		}
	}
	if !strings.Contains(got, `"env":"denied"`) || !strings.Contains(got, ".env files hold secrets") {
		t.Errorf("result %s: want the .env write denied by no-env-files, as a value", got)
	}
	if out, _ := sc["output"].(string); !strings.Contains(out, "kept 3 of 6") {
		t.Errorf("output %q", out)
	}
	if calls, _ := sc["calls"].([]any); len(calls) != 13 {
		t.Errorf("calls %d, want 13 (6 writes, 6 reads, 1 denied): %v", len(calls), sc["calls"])
	}
	for i := 0; i < 6; i++ {
		if _, err := os.Stat(filepath.Join(sandbox, fmt.Sprintf("note%d.txt", i))); err != nil {
			t.Errorf("note%d.txt: %v", i, err)
		}
	}
	if _, err := os.Stat(filepath.Join(sandbox, "x.env")); !os.IsNotExist(err) {
		t.Errorf("x.env exists (err %v): a denied call ran", err)
	}
}

// TestProgramDeniedMidway: an uncaught denial ends the program with an
// error naming the line and the reason; the call before it ran, nothing
// after it did.
func TestProgramDeniedMidway(t *testing.T) {
	t.Parallel()
	sandbox, _, cs, _ := fsProgramStack(t)
	src := fmt.Sprintf(`d = %q
filesystem.write_file(path=d + "/a.txt", content="a")
filesystem.write_file(path=d + "/b.env", content="b")
filesystem.write_file(path=d + "/c.txt", content="c")
`, sandbox)
	res, sc := runProgram(t, cs, src, false, "")
	if !res.IsError || sc["outcome"] != "error" {
		t.Fatalf("program: isError=%v %s; want it failed", res.IsError, text(res))
	}
	if line, _ := sc["line"].(float64); line != 3 {
		t.Errorf("line %v, want 3: %s", sc["line"], text(res))
	}
	if !strings.Contains(text(res), "denied") || !strings.Contains(text(res), ".env files hold secrets") {
		t.Errorf("error %q: want the denial and its reason", text(res))
	}
	if _, err := os.Stat(filepath.Join(sandbox, "a.txt")); err != nil {
		t.Errorf("a.txt: %v", err)
	}
	for _, f := range []string{"b.env", "c.txt"} {
		if _, err := os.Stat(filepath.Join(sandbox, f)); !os.IsNotExist(err) {
			t.Errorf("%s exists (err %v)", f, err)
		}
	}
}

// TestProgramAtomicRollback: an atomic program that fails after two
// writes rolls its own writes back, newest first (the example's
// compensation moves a created file into the trash); a write the task
// made before the program stays.
func TestProgramAtomicRollback(t *testing.T) {
	t.Parallel()
	sandbox, trash, cs, _ := fsProgramStack(t)
	before := filepath.Join(sandbox, "before.txt")
	if res := call(t, cs, "filesystem__write_file", map[string]any{"path": before, "content": "kept"}, ""); res.IsError {
		t.Fatalf("direct write: %s", text(res))
	}
	src := fmt.Sprintf(`d = %q
filesystem.write_file(path=d + "/one.txt", content="1")
filesystem.write_file(path=d + "/two.txt", content="2")
fail("changed my mind")
`, sandbox)
	res, sc := runProgram(t, cs, src, true, "atomic-1")
	if !res.IsError || sc["outcome"] != "error" || !strings.Contains(text(res), "changed my mind") {
		t.Fatalf("program: isError=%v %s", res.IsError, text(res))
	}
	rb, _ := sc["rolledBack"].([]any)
	if len(rb) != 2 || !strings.HasSuffix(fmt.Sprint(rb[0]), "/2") || !strings.HasSuffix(fmt.Sprint(rb[1]), "/1") {
		t.Errorf("rolledBack %v, want the program's two calls, newest first", rb)
	}
	for _, f := range []string{"one.txt", "two.txt"} {
		if _, err := os.Stat(filepath.Join(sandbox, f)); !os.IsNotExist(err) {
			t.Errorf("%s is still in the sandbox (err %v)", f, err)
		}
	}
	if entries, _ := os.ReadDir(trash); len(entries) != 2 {
		t.Errorf("trash holds %d entries, want the 2 rolled-back files", len(entries))
	}
	if _, err := os.Stat(before); err != nil {
		t.Errorf("the task's own earlier write was rolled back: %v", err)
	}
}

// TestProgramBombsLeaveTheWorkerAlone: a memory bomb and an endless loop
// end with a limit (the guest's memory cap, the step limit); the same task
// then runs a program and a direct call as before, and its history, bombs
// included, replays on the interpreter without a difference.
func TestProgramBombsLeaveTheWorkerAlone(t *testing.T) {
	t.Parallel()
	sandbox, _, cs, s := fsProgramStack(t)
	for _, c := range []struct{ src, want string }{
		{"x = [0] * 100000000\n", "memory"},
		{"s = 'ab'\nfor i in range(40):\n    s = s + s\n", "memory"},
		{"while True:\n    pass\n", "steps without calling a tool"},
	} {
		res, sc := runProgram(t, cs, c.src, false, "")
		if !res.IsError || sc["outcome"] != "limit" || !strings.Contains(text(res), c.want) {
			t.Errorf("%q: isError=%v outcome %v %q; want a limit saying %q", c.src, res.IsError, sc["outcome"], text(res), c.want)
		}
	}
	res, sc := runProgram(t, cs, fmt.Sprintf("filesystem.write_file(path=%q, content='ok')\nresult = 42\n", filepath.Join(sandbox, "after.txt")), false, "")
	if res.IsError || mustJSON(t, sc["result"]) != "42" {
		t.Fatalf("a program after the bombs: %s", text(res))
	}
	if res := call(t, cs, "filesystem__read_text_file", map[string]any{"path": filepath.Join(sandbox, "after.txt")}, ""); res.IsError || !strings.Contains(text(res), "ok") {
		t.Fatalf("a direct call after the bombs: %s", text(res))
	}
	task, _ := res.Meta[gateway.MetaTask].(string)
	replayer := sdkworker.NewWorkflowReplayer()
	worker.RegisterWorkflows(replayer)
	if err := replayer.ReplayWorkflowHistory(nil, fetchHistory(t, s.client, task, "")); err != nil {
		t.Fatalf("replaying the task's history (the bombs, then a program): %v", err)
	}
}

// TestProgramCancelledByClient: the client's notifications/cancelled for
// a waiting airlock_run_program stops the program in its task: its call
// waiting for approval is withdrawn, the tool never runs, and the program
// ends "stopped", saying why (its retry by key answers so).
func TestProgramCancelledByClient(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, appendNeedsOps)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, groups: map[string][]string{"ops": {"bob"}},
		inlineWait: time.Minute, programs: &gateway.ProgramOptions{}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__append", gateway.ToolRunProgram)
	task, _ := cs.InitializeResult().Meta[gateway.MetaTask].(string)
	const src = "counter.append(key=\"k1\")\n"

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: gateway.ToolRunProgram, Arguments: map[string]any{"source": src, "key": "cancel-prog"}})
		done <- err
	}()
	reqID := api.RequestID(task, api.ProgramCallID("prog-k-cancel-prog", 1))
	bg := context.Background()
	waitFor(t, "the program's call to wait for approval", 30*time.Second, func() bool {
		ar, err := approver.Lookup(bg, s.client, reqID)
		return err == nil && ar.State == api.ApprovalPending
	})
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled airlock_run_program returned no error to its client")
	}
	waitFor(t, "the request withdrawn", 30*time.Second, func() bool {
		ar, err := approver.Lookup(bg, s.client, reqID)
		return err == nil && ar.State == api.ApprovalWithdrawn
	})
	res, sc := runProgram(t, cs, src, false, "cancel-prog")
	if sc["outcome"] != "stopped" || !strings.Contains(text(res), "notifications/cancelled") {
		t.Errorf("the cancelled program's retry: outcome %v %q; want it stopped by the client", sc["outcome"], text(res))
	}
	if b, _ := os.ReadFile(effects); strings.Contains(string(b), "append k1") {
		t.Errorf("the program's tool ran although it was cancelled: %s", b)
	}
}

// TestPlanProgramReadsInputs: a plan's program step reads the plan's vars
// and the earlier steps' outcomes and results as the global inputs, on
// the real interpreter, and calls a tool with them.
func TestPlanProgramReadsInputs(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, programs: &gateway.ProgramOptions{}})
	waitTools(t, s.connect(t, nil), "counter__echo", "counter__put")
	p, err := plans.Parse(filepath.Join(t.TempDir(), "plan.yaml"), []byte(`name: inputs
vars: {who: ada}
steps:
  - {id: one, tool: counter__echo, args: {text: hello}}
  - id: prog
    program: |
      who = inputs["vars"]["who"]
      one = inputs["steps"]["one"]
      counter.put(key=who + "-" + one["outcome"])
      result = {"who": who, "task": inputs["task"]["id"], "echoed": str(one["result"])}
`))
	if err != nil {
		t.Fatal(err)
	}
	if probs := p.Validate([]string{"counter__echo", "counter__put"}); probs != nil {
		t.Fatal(manifests.Problems(probs))
	}
	in := api.PlanInput{TaskID: "plan-inputs", Principal: "tester", Plan: p, Vars: p.Vars,
		Identity: &api.Identity{Name: "tester", Permissions: []string{"*"}, DataLevel: string(manifests.DataRestricted), AllowTools: []string{"*"}},
		Limits:   api.Limits{MaxCalls: 10}}
	run, err := s.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: in.TaskID, TaskQueue: api.DefaultTaskQueue}, api.PlanName, in)
	if err != nil {
		t.Fatal(err)
	}
	if res := planResult(t, run); res.State != api.StateCompleted {
		t.Fatalf("plan ended %+v", res)
	}
	prog := status(t, s, in.TaskID).Plan.Steps[1]
	if prog.Program == nil || prog.Program.Outcome != api.ProgramOK {
		t.Fatalf("program step: %+v, program %+v", prog, prog.Program)
	}
	got := string(prog.Program.Result)
	for _, want := range []string{`"who":"ada"`, `"task":"plan-inputs"`, `hello`} {
		if !strings.Contains(got, want) {
			t.Errorf("program result %s: want %s", got, want)
		}
	}
	if n := countEffects(t, effects, "put", "ada-ok"); n != 1 {
		t.Errorf("put ada-ok ran %d times, want 1", n)
	}
}
