package integration

import (
	"fmt"
	"path/filepath"
	"testing"
)

// counterDev is what the tests of the airlock binary against
// integration/testupstream share: both binaries built, a fresh directory
// holding counter.yaml (the upstream, its side effects logged to effects)
// with the given tools block, indented as under "tools:".
type counterDev struct {
	bin, upstream, dir, effects string
}

func newCounterDev(t *testing.T, tools string) counterDev {
	t.Helper()
	if testing.Short() {
		t.Skip("subprocess test; skipped with -short")
	}
	d := counterDev{bin: buildBinary(t, "./cmd/airlock"), upstream: buildBinary(t, "./integration/testupstream"), dir: t.TempDir()}
	d.effects = filepath.Join(d.dir, "effects.log")
	writeFile(t, filepath.Join(d.dir, "counter.yaml"), fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env: {SIDE_EFFECT_LOG: %s}
tools:
%s`, d.upstream, d.effects, tools))
	return d
}
