package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/config"
)

// The policy version recorded with decisions covers the manifests'
// declarations: a reload that changes only a tool's risk records a new
// version, while the same declarations read from another directory (another
// replica) keep it.
func TestPolicyVersionCoversManifests(t *testing.T) {
	load := func(dir, manifest string) string {
		t.Helper()
		write(t, filepath.Join(dir, "fs.yaml"), manifest)
		cfg := write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [fs.yaml]\n")
		snap, err := config.Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Policy.Version()
	}
	low := manifestFor("fs")
	v1 := load(t.TempDir(), low)
	if v := load(t.TempDir(), strings.Replace(low, "command: npx", "command: /usr/bin/npx", 1)); v != v1 {
		t.Errorf("a different command changed the version: %s, want %s", v, v1)
	}
	if v := load(t.TempDir(), strings.Replace(low, "risk: low", "risk: high", 1)); v == v1 {
		t.Errorf("a tool's risk changed and the version did not: %s", v)
	}
}
