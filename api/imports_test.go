package api

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps api at the bottom of airlock's import graph: of airlock
// it may import only the schemas and the canonical form of arguments, so
// that every role and the policy engine can import it without a cycle and
// without pulling a role in with it.
func TestImports(t *testing.T) {
	const module = "github.com/airlock-run/airlock"
	allowed := map[string]bool{
		module + "/manifests":          true,
		module + "/plans":              true,
		module + "/internal/jsoncanon": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("listing api/*.go: %v (%d files)", err, len(files))
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parsing %s: %v", name, err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatalf("%s: import %s: %v", name, imp.Path.Value, err)
			}
			if (path == module || strings.HasPrefix(path, module+"/")) && !allowed[path] {
				t.Errorf("api/%s imports %s; api may import of airlock only manifests, plans and internal/jsoncanon (move the type into api, or the code out of it)", name, path)
			}
		}
	}
}
