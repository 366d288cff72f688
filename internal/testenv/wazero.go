package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// wazeroModule is the module whose version names the cache.
const wazeroModule = "github.com/tetratelabs/wazero"

// WazeroCache returns a wazero compilation cache directory that outlives
// the test process, in the user's cache directory beside the go command's
// build cache, so that a module is compiled to machine code once (the
// sandbox's 4.5 MB guest takes seconds, tens of them on a loaded machine)
// and again only when it or wazero changes. wazero keys each entry by the
// module's hash and writes it by renaming a temporary file, so test
// processes running at once share the directory safely; but in a test
// binary, which carries no build information of its dependencies, it
// cannot tell its own version ("dev"), so the directory is named for the
// version go.mod requires. Tests about compiling use a directory of their
// own. It is for TestMain: it needs no testing.TB.
func WazeroCache() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := findRoot(wd)
	if err != nil {
		return "", err
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	version := ""
	for line := range strings.Lines(string(mod)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == wazeroModule {
			version = f[1]
		} else if len(f) >= 3 && f[0] == "require" && f[1] == wazeroModule {
			version = f[2]
		}
	}
	if version == "" {
		return "", fmt.Errorf("%s does not require %s", filepath.Join(root, "go.mod"), wazeroModule)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "airlock-test", "wazero-"+version)
	return dir, os.MkdirAll(dir, 0o755)
}
