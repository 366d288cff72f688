package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/manifests"
)

// A reload refuses exactly what `airlock manifests validate` reports: one
// checker, the same problems, each at its file:line.
func TestReloadAndValidateShareTheChecker(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	good := `manifests: [fs.yaml]
principals:
  - {name: alice, roles: [all], api_key_sha256: [` + identity.HashKey("k") + `]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
`
	write("airlock.yaml", good)
	write("fs.yaml", "server:\n  name: fs\n  stdio: {command: fs-server}\ntools:\n  read: {side_effects: [read], data_access_level: public, risk: low}\n")
	e, err := load(commonFlags{config: filepath.Join(dir, "airlock.yaml"), logLevel: "error", logFormat: "json"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	r := roles{gateway: true, worker: true}
	if _, err := e.loadVersion(nil, r, nil); err != nil {
		t.Fatalf("the good configuration: %v", err)
	}

	goodManifest := "server:\n  name: fs\n  stdio: {command: fs-server}\ntools:\n  read: {side_effects: [read], data_access_level: public, risk: low}\n"
	for _, tc := range []struct{ name, config, manifest, want string }{
		{"a rule that does not compile", good + "policy:\n  rules:\n    - {name: broken, when: 'args.x ==', effect: deny}\n", goodManifest, "airlock.yaml:8: policy.rules[0].when"},
		{"a manifest and the configuration", strings.Replace(good, "data_access_level: restricted", "data_access_level: secretish", 1),
			strings.Replace(goodManifest, "risk: low", "risk: extreme", 1), "fs.yaml:5: tools.read.risk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write("airlock.yaml", tc.config)
			write("fs.yaml", tc.manifest)
			_, err := e.loadVersion(nil, r, nil)
			var ps manifests.Problems
			if !errors.As(err, &ps) {
				t.Fatalf("reload error %T %v, want manifests.Problems", err, err)
			}
			var reloadLines []string
			for _, p := range ps {
				reloadLines = append(reloadLines, p.Error())
			}
			var stdout, stderr bytes.Buffer
			if code := run([]string{"manifests", "validate", "--config", filepath.Join(dir, "airlock.yaml")}, nil, &stdout, &stderr); code != 1 {
				t.Fatalf("validate exit %d, want 1\n%s", code, stderr.String())
			}
			if got := strings.TrimSpace(stderr.String()); strings.Join(reloadLines, "\n") != got {
				t.Fatalf("the reload and validate disagree:\nreload:\n%s\nvalidate:\n%s", strings.Join(reloadLines, "\n"), got)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("want a problem at %s:\n%s", tc.want, stderr.String())
			}
		})
	}
}

// BenchmarkLoadVersion measures what one reload of the repository's example
// configuration costs (reading and checking every file, compiling the
// policy, building principals and the worker's catalog).
func BenchmarkLoadVersion(b *testing.B) {
	e, err := load(commonFlags{config: filepath.Join(repoRoot, "airlock.yaml"), logLevel: "error", logFormat: "json"}, &bytes.Buffer{})
	if err != nil {
		b.Fatal(err)
	}
	r := roles{gateway: true, worker: true}
	for b.Loop() {
		if _, err := e.loadVersion(nil, r, nil); err != nil {
			b.Fatal(err)
		}
	}
}
