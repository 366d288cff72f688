package main

// The import direction RATIONALE.md's "Project structure" draws, as a test:
// every airlock package sits in one layer, and a package imports only from
// its own layer or the ones below, with the exceptions the drawing names
// (roles never import each other, workflows and activities never import each
// other, channels of approver never import each other). A new package fails
// the test until it is given a layer here and a place in the drawing.

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/airlock-run/airlock/"

// Layers, lowest first. The drawing in RATIONALE.md lists them top-down.
const (
	layerLibrary  = iota // internal libraries and the schemas users write
	layerContract        // api
	layerSpeaks          // libraries that speak the contract's vocabulary
	layerDomain          // durable logic and its side effects
	layerRole            // what a deployment runs
	layerBinary          // cmd/airlock
)

var layerNames = []string{"library", "contract", "contract library", "domain", "role", "binary"}

// layerOf places a package (its path in the module). ok is false for a
// package the drawing does not know.
func layerOf(pkg string) (layer int, ok bool) {
	switch {
	case pkg == "cmd/airlock":
		return layerBinary, true
	case pkg == "gateway", pkg == "worker", pkg == "approver", strings.HasPrefix(pkg, "approver/"):
		return layerRole, true
	case pkg == "workflows", pkg == "activities":
		return layerDomain, true
	case pkg == "internal/policy", pkg == "internal/config", pkg == "internal/identity", pkg == "internal/timeline":
		return layerSpeaks, true
	case pkg == "api":
		return layerContract, true
	case pkg == "manifests", pkg == "plans", strings.HasPrefix(pkg, "internal/"):
		return layerLibrary, true
	}
	return 0, false
}

// allowed reports whether from may import to, both in the module, and if
// not, why.
func allowed(from, to string) (bool, string) {
	if to == "wasm/program/wire" {
		// The protocol between the program guest and its host (code
		// mode, issue 27): standard library only, a contract both sides
		// share.
		return true, ""
	}
	switch {
	case to == "wasm/program/engine" && (from == "gateway" || from == "internal/program"):
		// The program interpreter: its Rules head the gateway's
		// airlock_run_program description; internal/program's Native
		// runs it in-process (tests).
		return true, ""
	case to == "wasm" && (from == "internal/program" || from == "cmd/airlock"):
		// Package wasm embeds the built program guest (wasm.Program).
		return true, ""
	}
	if strings.HasPrefix(from, "wasm") || strings.HasPrefix(to, "wasm") {
		// The example guests are not part of the runtime.
		if strings.HasPrefix(from, "wasm") && strings.HasPrefix(to, "wasm") {
			return true, ""
		}
		return false, "wasm/ holds the example guests: nothing outside it imports it, and it imports nothing of the runtime"
	}
	if to == "internal/testenv" {
		return false, "internal/testenv is for _test.go files only"
	}
	if strings.HasPrefix(from, "integration") || strings.HasPrefix(to, "integration") {
		return !strings.HasPrefix(to, "integration") || strings.HasPrefix(from, "integration"), "integration/ holds no importable code"
	}
	lf, okf := layerOf(from)
	lt, okt := layerOf(to)
	switch {
	case !okf:
		return false, from + " has no layer: give it one in layers_test.go and a place in RATIONALE.md's drawing"
	case !okt:
		return false, to + " has no layer: give it one in layers_test.go and a place in RATIONALE.md's drawing"
	case lt > lf:
		return false, "a " + layerNames[lf] + " imports a " + layerNames[lt] + ": imports run downward"
	}
	if lf == layerRole && lt == layerRole {
		// A channel of approver speaks approver's decision rules; that is
		// the one import between roles.
		if strings.HasPrefix(from, "approver/") && to == "approver" {
			return true, ""
		}
		if strings.HasPrefix(from, "approver/internal/") || strings.HasPrefix(to, "approver/internal/") {
			return strings.HasPrefix(from, "approver"), "approver/internal is approver's own"
		}
		return false, "roles never import each other: cmd/airlock wires them"
	}
	if lf == layerDomain && lt == layerDomain {
		return false, "workflows imports no activities (it calls them by wire name), and activities no workflows"
	}
	return true, ""
}

func TestImportsRunDownward(t *testing.T) {
	root := filepath.Join("..", "..")
	imports := map[string]map[string]string{} // package → import → a file
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if to, ok := strings.CutPrefix(p, module); ok {
				if imports[pkg] == nil {
					imports[pkg] = map[string]string{}
				}
				imports[pkg][to] = filepath.ToSlash(path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 10 {
		t.Fatalf("found only %d airlock packages with airlock imports under %s; is the walk right?", len(imports), root)
	}
	for from, tos := range imports {
		for to, file := range tos {
			if ok, why := allowed(from, to); !ok {
				t.Errorf("%s imports %s: %s", strings.TrimPrefix(file, "../../"), to, why)
			}
		}
	}
}

// TestLayersRefuse keeps the rule honest: imports the drawing forbids are
// refused.
func TestLayersRefuse(t *testing.T) {
	for _, c := range [][2]string{
		{"api", "internal/policy"},
		{"internal/policy", "workflows"},
		{"workflows", "activities"},
		{"activities", "workflows"},
		{"gateway", "worker"},
		{"approver/slack", "approver/web"},
		{"approver", "approver/slack"},
		{"manifests", "api"},
		{"gateway", "cmd/airlock"},
		{"internal/brandnew", "nothing"},
		{"gateway", "wasm/json"},
	} {
		if ok, _ := allowed(c[0], c[1]); ok {
			t.Errorf("%s → %s is allowed; the drawing forbids it", c[0], c[1])
		}
	}
	for _, c := range [][2]string{
		{"internal/policy", "api"},
		{"approver/slack", "approver"},
		{"cmd/airlock", "gateway"},
		{"gateway", "internal/identity"},
	} {
		if ok, why := allowed(c[0], c[1]); !ok {
			t.Errorf("%s → %s is refused (%s); the drawing allows it", c[0], c[1], why)
		}
	}
	if _, err := os.Stat(filepath.Join("..", "..", "go.mod")); err != nil {
		t.Fatalf("the test runs from cmd/airlock: %v", err)
	}
}
