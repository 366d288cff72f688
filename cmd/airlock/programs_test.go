package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInterpreterMarker: the interpreter is lazy only once its marker is
// in the cache directory it compiles into; the marker is named for this
// build's guest and wazero and sits in that directory, so another cache
// directory (or an emptied one) compiles eagerly again; a cache directory
// that cannot be written is an error that names it.
func TestInterpreterMarker(t *testing.T) {
	dir := t.TempDir()
	if interpreterCached(dir) {
		t.Fatal("an empty cache says the interpreter is compiled")
	}
	if err := markInterpreterCached(dir); err != nil {
		t.Fatal(err)
	}
	if !interpreterCached(dir) {
		t.Error("the marker written is not seen")
	}
	m := interpreterMarker(dir)
	if filepath.Dir(m) != dir || !strings.HasPrefix(filepath.Base(m), "airlock-program-") {
		t.Errorf("marker %s: want airlock-program-* in %s", m, dir)
	}
	if interpreterCached(t.TempDir()) {
		t.Error("another cache directory says the interpreter is compiled")
	}
	if err := os.Remove(m); err != nil {
		t.Fatal(err)
	}
	if interpreterCached(dir) {
		t.Error("an emptied cache says the interpreter is compiled")
	}
	ro := filepath.Join(t.TempDir(), "missing", "dir")
	if err := markInterpreterCached(ro); err == nil || !strings.Contains(err.Error(), ro) {
		t.Errorf("marking in a directory that does not exist: %v", err)
	}
}
