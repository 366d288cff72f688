package plans_test

import (
	"path/filepath"
	"testing"

	"github.com/airlock-run/airlock/internal/expr"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
)

// exampleTools are the exposed names of the example manifests' tools.
func exampleTools(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob("../manifests/examples/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example manifests: %v", err)
	}
	ms, err := manifests.LoadFiles(paths)
	if err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, m := range ms {
		for name := range m.Tools {
			tools = append(tools, m.Exposed(name))
		}
	}
	return tools
}

func TestExamplesValidate(t *testing.T) {
	paths, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example plans: %v", err)
	}
	tools := exampleTools(t)
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			p, err := plans.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if ps := p.Validate(tools); len(ps) > 0 {
				t.Fatalf("problems:\n%v", manifests.Problems(ps))
			}
		})
	}
}

// The seed-project plan's arguments, evaluated over results shaped like
// the servers' (list_allowed_directories' text, write_file's message).
func TestSeedProjectArgs(t *testing.T) {
	p, err := plans.Load("examples/seed-project.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := func(s string) any {
		return map[string]any{"content": s}
	}
	vars, err := p.ResolveVars(map[string]string{"owner": ""})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]any{
		"vars": vars,
		"task": expr.Task{ID: "t1", Plan: p.Name},
		"steps": map[string]any{
			"where":        map[string]any{"outcome": "ok", "result": text("Allowed directories:\n/d/sandbox\n/d/rollback-trash")},
			"write_readme": map[string]any{"outcome": "ok", "result": text("Successfully wrote to /d/sandbox/demo/README.md")},
		},
	}
	want := map[string]string{
		"make_dir":           `{"path":"/d/sandbox/demo"}`,
		"write_readme":       `{"content":"# demo\n\nSeeded by the airlock plan seed-project (task t1).\n","path":"/d/sandbox/demo/README.md"}`,
		"write_project_file": `{"content":"{\"name\":\"demo\",\"owner\":\"\"}\n","path":"/d/sandbox/demo/project.json"}`,
		"remember_project":   `{"entities":[{"entityType":"project","name":"demo","observations":["lives in /d/sandbox/demo","seeded by task t1"]}]}`,
		"note_readme":        `{"observations":[{"contents":["Successfully wrote to /d/sandbox/demo/README.md"],"entityName":"demo"}]}`,
	}
	for i, s := range p.Steps {
		if s.ID == "remember_owner" {
			if ok, err := p.StepWhen(i, env); err != nil || ok {
				t.Errorf("remember_owner runs without an owner: %v, %v", ok, err)
			}
		}
		w, ok := want[s.ID]
		if !ok {
			continue
		}
		args, err := p.StepArgs(i, env)
		if err != nil {
			t.Errorf("%s: %v", s.ID, err)
			continue
		}
		if string(args) != w {
			t.Errorf("%s: args = %s\nwant %s", s.ID, args, w)
		}
	}
}
