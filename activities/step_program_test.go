package activities

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
)

// TestPrepareProgramStep: a program step's request holds the tools the
// principal may use (not a restricted one it may not), the state tools,
// names a program can write (a keyword suffixed, a colliding name left
// out), the step's limits over the defaults, and its atomic flag.
func TestPrepareProgramStep(t *testing.T) {
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "fs.yaml"), []byte(`server:
  name: my-fs
  stdio: {command: /bin/true}
tools:
  read: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
  secret: {side_effects: [read], data_access_level: restricted, risk: low, idempotent: true}
  pass: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
  get-item: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
  get_item: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Compile(policy.Config{ApprovalGroup: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	a := &Activities{Policy: pol, Catalog: NewCatalog([]*manifests.Manifest{m}, nil, nil, false)}
	step := plans.Step{ID: "sync", Program: "result = 1", Atomic: true, Limits: &plans.ProgramLimits{MaxCalls: 7}}
	in := api.StepInput{TaskID: "t1", Plan: "p", Step: step, AllowTools: []string{"*"},
		Principal: &api.Principal{Name: "alice", Permissions: []string{"*"}, DataLevel: manifests.DataInternal}}
	out, err := a.PrepareStep(context.Background(), in)
	if err != nil || out.Error != "" || out.Program == nil {
		t.Fatalf("PrepareStep = %+v, %v", out, err)
	}
	req := out.Program
	var names []string
	for _, tl := range req.Tools {
		names = append(names, tl.Name+"="+tl.Module+"."+tl.Function+"@"+tl.Server+"/"+tl.UpstreamTool)
	}
	want := []string{
		"airlock_state_delete=tools.airlock_state_delete@airlock/state_delete",
		"airlock_state_get=tools.airlock_state_get@airlock/state_get",
		"airlock_state_set=tools.airlock_state_set@airlock/state_set",
		"my-fs__get-item=my_fs.get_item@my-fs/get-item",
		"my-fs__get_item=my_fs.get_item_2@my-fs/get_item", // the same function as get-item's: named apart, as the gateway names it
		"my-fs__pass=my_fs.pass_@my-fs/pass",
		"my-fs__read=my_fs.read@my-fs/read",
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("tool table (-want +got):\n%s", diff)
	}
	if req.ProgramID != "step-sync" || req.Principal != "alice" || !req.Atomic || req.Source != "result = 1" ||
		req.Limits.MaxCalls != 7 || req.Limits.MaxSteps != api.DefaultProgramLimits.MaxSteps {
		t.Errorf("request %+v", req)
	}
	if got := string(req.Inputs); got != `{"steps":{},"task":{"id":"t1","plan":"p"},"vars":{}}` {
		t.Errorf("inputs %s: want the step's vars, the earlier steps and the task", got)
	}
	if diff := cmp.Diff(api.SpecFor(m.Tools["read"]), req.Tools[6].Spec); diff != "" {
		t.Errorf("read's spec (-want +got):\n%s", diff)
	}

	// when false skips it; a program_file that was not read fails it.
	in.Step.When = "false"
	if out, _ := a.PrepareStep(context.Background(), in); !out.Skip || out.Program != nil {
		t.Errorf("when false: %+v", out)
	}
	in.Step = plans.Step{ID: "x", ProgramFile: "x.star"}
	if out, _ := a.PrepareStep(context.Background(), in); out.Program != nil || !strings.Contains(out.Error, "x.star was not read") {
		t.Errorf("unread program_file: %+v", out)
	}
}
