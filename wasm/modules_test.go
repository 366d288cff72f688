package wasm_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/wasm"
)

var update = flag.Bool("update", false, "write the committed modules' SHA-256 into "+manifestPath+" and the embedded modules' pins")

// manifestPath declares the modules, relative to this package.
const manifestPath = "../manifests/examples/native.yaml"

// modules maps each committed module to its main package, relative to
// this directory. Keep it in step with the Taskfile's wasm task.
var modules = map[string]string{
	"json.wasm":    "./json",
	"notes.wasm":   "./notes",
	"program.wasm": "./program",
}

// reactors are the modules built as reactors of internal/sandbox's
// snapshot ABI (-buildmode=c-shared): the native tools.
var reactors = map[string]bool{"json.wasm": true, "notes.wasm": true}

// embeddedPin is where a module that package wasm embeds, rather than
// one the manifest declares as a tool, is pinned: a string constant in a
// Go file of this package.
type embeddedPin struct {
	file, constant string
	embedded       []byte // the bytes package wasm embeds
	pinned         string // the constant's value as compiled in
}

// embedded maps each embedded module to its pin.
var embedded = map[string]embeddedPin{
	"program.wasm": {file: "program_module.go", constant: "ProgramSHA256", embedded: wasm.Program, pinned: wasm.ProgramSHA256},
}

// pin is one tool's wasm.module and wasm.sha256, read with yaml.v3 rather
// than manifests.Load so the check does not depend on the manifest schema
// beyond these two fields.
type pin struct {
	tool   string
	module string // as written, relative to the manifest
	sha256 *yaml.Node
}

