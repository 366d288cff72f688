package plans_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/internal/expr"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
	"github.com/airlock-run/airlock/wasm/program/engine"
	"github.com/airlock-run/airlock/wasm/program/wire"
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

// exampleHost answers the index-sandbox program's calls as the npm
// filesystem server would, and records them.
type exampleHost struct {
	calls   []string
	replies []wire.Reply
}

func (h *exampleHost) Start(m wire.GuestMessage) {
	h.calls = append(h.calls, m.Tool+" "+string(m.Args))
	text := map[string]string{
		"filesystem__list_allowed_directories": "Allowed directories:\n/d/sandbox\n/d/rollback-trash",
		"filesystem__list_directory":           "[FILE] b.md\n[DIR] sub\n[FILE] a.txt\n[FILE] INDEX.md",
		"filesystem__write_file":               "Successfully wrote to /d/sandbox/INDEX.md",
	}[m.Tool]
	v, _ := json.Marshal(text)
	h.replies = append(h.replies, wire.Reply{ID: m.ID, Outcome: "ok", Result: v})
}

func (h *exampleHost) Wait() wire.Reply {
	r := h.replies[0]
	h.replies = h.replies[1:]
	return r
}

// The index-sandbox plan's program runs in the real interpreter.
func TestIndexSandboxProgram(t *testing.T) {
	p, err := plans.Load("examples/index-sandbox.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tools []wire.Tool
	for _, name := range []string{"filesystem__list_allowed_directories", "filesystem__list_directory", "filesystem__write_file"} {
		_, fn, _ := strings.Cut(name, "__")
		tools = append(tools, wire.Tool{Name: name, Module: "filesystem", Function: fn})
	}
	h := &exampleHost{}
	done := engine.Run(wire.Request{ProgramID: "step-index", Source: p.Steps[0].Program, Tools: tools,
		Limits: wire.Limits{MaxResultBytes: 1 << 16, MaxPrintBytes: 1 << 14, MaxSteps: 1e6, MaxStepsBetweenCalls: 1e5, MaxParallel: 4}}, h)
	if done.Outcome != wire.OutcomeOK || string(done.Result) != `{"files":2}` {
		t.Fatalf("program ended %+v", done)
	}
	want := []string{
		"filesystem__list_allowed_directories {}",
		`filesystem__list_directory {"path":"/d/sandbox"}`,
		`filesystem__write_file {"path":"/d/sandbox/INDEX.md","content":"# Index of /d/sandbox\n\n- a.txt\n- b.md\n"}`,
	}
	if diff := cmp.Diff(want, h.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}
