package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// installed remembers, per test process and repository root, how
// NodeModules went: the install runs at most once per process.
var installed = struct {
	sync.Mutex
	byRoot map[string]installResult
}{byRoot: map[string]installResult{}}

type installResult struct {
	skip string // why the servers cannot be had here
	err  error  // a broken repository or install, whatever the machine
}

// NodeModules returns the repository's node_modules once every dependency
// of its package.json is installed there.
//
// When node_modules is missing it runs npm ci (from the committed
// package-lock.json) once for all the test processes that need it, which
// `go test ./...` runs in parallel: under an exclusive lock on a file in
// os.TempDir, in a fresh directory inside the repository whose
// node_modules is then renamed into place. No test ever sees node_modules
// half installed, and none is ever deleted: a node_modules that lacks a
// package is left alone (another test may be running a server from it),
// and the test is skipped (failed under CI) with the advice to run npm ci.
func NodeModules(t testing.TB) string {
	t.Helper()
	root := RepoRoot(t)
	installed.Lock()
	r, ok := installed.byRoot[root]
	if !ok {
		r.skip, r.err = installNodeModules(root)
		installed.byRoot[root] = r
	}
	installed.Unlock()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.skip != "" {
		Skip(t, r.skip)
	}
	return filepath.Join(root, "node_modules")
}

// NPMServer returns the entry script (dist/index.js) of the npm reference
// server @modelcontextprotocol/<name>, installing node_modules first when
// it is missing (NodeModules). Running the script takes node
// (RequireNode).
func NPMServer(t testing.TB, name string) string {
	t.Helper()
	script := filepath.Join(NodeModules(t), "@modelcontextprotocol", name, "dist", "index.js")
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("@modelcontextprotocol/%s is not a dependency in package.json, or its entry point moved: %v", name, err)
	}
	return script
}

// NPMBin returns the path of node_modules/.bin/name, a command that a
// package of package.json installs (the conformance runner), installing
// node_modules first when it is missing (NodeModules).
func NPMBin(t testing.TB, name string) string {
	t.Helper()
	bin := filepath.Join(NodeModules(t), ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("node_modules/.bin/%s is missing although package.json's packages are installed: %v", name, err)
	}
	return bin
}

// installNodeModules makes sure root/node_modules holds every dependency
// of root/package.json (see NodeModules). It returns why it could not
// (skip), or an error when the repository or the install is broken.
func installNodeModules(root string) (skip string, err error) {
	deps, err := dependencies(root)
	if err != nil {
		return "", err
	}
	nm := filepath.Join(root, "node_modules")
	if missing := missingIn(nm, deps); len(missing) == 0 {
		return "", nil
	} else if _, err := os.Stat(nm); err == nil {
		return incomplete(root, missing), nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Sprintf("the npm reference servers are not installed (%s/node_modules) and npm is not on PATH to install them: %v", root, err), nil
	}
	sum := sha256.Sum256([]byte(root))
	unlock, err := lockFile(filepath.Join(os.TempDir(), "airlock-npm-"+hex.EncodeToString(sum[:8])+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	// Another test process may have installed them while this one waited.
	if missing := missingIn(nm, deps); len(missing) == 0 {
		return "", nil
	} else if _, err := os.Stat(nm); err == nil {
		return incomplete(root, missing), nil
	}

	tmp, err := os.MkdirTemp(root, ".node_modules-install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("installing the npm reference servers (npm ci from %s/package-lock.json) failed: %v\n%s", root, err, out), nil
	}
	if err := os.Rename(filepath.Join(tmp, "node_modules"), nm); err != nil {
		return "", fmt.Errorf("moving the installed node_modules into %s: %w", root, err)
	}
	if missing := missingIn(nm, deps); len(missing) > 0 {
		return "", fmt.Errorf("npm ci installed %s without %s", nm, strings.Join(missing, ", "))
	}
	return "", nil
}

func incomplete(root string, missing []string) string {
	return fmt.Sprintf("%s/node_modules lacks %s; run npm ci in %s (tests never replace a node_modules that another test may be using)",
		root, strings.Join(missing, ", "), root)
}

// dependencies lists the dependencies and devDependencies of
// root/package.json: the test tools (the conformance runner) are
// devDependencies, and npm ci installs both.
func dependencies(root string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(root, "package.json"))
	if err != nil {
		return nil, err
	}
	var pkg struct {
		Dependencies    map[string]string `json:"dependencies"`
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return nil, fmt.Errorf("%s/package.json: %w", root, err)
	}
	var deps []string
	for name := range pkg.Dependencies {
		deps = append(deps, name)
	}
	for name := range pkg.DevDependencies {
		deps = append(deps, name)
	}
	slices.Sort(deps)
	return deps, nil
}

// missingIn lists the packages of deps that node_modules lacks.
func missingIn(nodeModules string, deps []string) []string {
	var missing []string
	for _, d := range deps {
		if _, err := os.Stat(filepath.Join(nodeModules, filepath.FromSlash(d), "package.json")); err != nil {
			missing = append(missing, d)
		}
	}
	return missing
}
