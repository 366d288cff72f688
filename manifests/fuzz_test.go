package manifests_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	// Issue 13 item 8: relative path roots; files that are not YAML text.
	f.Add([]byte("server:\n  name: fs\n  stdio: {command: x}\n  path_roots: [sandbox, \"~/x\", ../up, \"${HOME}\"]\ntools:\n  read: {side_effects: [read], data_access_level: internal, risk: low, path_args: [path]}\n"))
	f.Add([]byte{})
	f.Add([]byte("# only a comment\n"))
	f.Add([]byte("\x00\x01\x02binary"))
	f.Add([]byte("\x89PNG\r\n\x1a\n"))
	f.Add([]byte("server:\n  name: caf\xe9\n"))
	f.Add([]byte{0xFF, 0xFE, 's', 0, ':', 0, ' ', 0, '1', 0})
	// Quotas of wasm tools: out of range, negative, on a read-only mount,
	// not numbers.
	f.Add([]byte("server: {name: w, wasm: {}}\ntools:\n  t:\n    description: d\n    wasm:\n      module: m.wasm\n" +
		"      sha256: " + strings.Repeat("0", 64) + "\n      input_schema: {type: object}\n      max_open_files: -1\n" +
		"      mounts: [{host: a, guest: /a, max_files: 0}, {host: b, guest: /b, mode: rw, max_bytes: 1024GiB, max_files: many}]\n"))
	f.Add([]byte(head + readTool + "    path_args: [path]\n    path_args: [other]\n")) // a key twice (issue 13 item 1)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := manifests.Parse("f.yaml", data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			var ps manifests.Problems
			if errors.As(err, &ps) {
				for _, p := range ps {
					if p.Line < 1 {
						t.Fatalf("problem without a line: %v", p)
					}
				}
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
