// Package testenv is what tests use to find a prerequisite outside Go —
// node, the npm reference servers of the repository's package.json,
// symlinks — and to decide what happens when one is missing: the test is
// skipped with the reason, or, under CI=true, fails with it, so that CI
// never passes a test it did not run.
//
// NodeModules installs the npm servers once for every test process (see
// its comment); .ci/run installs them before the tests, so in CI it only
// checks.
//
// BuildTemporal, StartPostgres and StartTemporal bring up a real Temporal
// cluster for the cluster tests: the server of go.mod's
// go.temporal.io/server built once per version, on a private PostgreSQL 15
// (Debian's package, which .ci/run installs).
//
// WaitFor is the one polling loop of the tests; WazeroCache a compilation
// cache for wazero kept between test runs.
//
// ScriptRunner is a scripted program runner (code mode) that needs no
// interpreter.
//
// Only _test.go files import this package. It imports the standard
// library only, and the program wire protocol (ScriptRunner).
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// CI reports whether the tests run in CI (the CI environment variable is
// true, as CI services set it): a missing prerequisite is then a failure.
func CI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// Skip skips t, saying why, or under CI fails it with the reason.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if CI() {
		t.Fatalf("%s (CI=true: a test whose prerequisite is missing fails instead of skipping)", reason)
	}
	t.Skip(reason)
}

// Skipf is Skip with a format.
func Skipf(t testing.TB, format string, args ...any) {
	t.Helper()
	Skip(t, fmt.Sprintf(format, args...))
}

// RequireNode returns the path of node, or skips t (fails it under CI)
// when node is not on PATH.
func RequireNode(t testing.TB) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		Skipf(t, "node is not on PATH (install Node.js): %v", err)
	}
	return node
}

// RepoRoot returns the repository root: the nearest directory above the
// test's working directory (its package) that holds go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := findRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func findRoot(dir string) (string, error) {
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("no go.mod above " + dir)
		}
		d = up
	}
}
