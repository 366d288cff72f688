package plans_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
)

// loadIn writes the plan and files into a fresh directory and loads it.
func loadIn(t *testing.T, src string, files map[string]string) (*plans.Plan, []string, string) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := plans.Load(file)
	if err == nil {
		return p, nil, dir
	}
	var ps manifests.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Load: %v (not Problems)", err)
	}
	var out []string
	for _, pr := range ps {
		out = append(out, strings.ReplaceAll(pr.Error(), dir+string(filepath.Separator), ""))
	}
	return nil, out, dir
}

func TestProgramStepLoads(t *testing.T) {
	src := "name: p\nsteps:\n  - id: inline\n    program: |\n      result = fs.read(path = \"/x\")\n    atomic: true\n    limits: {max_calls: 3, memory_mb: 32, timeout: 5m}\n" +
		"  - id: file\n    program_file: progs/two.star\n    when: steps.inline.outcome == \"ok\"\n"
	p, probs, _ := loadIn(t, src, map[string]string{"progs/two.star": "result = 2\n"})
	if probs != nil {
		t.Fatalf("problems: %v", probs)
	}
	if !p.Steps[0].IsProgram() || !p.Steps[0].Atomic || p.Steps[0].Limits.MaxCalls != 3 || p.Steps[0].Limits.Timeout.D().Minutes() != 5 {
		t.Errorf("step 0 = %+v", p.Steps[0])
	}
	if got := p.Steps[1].Program; got != "result = 2\n" {
		t.Errorf("program_file read as %q", got)
	}
	if p.Steps[1].ProgramFile != "progs/two.star" {
		t.Errorf("ProgramFile = %q", p.Steps[1].ProgramFile)
	}
}

