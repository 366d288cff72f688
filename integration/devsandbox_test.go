package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/gateway"
)

// TestDevBinaryRunsStdioSandboxed is what lets the other tests of the
// airlock binary run without AIRLOCK_SANDBOX=off (issue 32): airlock dev
// runs its stdio servers in the sandbox by default, which grants a server
// the directory its manifest lists in sandbox.write_paths and hides the
// configuration directory. Of two servers of the test upstream, the one
// whose side-effect log is in a granted directory logs its call on the
// host; the one whose log is beside airlock.yaml, not granted, runs its
// call but writes nothing there (the directory it sees is an empty tmpfs
// of its sandbox's).
func TestDevBinaryRunsStdioSandboxed(t *testing.T) {
	t.Parallel()
	d := newCounterDev(t, `  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true}
`)
	exposed := filepath.Join(d.dir, "exposed.log")
	writeFile(t, filepath.Join(d.dir, "exposed.yaml"), fmt.Sprintf(`server:
  name: exposed
  stdio:
    command: %s
    env: {SIDE_EFFECT_LOG: %s}
tools:
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true}
`, d.upstream, exposed))
	writeFile(t, filepath.Join(d.dir, "airlock.yaml"), "manifests: [counter.yaml, exposed.yaml]\n"+identityYAML)
	args, base, _ := d.devArgs(t, "--no-ui")
	p := startDev(t, d.bin, args...)
	p.waitHealthy(t, base)
	cs := connectURL(t, base+"/mcp", map[string]string{"Authorization": "Bearer " + testKey, gateway.HeaderTask: "sandboxed-dev"})
	waitTools(t, cs, "counter__put", "exposed__put")

	if res := call(t, cs, "counter__put", map[string]any{"key": "granted"}, ""); res.IsError {
		t.Fatalf("counter__put: %s", text(res))
	}
	if n := countEffects(t, d.effects, "put", "granted"); n != 1 {
		t.Errorf("the granted side-effect log %s has %d lines \"put granted\", want 1", d.effects, n)
	}
	if res := call(t, cs, "exposed__put", map[string]any{"key": "hidden"}, ""); res.IsError {
		t.Fatalf("exposed__put: %s", text(res))
	}
	if _, err := os.Stat(exposed); !os.IsNotExist(err) {
		b, _ := os.ReadFile(exposed)
		t.Errorf("the server whose log is in the configuration directory wrote it on the host (stat: %v; %q): the directory is not hidden", err, b)
	}
	if out := p.output(); strings.Contains(out, "NOT sandboxed") {
		t.Errorf("airlock dev ran its stdio servers unsandboxed:\n%s", out)
	}
}
