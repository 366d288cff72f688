package manifests_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-run/airlock/manifests"
)

// FuzzParse checks that no input makes the loader or validator panic, and
// that every problem has a message.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("examples/*.yaml")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(head + readTool + "    approval: &a {group: ops}\n  w:\n    approval: *a\n"))
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte(head + readTool + "    path_args: [path]\n    path_args: [other]\n")) // a key twice (issue 13 item 1)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := manifests.Parse("f.yaml", data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for _, p := range manifests.ValidateAll([]*manifests.Manifest{m, m}) {
			if p.Msg == "" {
				t.Fatalf("problem without a message: %+v", p)
			}
		}
		_ = m.Server.Expand(nil)
		for _, tool := range m.Tools {
			_ = tool.EffectiveRetry()
			_ = tool.EffectiveTimeout()
		}
	})
}
