package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// helperEnv makes the test binary, run again by TestSkip, call Skip.
const helperEnv = "TESTENV_SKIP_HELPER"

func TestSkipHelper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		return // only as TestSkip's child
	}
	Skip(t, "widget-server is not installed")
	t.Log("still running after Skip")
}

func TestSkip(t *testing.T) {
	for _, tc := range []struct {
		ci       string
		wantFail bool
		want     []string
	}{
		{ci: "", want: []string{"--- SKIP: TestSkipHelper", "widget-server is not installed"}},
		{ci: "false", want: []string{"--- SKIP: TestSkipHelper", "widget-server is not installed"}},
		{ci: "true", wantFail: true, want: []string{"--- FAIL: TestSkipHelper", "widget-server is not installed (CI=true"}},
		{ci: "1", wantFail: true, want: []string{"--- FAIL: TestSkipHelper"}},
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSkipHelper$", "-test.v")
			cmd.Env = append(os.Environ(), helperEnv+"=1", "CI="+tc.ci)
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.wantFail {
				t.Errorf("failed = %v (%v), want %v", failed, err, tc.wantFail)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(string(out), "still running after Skip") {
				t.Errorf("the test went on after Skip:\n%s", out)
			}
		})
	}
}

func TestFindRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findRoot(deep); err != nil || got != root {
		t.Errorf("findRoot(%s) = %q, %v; want %q", deep, got, err, root)
	}
	if got := RepoRoot(t); filepath.Base(got) == "testenv" || !fileExists(filepath.Join(got, "package.json")) {
		t.Errorf("RepoRoot = %s, want the repository root", got)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// fakeRepo is a repository root whose package.json depends on a and
// (a devDependency) @s/b;
// node_modules holds the packages in installed.
func fakeRepo(t *testing.T, installed ...string) string {
	t.Helper()
	root := t.TempDir()
	pkg := `{"name": "x", "dependencies": {"a": "1.0.0"}, "devDependencies": {"@s/b": "2.0.0"}}`
	if err := os.WriteFile(filepath.Join(root, "package.json"), []byte(pkg), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range installed {
		dir := filepath.Join(root, "node_modules", filepath.FromSlash(p))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestInstallNodeModulesLeavesAnExistingOneAlone(t *testing.T) {
	t.Run("complete", func(t *testing.T) {
		root := fakeRepo(t, "a", "@s/b")
		if skip, err := installNodeModules(root); skip != "" || err != nil {
			t.Fatalf("skip %q, err %v; want nothing to do", skip, err)
		}
	})
	t.Run("lacking a package", func(t *testing.T) {
		root := fakeRepo(t, "a")
		skip, err := installNodeModules(root)
		if err != nil || !strings.Contains(skip, "lacks @s/b; run npm ci in "+root) {
			t.Fatalf("skip %q, err %v; want the advice to run npm ci", skip, err)
		}
		// Nothing was removed or replaced.
		if !fileExists(filepath.Join(root, "node_modules", "a", "package.json")) {
			t.Error("the existing node_modules was touched")
		}
		if m, _ := filepath.Glob(filepath.Join(root, ".node_modules-install-*")); len(m) != 0 {
			t.Errorf("an install was started: %v", m)
		}
	})
	t.Run("no package.json", func(t *testing.T) {
		if _, err := installNodeModules(t.TempDir()); err == nil {
			t.Fatal("no error for a root without package.json")
		}
	})
}

func TestDependencies(t *testing.T) {
	root := fakeRepo(t, "a")
	deps, err := dependencies(root)
	if err != nil || !slices.Equal(deps, []string{"@s/b", "a"}) {
		t.Fatalf("dependencies = %q, %v", deps, err)
	}
	if got := missingIn(filepath.Join(root, "node_modules"), deps); !slices.Equal(got, []string{"@s/b"}) {
		t.Errorf("missing = %q, want [@s/b]", got)
	}
}