func TestProgramStepProblems(t *testing.T) {
	big := strings.Repeat("x = 1\n", plans.DefaultMaxSourceBytes/6+1)
	tests := []struct {
		name  string
		src   string
		files map[string]string
		want  []string
	}{
		{
			name: "tool and program",
			src:  "name: p\nsteps:\n  - id: a\n    tool: fs__read\n    program: \"result = 1\"\n",
			want: []string{`plan.yaml:4: steps[0] (a).program: the step has both tool and a program; a step calls one tool or runs one program: remove tool (and args), or the program`},
		},
		{
			name: "program with args",
			src:  "name: p\nsteps:\n  - id: a\n    program: \"result = 1\"\n    args: {x: 1}\n",
			want: []string{`plan.yaml:5: steps[0] (a).args: a program step takes no args; the program passes each tool its arguments (read vars and earlier steps in the program's source, or use a tool step)`},
		},
		{
			name: "program and program_file",
			src:  "name: p\nsteps:\n  - id: a\n    program: \"result = 1\"\n    program_file: a.star\n",
			want: []string{`plan.yaml:4: steps[0] (a).program: the step has both program and program_file; keep one`},
		},
		{
			name:  "empty program",
			src:   "name: p\nsteps:\n  - id: a\n    program: \"  \\n\\t\"\n  - id: b\n    program_file: empty.star\n",
			files: map[string]string{"empty.star": "\n\n"},
			want: []string{
				`plan.yaml:4: steps[0] (a).program: the program is empty; write its Starlark source, e.g. result = fs.read_text_file(path = "/srv/x")`,
				`plan.yaml:6: steps[1] (b).program_file: the program is empty; write its Starlark source, e.g. result = fs.read_text_file(path = "/srv/x")`,
			},
		},
		{
			name: "inline source over the limit",
			src:  "name: p\nsteps:\n  - id: a\n    program: \"" + strings.ReplaceAll(big, "\n", `\n`) + "\"\n  - id: b\n    program: \"x = 12345\"\n    limits: {max_source_bytes: 4}\n",
			want: []string{
				`plan.yaml:4: steps[0] (a).program: the program is 65538 bytes, more than its source limit of 65536 (limits.max_source_bytes); shorten it, split the step, or raise the limit (at most 1048576)`,
				`plan.yaml:6: steps[1] (b).program: the program is 9 bytes, more than its source limit of 4 (limits.max_source_bytes); shorten it, split the step, or raise the limit (at most 1048576)`,
			},
		},
		{
			name:  "file over the limit",
			src:   "name: p\nsteps:\n  - id: a\n    program_file: big.star\n",
			files: map[string]string{"big.star": strings.Repeat(big, 40)},
			want:  []string{`plan.yaml:4: steps[0].program_file: big.star is more than 65536 bytes, the program's source limit (limits.max_source_bytes); shorten the program, split the step, or raise limits.max_source_bytes (at most 1048576)`},
		},
		{
			name: "program_file outside the plan's directory, or missing",
			src: "name: p\nsteps:\n  - id: a\n    program_file: ../x.star\n  - id: b\n    program_file: /etc/passwd\n" +
				"  - id: c\n    program_file: sub/../../x.star\n  - id: d\n    program_file: nope.star\n  - id: e\n    program_file: sub\n",
			files: map[string]string{"sub/ok.star": "result = 1"},
			want: []string{
				`plan.yaml:4: steps[0].program_file: "../x.star" is not inside the plan's directory; put the program next to the plan file (or below it) and name it by a relative path without ..`,
				`plan.yaml:6: steps[1].program_file: "/etc/passwd" is not inside the plan's directory; put the program next to the plan file (or below it) and name it by a relative path without ..`,
				`plan.yaml:8: steps[2].program_file: "sub/../../x.star" is not inside the plan's directory; put the program next to the plan file (or below it) and name it by a relative path without ..`,
				`plan.yaml:10: steps[3].program_file: nope.star does not exist; create it, or fix the path (relative to the plan file's directory, DIR)`,
				`plan.yaml:12: steps[4].program_file: sub is not a regular file; name the program's .star file`,
			},
		},
		{
			name:  "program_file not UTF-8",
			src:   "name: p\nsteps:\n  - id: a\n    program_file: bin.star\n",
			files: map[string]string{"bin.star": "result = \"\xff\xfe\""},
			want:  []string{`plan.yaml:4: steps[0].program_file: bin.star is not UTF-8 text; a program is Starlark source`},
		},
		{
			name: "unknown keys",
			src:  "name: p\nsteps:\n  - id: a\n    progam: \"result = 1\"\n  - id: b\n    program: \"result = 1\"\n    limits: {max_cals: 3}\n",
			want: []string{
				`plan.yaml:3: steps[0] (a).tool: is required; name an exposed tool, "server__tool", e.g. "filesystem__write_file", or give the step a program (program: or program_file:) instead`,
				`plan.yaml:4: steps[0].progam: unknown field; did you mean "program"?`,
				`plan.yaml:7: steps[1].limits.max_cals: unknown field; did you mean "max_calls"?`,
			},
		},
		{
			name: "limits out of range",
			src: "name: p\nsteps:\n  - id: a\n    program: \"result = 1\"\n    limits:\n      max_calls: 0\n      memory_mb: 99999\n      max_steps: -5\n" +
				"      timeout: 0s\n      max_source_bytes: 9999999999\n      max_data_bytes: 9007199254740993\n",
			want: []string{
				`plan.yaml:6: steps[0] (a).limits.max_calls: must be at least 1, got 0; omit it for the default`,
				`plan.yaml:7: steps[0] (a).limits.memory_mb: is 99999, more than the most a plan may set, 1024; lower it`,
				`plan.yaml:8: steps[0] (a).limits.max_steps: must be at least 1, got -5; omit it for the default`,
				`plan.yaml:9: steps[0] (a).limits.timeout: must be positive, got 0s; write how long the program may run, e.g. "10m"`,
				`plan.yaml:10: steps[0] (a).limits.max_source_bytes: is 9999999999, more than the most a plan may set, 1048576; lower it`,
				`plan.yaml:11: steps[0] (a).limits.max_data_bytes: is 9007199254740993, more than the most a plan may set, 67108864; lower it`,
			},
		},
		{
			name: "duplicate keys and a number no int holds",
			src:  "name: p\nsteps:\n  - id: a\n    program: \"result = 1\"\n    program: \"result = 2\"\n  - id: b\n    program: \"result = 1\"\n    limits: {memory_mb: 1e30}\n",
			want: []string{
				"plan.yaml:5: steps[0].program: defined twice (first at line 4); keep one",
				`plan.yaml:8: steps[1].limits.memory_mb: expected a whole number, got "1e30"`,
			},
		},
		{
			name: "atomic and limits on a tool step",
			src:  "name: p\nsteps:\n  - id: a\n    tool: fs__read\n    atomic: true\n    limits: {max_calls: 2}\n",
			want: []string{
				`plan.yaml:5: steps[0] (a).atomic: only a program step may be atomic (one tool call is undone as a whole by rollback); remove atomic, or make the step a program`,
				`plan.yaml:6: steps[0] (a).limits: only a program step takes limits; remove them (the plan's limits bound its task)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got, dir := loadIn(t, tt.src, tt.files)
			for i := range got {
				got[i] = strings.ReplaceAll(got[i], dir, "DIR")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// A symlink inside the plan's directory that leads out of it is refused.
func TestProgramFileSymlinkOut(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret.star")
	if err := os.WriteFile(outside, []byte("result = 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link.star")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(file, []byte("name: p\nsteps:\n  - id: a\n    program_file: link.star\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := plans.Load(file)
	if err == nil || !strings.Contains(err.Error(), `"link.star" leads outside the plan's directory`) || !strings.Contains(err.Error(), "plan.yaml:4") {
		t.Fatalf("Load = %v, want the symlink refused at line 4", err)
	}
}

// A plan that travels as JSON keeps its program (the workflow's input).
func TestProgramStepJSON(t *testing.T) {
	p := &plans.Plan{Name: "p", Steps: []plans.Step{{ID: "a", Program: "result = 1", ProgramFile: "a.star"}}}
	if ps := p.Validate(nil); ps != nil {
		t.Errorf("problems: %v", ps)
	}
	p.Steps[0].Program = ""
	if ps := p.Validate(nil); len(ps) != 1 || !strings.Contains(ps[0].Msg, `"a.star" was not read`) {
		t.Errorf("problems = %v, want the unread program_file", ps)
	}
}
