package workflows

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// noRecordedHistory lists the change IDs of versions.go that no recorded
// history in testdata holds, each with the reason. It is empty: every change
// ID has a history that replays through its new branch. Adding one here
// needs a reason, not a missing recording.
var noRecordedHistory = map[string]string{}

// TestChangeIDs keeps versions.go, the workflow.GetVersion calls and the
// recorded histories in step: every GetVersion call of the package names
// its change ID by a constant declared in versions.go, every constant there
// is used by a GetVersion call, and every one is held by at least one
// recorded history in testdata (or is listed in noRecordedHistory).
func TestChangeIDs(t *testing.T) {
	declared := versionsConsts(t)
	if len(declared) == 0 {
		t.Fatal("versions.go declares no change IDs")
	}

	used := map[string]bool{}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !isGetVersion(call.Fun) {
				return true
			}
			pos := fset.Position(call.Pos())
			if len(call.Args) != 4 {
				t.Errorf("%s: workflow.GetVersion with %d arguments, want 4", pos, len(call.Args))
				return true
			}
			id, ok := call.Args[1].(*ast.Ident)
			if !ok {
				t.Errorf("%s: workflow.GetVersion change ID is %T, not a constant; declare it in versions.go", pos, call.Args[1])
				return true
			}
			if _, ok := declared[id.Name]; !ok {
				t.Errorf("%s: workflow.GetVersion change ID %s is not declared in versions.go; move it there", pos, id.Name)
				return true
			}
			used[id.Name] = true
			return true
		})
	}
	for name, value := range declared {
		if !used[name] {
			t.Errorf("versions.go declares %s = %q but no workflow.GetVersion call uses it", name, value)
		}
	}

	recorded := recordedChangeIDs(t)
	for name, value := range declared {
		if reason, ok := noRecordedHistory[value]; ok {
			if reason == "" {
				t.Errorf("noRecordedHistory lists %q without a reason", value)
			}
			if len(recorded[value]) > 0 {
				t.Errorf("noRecordedHistory lists %q, but %s holds it; drop the exception", value, recorded[value][0])
			}
			continue
		}
		if len(recorded[value]) == 0 {
			t.Errorf("%s = %q is held by no recorded history in testdata; record one (go test ./integration/ -run TestRecordHistory -record)", name, value)
		}
	}
	values := map[string]bool{}
	for _, v := range declared {
		values[v] = true
	}
	for value, where := range recorded {
		if !values[value] {
			t.Errorf("%s records change ID %q that versions.go does not declare", where[0], value)
		}
	}
}

// versionsConsts returns the constants of versions.go, name to value. Every
// declaration there must be a string constant.
func versionsConsts(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "versions.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			t.Fatalf("versions.go holds a declaration other than const: %T", decl)
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			if len(vs.Names) != len(vs.Values) {
				t.Fatalf("versions.go: %v has no explicit value", vs.Names)
			}
			for i, n := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("versions.go: %s is not a string literal", n.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out[n.Name] = v
			}
		}
	}
	return out
}

// isGetVersion reports whether fun is workflow.GetVersion.
func isGetVersion(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "GetVersion" {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "workflow"
}

// recordedChangeIDs returns the change IDs of the Version markers in the
// recorded histories of testdata, each with the files that hold it.
func recordedChangeIDs(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata")
	}
	type payloads struct {
		Payloads []struct {
			Data []byte `json:"data"`
		} `json:"payloads"`
	}
	var history struct {
		Events []struct {
			Marker *struct {
				MarkerName string              `json:"markerName"`
				Details    map[string]payloads `json:"details"`
			} `json:"markerRecordedEventAttributes"`
		} `json:"events"`
	}
	out := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		history.Events = nil
		if err := json.Unmarshal(b, &history); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		seen := map[string]bool{}
		for _, e := range history.Events {
			if e.Marker == nil || e.Marker.MarkerName != "Version" {
				continue
			}
			p := e.Marker.Details["change-id"].Payloads
			if len(p) != 1 {
				t.Fatalf("%s: Version marker with %d change-id payloads", f, len(p))
			}
			var id string
			if err := json.Unmarshal(p[0].Data, &id); err != nil {
				t.Fatalf("%s: Version marker change-id: %v", f, err)
			}
			if !seen[id] {
				seen[id] = true
				out[id] = append(out[id], f)
			}
		}
	}
	for id := range out {
		sort.Strings(out[id])
	}
	return out
}
