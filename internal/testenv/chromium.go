package testenv

import (
	"os/exec"
	"testing"
)

// chromiumNames are the executables a headless Chromium goes by: Debian's
// package installs chromium (.ci/run installs it).
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Chromium returns the path of a Chromium executable for browser tests, or
// skips (fails under CI=true) when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, n := range chromiumNames {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	Skip(t, "no Chromium on PATH for the browser test: apt-get install -y chromium (.ci/run does)")
	return ""
}
