package integration

import (
	"context"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
	"github.com/airlock-run/airlock/workflows"
)

// TestRecordPlanProgramHistory records a plan with program steps
// (changePlanProgram) on the real server and worker, whose PrepareStep
// builds each program's tool table from the manifests and the policy: a
// tool step; an atomic program that writes and reads in parallel and ends
// ok; an atomic program that writes and fails, whose write is undone and
// whose on_failure continue lets the plan go on; a last step that reads
// the first program's outcome. The programs are in the Starlark subset
// testenv.ScriptRunner plays, so the history replays with it (and with the
// real interpreter). With -record it writes plan_program_v1_run1.json.
func TestRecordPlanProgramHistory(t *testing.T) {
	m, effects := counterManifest(t, `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  put:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: true
    compensation: {tool: put, args: {key: '"undo-" + args.key'}}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	waitTools(t, s.connect(t, nil), "counter__echo", "counter__put")
	workflows.UseProgramRunner(&testenv.ScriptRunner{})
	t.Cleanup(func() { workflows.UseProgramRunner(nil) })

	p, err := plans.Parse(filepath.Join(t.TempDir(), "plan.yaml"), []byte(`name: programs
steps:
  - {id: one, tool: counter__put, args: {key: p1}}
  - id: prog
    atomic: true
    limits: {max_calls: 10, timeout: 10m}
    program: |
      counter.put(key="p2")
      parallel(lambda: counter.echo(text="a"), lambda: counter.echo(text="b"))
  - id: bad
    atomic: true
    on_failure: continue
    program: |
      counter.put(key="p3")
      fail("boom")
  - {id: last, tool: counter__echo, when: 'steps.prog.outcome == "ok"', args: {text: done}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if probs := p.Validate([]string{"counter__echo", "counter__put"}); probs != nil {
		t.Fatal(manifests.Problems(probs))
	}
	in := api.PlanInput{TaskID: "plan-program", Principal: "tester", Plan: p,
		Identity: &api.Identity{Name: "tester", Permissions: []string{"*"}, DataLevel: string(manifests.DataRestricted), AllowTools: []string{"*"}},
		Limits:   api.Limits{MaxCalls: 50}}
	run, err := s.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: in.TaskID, TaskQueue: api.DefaultTaskQueue}, api.PlanName, in)
	if err != nil {
		t.Fatal(err)
	}
	if res := planResult(t, run); res.State != api.StateCompleted || res.Calls != 6 {
		t.Fatalf("plan ended %+v, want completed after 6 calls", res)
	}
	st := status(t, s, in.TaskID)
	prog, bad := st.Plan.Steps[1], st.Plan.Steps[2]
	if prog.State != api.StepOK || prog.Program == nil || prog.Program.Outcome != api.ProgramOK || len(prog.Program.Calls) != 3 {
		t.Errorf("step prog: %+v, program %+v", prog, prog.Program)
	}
	if bad.State != api.StepFailed || bad.Program == nil || bad.Program.Outcome != api.ProgramError ||
		len(bad.Program.RolledBack) != 1 || bad.Program.RolledBack[0] != "step-bad/1" {
		t.Errorf("step bad: %+v, program %+v", bad, bad.Program)
	}
	if st.Plan.Steps[3].State != api.StepOK {
		t.Errorf("step last: %+v", st.Plan.Steps[3])
	}
	for key, want := range map[string]int{"p1": 1, "p2": 1, "p3": 1, "undo-p3": 1, "undo-p2": 0, "undo-p1": 0} {
		if n := countEffects(t, effects, "put", key); n != want {
			t.Errorf("put %s ran %d times, want %d", key, n, want)
		}
	}
	replayClientRuns(t, s.client, in.TaskID, run.GetRunID(), "plan_program_v1")
}
