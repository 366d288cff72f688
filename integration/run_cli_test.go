package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/manifests"
)

// TestRunFollowsPlan runs `airlock run` (not detached) against a live
// stack: it prints each step as it finishes and the plan's end, and its exit
// status says whether the plan completed.
func TestRunFollowsPlan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := buildBinary(t, "./integration/testupstream")
	manifest := filepath.Join(dir, "counter.yaml")
	if err := os.WriteFile(manifest, []byte(`server:
  name: counter
  stdio: {command: `+bin+`, env: {SIDE_EFFECT_LOG: `+filepath.Join(dir, "effects.log")+`}}
tools:
  append:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: false
    compensation: {tool: put, args: {key: '"undo-" + args.key'}}
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true}
  fail: {side_effects: [none], data_access_level: public, risk: low, idempotent: true, retry: {max_attempts: 1}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := manifests.Load(manifest)
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	cfg := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(cfg, []byte("manifests: [counter.yaml]\n"+identityYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	plan := func(name, last string) string {
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte(`name: `+name+`
steps:
  - {id: one, tool: counter__append, args: {key: `+name+`-1}}
  - {id: two, tool: counter__append, args: {key: `+name+`-2}}
`+last), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	airlock := buildBinary(t, "./cmd/airlock")
	runPlan := func(file string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, airlock, "run", "--config", cfg, "--temporal-address", s.srv.HostPort(), "--namespace", s.srv.Namespace(), file).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}

	out, code := runPlan(plan("good", ""))
	if code != 0 || !strings.Contains(out, "ok       one") || !strings.Contains(out, "ok       two") || !strings.Contains(out, ": completed") {
		t.Errorf("good plan (exit %d):\n%s", code, out)
	}
	out, code = runPlan(plan("bad", "  - {id: three, tool: counter__fail, args: {text: boom}}\n"))
	if code != 1 || !strings.Contains(out, "failed   three") || !strings.Contains(out, ": rolled_back") {
		t.Errorf("failing plan (exit %d):\n%s", code, out)
	}
	if n := countEffects(t, filepath.Join(dir, "effects.log"), "put", "undo-bad-1"); n != 1 {
		t.Errorf("the failing plan's first step was undone %d times, want 1", n)
	}
}
