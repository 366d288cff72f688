package policy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// exampleRules are the policy rules of the repository's airlock.yaml, so
// that the example operators copy is the one tested.
func exampleRules(t *testing.T) []Rule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "airlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Policy struct {
			Rules []Rule `yaml:"rules"`
		} `yaml:"policy"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Policy.Rules
}

// TestExampleNoEnvFilesCoversEveryPathArgument: the example rule
// no-env-files denies a .env named by any path argument of the filesystem
// tools (read_multiple_files' paths, move_file's source and destination),
// not only by args.path, and lets the same calls through without one.
func TestExampleNoEnvFilesCoversEveryPathArgument(t *testing.T) {
	fx := newFS(t)
	root := fx.root
	p := mustCompile(t, Config{Rules: exampleRules(t), File: "airlock.yaml"})
	uncovered := Tool{Name: "other__copy", Server: "other", Upstream: "copy"}
	op := alice()
	op.Permissions, op.DataLevel = []string{"*"}, manifests.DataRestricted
	in := func(tool Tool, a []byte) Input {
		return Input{Principal: op, Tool: tool, Args: a,
			Task: Task{ID: "t1", AllowTools: []string{"filesystem__*", "other__*"}}}
	}
	notes, env := filepath.Join(root, "notes.txt"), filepath.Join(root, "prod.env")
	for _, tc := range []struct {
		name string
		in   Input
		deny bool
	}{
		{"write_file path", in(writeFile(root), args("path", env, "content", "x")), true},
		{"read_multiple_files paths", in(readMultiple(root), args("paths", []string{notes, env})), true},
		{"move_file destination", in(moveFile(root), args("source", notes, "destination", filepath.Join(root, "s8.env"))), true},
		{"move_file source", in(moveFile(root), args("source", env, "destination", filepath.Join(root, "b.txt"))), true},
		{"a tool no manifest covers", in(uncovered, args("source", "/a/b.txt", "destination", "/a/.env")), true},
		{"write_file elsewhere", in(writeFile(root), args("path", notes, "content", "x")), false},
		{"read_multiple_files elsewhere", in(readMultiple(root), args("paths", []string{notes})), false},
		{"move_file elsewhere", in(moveFile(root), args("source", notes, "destination", filepath.Join(root, "b.txt"))), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.in)
			denied := d.Effect == api.Deny && d.Check == api.CheckRule && d.Rule == "no-env-files"
			if denied != tc.deny {
				t.Errorf("decision %+v, want denied by no-env-files: %v", d, tc.deny)
			}
		})
	}
}

// TestPathsFunction: what paths(tool, args) lists, declared path
// arguments first, then the conventional names, each name once; values
// that are not strings give nothing.
func TestPathsFunction(t *testing.T) {
	r := newFS(t).root
	decl := readMultiple(r)
	decl.Decl.PathArgs = []string{"target", "paths"}
	want := `[` + strconv.Quote(r+"/t") + `, ` + strconv.Quote(r+"/a") + `, ` + strconv.Quote(r+"/b") + `, "p", "s"]`
	p := mustCompile(t, Config{Rules: []Rule{{Name: "listed", Effect: api.Deny, When: `paths(tool, args) == ` + want}}})
	d := p.Decide(Input{Principal: alice(), Tool: decl, Task: Task{ID: "t1", AllowTools: []string{"*"}},
		Args: args("target", r+"/t", "paths", []any{r + "/a", r + "/b"}, "path", "p", "source", []any{"s", 3}, "destination", 7, "other", "o")})
	if d.Rule != "listed" {
		t.Errorf("paths(tool, args) is not the expected list: %+v", d)
	}
}

// TestPathsRuleIsBounded: a rule over paths(tool, args) has a static cost
// bound (so it is evaluated without the runtime cost tracker for ordinary
// calls), and that bound holds: within it, the tracked program's cost is
// within the limit and the untracked program decides alike.
func TestPathsRuleIsBounded(t *testing.T) {
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	r, err := compileRule(env, Rule{Name: "r", When: `paths(tool, args).exists(p, p.endsWith(".env"))`, Effect: api.Deny})
	if err != nil {
		t.Fatal(err)
	}
	if r.sizeBound < 1<<12 {
		t.Fatalf("sizeBound = %d, want at least %d", r.sizeBound, 1<<12)
	}
	tool := readMultiple("/r")
	facts := factsOf(tool)
	var within int
	for _, n := range []int{0, 1, 10, 100, 1000, 3000, 20000} {
		for _, elem := range []string{"a", strings.Repeat("x", 50)} {
			l := make([]any, n)
			for i := range l {
				l[i] = elem
			}
			argv := map[string]any{"paths": l, "path": strings.Repeat("p", n), "source": elem}
			raw, _ := json.Marshal(argv)
			in := Input{Principal: alice(), Tool: tool, Args: raw}
			size := inputSizeBound(in, facts)
			vars, err := ruleVars(env.CELTypeAdapter(), in, facts, argv)
			if err != nil {
				t.Fatal(err)
			}
			out, det, terr := r.tracked.Eval(vars)
			if size > r.sizeBound {
				continue
			}
			within++
			if c := det.ActualCost(); c == nil || *c > ruleCostLimit {
				t.Fatalf("%d paths: size %d is within the bound %d, but the tracked cost is %v (err %v)", n, size, r.sizeBound, c, terr)
			}
			fout, _, ferr := r.fast.Eval(vars)
			if fmt.Sprint(out, terr) != fmt.Sprint(fout, ferr) {
				t.Fatalf("%d paths: tracked gave %v (%v), untracked %v (%v)", n, out, terr, fout, ferr)
			}
		}
	}
	if within == 0 {
		t.Fatal("no call was within the bound")
	}
}
