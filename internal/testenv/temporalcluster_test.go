package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBuildTemporal builds (or finds cached) the Temporal server and SQL
// tool of go.mod's go.temporal.io/server and checks that both report that
// version. .ci/run runs it before go test ./..., so that the cold build
// (about 4 minutes on 2 cores) is not charged to the integration tests'
// time limit.
func TestBuildTemporal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the Temporal server; skipped with -short")
	}
	bins := BuildTemporal(t)
	want := strings.TrimPrefix(bins.Version, "v")
	for _, bin := range []string{bins.Server, bins.SQLTool} {
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v\n%s", bin, err, out)
		}
		if !strings.HasSuffix(strings.TrimSpace(string(out)), " version "+want) {
			t.Errorf("%s --version: %q, want version %s", bin, out, want)
		}
	}
}
