package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWazeroCacheNamedForGoMod: the cache is named for the wazero version
// go.mod requires, and exists.
func TestWazeroCacheNamedForGoMod(t *testing.T) {
	dir, err := WazeroCache()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(RepoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimPrefix(filepath.Base(dir), "wazero-")
	if !strings.HasPrefix(v, "v") || !strings.Contains(string(mod), wazeroModule+" "+v+"\n") {
		t.Fatalf("cache %s: want it named for go.mod's %s version", dir, wazeroModule)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("cache %s: %v", dir, err)
	}
}