func readPins(t *testing.T) ([]byte, []pin) {
	t.Helper()
	src, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Tools map[string]struct {
			WASM *struct {
				Module string    `yaml:"module"`
				SHA256 yaml.Node `yaml:"sha256"`
			} `yaml:"wasm"`
		} `yaml:"tools"`
	}
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatalf("%s: %v", manifestPath, err)
	}
	var pins []pin
	for name, tool := range doc.Tools {
		if tool.WASM == nil {
			t.Errorf("%s: tools.%s has no wasm block", manifestPath, name)
			continue
		}
		pins = append(pins, pin{tool: name, module: tool.WASM.Module, sha256: &tool.WASM.SHA256})
	}
	sort.Slice(pins, func(i, j int) bool { return pins[i].tool < pins[j].tool })
	return src, pins
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestModuleHashes checks that each tool's wasm.sha256 in the example
// manifest is the hash of the committed module it names, and that every
// committed module is declared. With -update it writes the hashes instead.
func TestModuleHashes(t *testing.T) {
	src, pins := readPins(t)
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	lines := strings.SplitAfter(string(src), "\n")
	changed := false
	for _, p := range pins {
		path, err := filepath.Abs(filepath.Join(filepath.Dir(manifestPath), filepath.FromSlash(p.module)))
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(here, path)
		if err != nil || strings.Contains(rel, string(filepath.Separator)) {
			t.Errorf("%s: tools.%s.wasm.module %q is not a module in wasm/", manifestPath, p.tool, p.module)
			continue
		}
		used[rel] = true
		got := fileSHA256(t, path)
		if p.sha256.Value == got {
			continue
		}
		if *update {
			lines[p.sha256.Line-1] = replaceScalar(lines[p.sha256.Line-1], p.sha256.Column-1, got)
			changed = true
			continue
		}
		t.Errorf("%s: tools.%s.wasm.sha256 is %q, but wasm/%s hashes to %s; after rebuilding a module (task wasm), pin it again: go test ./wasm -run TestModuleHashes -update", manifestPath, p.tool, p.sha256.Value, rel, got)
	}
	if changed {
		if err := os.WriteFile(manifestPath, []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the modules' SHA-256 into %s", manifestPath)
	}
	committed, err := filepath.Glob("*.wasm")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range committed {
		if _, ok := embedded[name]; !ok && !used[name] {
			t.Errorf("wasm/%s is committed but no tool in %s runs it; declare its tools, or delete it", name, manifestPath)
		}
	}
}

// TestEmbeddedPins checks that each embedded module's pinned SHA-256 is
// the committed module's hash, and that the bytes embedded are the
// committed module. With -update it writes the hashes into the pins.
func TestEmbeddedPins(t *testing.T) {
	for name, p := range embedded {
		got := fileSHA256(t, name)
		sum := sha256.Sum256(p.embedded)
		if hex.EncodeToString(sum[:]) != got {
			t.Errorf("the module embedded as %s is not wasm/%s", p.constant, name)
		}
		src, err := os.ReadFile(p.file)
		if err != nil {
			t.Fatal(err)
		}
		decl := regexp.MustCompile(`(?m)^const ` + regexp.QuoteMeta(p.constant) + ` = "([0-9a-f]*)"$`)
		m := decl.FindSubmatchIndex(src)
		if m == nil {
			t.Fatalf("wasm/%s: no line const %s = \"<sha256>\"", p.file, p.constant)
		}
		if string(src[m[2]:m[3]]) != p.pinned {
			t.Fatalf("wasm/%s: %s reads %q but compiled as %q", p.file, p.constant, src[m[2]:m[3]], p.pinned)
		}
		if p.pinned == got {
			continue
		}
		if *update {
			src = append(src[:m[2]:m[2]], append([]byte(got), src[m[3]:]...)...)
			if err := os.WriteFile(p.file, src, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote wasm/%s's SHA-256 into %s in %s", name, p.constant, p.file)
			continue
		}
		t.Errorf("wasm/%s: %s is %q, but wasm/%s hashes to %s; after rebuilding it (task wasm), pin it again: go test ./wasm -run TestEmbeddedPins -update", p.file, p.constant, p.pinned, name, got)
	}
}

// replaceScalar replaces the YAML scalar starting at byte col of line
// (plain or double-quoted) with value, keeping the rest (e.g. a comment).
func replaceScalar(line string, col int, value string) string {
	rest := line[col:]
	end := strings.IndexAny(rest, " \t\r\n#")
	if strings.HasPrefix(rest, `"`) {
		end = strings.Index(rest[1:], `"`) + 2
	}
	if end < 0 {
		end = len(rest)
	}
	return line[:col] + value + rest[end:]
}

// goRelease matches a Go release as the toolchain writes it into what it
// builds (runtime.Version()).
var goRelease = regexp.MustCompile(`go1\.[0-9]+(\.[0-9]+)?((rc|beta)[0-9]+)?`)

// builtBy returns the Go release that built a module: the one release
// named in it.
func builtBy(module []byte) (string, error) {
	var releases []string
	for _, m := range goRelease.FindAll(module, -1) {
		if !slices.Contains(releases, string(m)) {
			releases = append(releases, string(m))
		}
	}
	if len(releases) != 1 {
		return "", fmt.Errorf("it names %d Go releases %q, not one", len(releases), releases)
	}
	return releases[0], nil
}

// TestModulesUpToDate rebuilds each module and compares it with the
// committed one, catching source changed without a rebuild. The build is
// reproducible only with the same Go release, so the rebuild runs with
// the release that built the committed module, whichever Go runs the
// test: the go command fetches that toolchain when it is another
// (GOTOOLCHAIN). When it cannot, the test is skipped with the reason, and
// fails under CI.
func TestModulesUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the modules")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	dir := t.TempDir()
	for name, pkg := range modules {
		t.Run(name, func(t *testing.T) {
			committed, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			release, err := builtBy(committed)
			if err != nil {
				t.Fatalf("wasm/%s: cannot tell which Go release built it: %v", name, err)
			}
			toolchain := "local"
			if release != runtime.Version() {
				toolchain = release
			}
			out := filepath.Join(dir, name)
			args := []string{"build", "-buildvcs=false", "-trimpath", "-ldflags=-s -w", "-o", out, pkg}
			if reactors[name] {
				args = slices.Insert(args, 1, "-buildmode=c-shared")
			}
			cmd := exec.Command(gobin, args...)
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=", "GOWASM=", "CGO_ENABLED=0", "GOTOOLCHAIN="+toolchain)
			if msg, err := cmd.CombinedOutput(); err != nil {
				if toolchain != "local" {
					testenv.Skipf(t, "wasm/%s was built by %s and this is %s; rebuilding it with %s (GOTOOLCHAIN=%s) failed, so the comparison cannot be made: %v\n%s",
						name, release, runtime.Version(), release, toolchain, err, msg)
				}
				t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
			}
			fresh, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fresh, committed) {
				t.Errorf("wasm/%s differs from a fresh build of %s with %s (%s): its source changed; rebuild (task wasm), pin the new hash (go test ./wasm -run TestModuleHashes -update) and commit both", name, pkg, release, fmt.Sprintf("%d bytes, committed %d", len(fresh), len(committed)))
			}
		})
	}
}

func TestBuiltBy(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		wantErr  bool
	}{
		{in: "\x00go1.26.8\x00runtime\x00go1.26.8", want: "go1.26.8"},
		{in: "xgo1.27rc1y", want: "go1.27rc1"},
		{in: "go1.26.8 and go1.25.1", wantErr: true},
		{in: "no release here", wantErr: true},
	} {
		got, err := builtBy([]byte(tc.in))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("builtBy(%q) = %q, %v; want %q (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
