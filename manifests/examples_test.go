package manifests_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

func TestExamplesLoad(t *testing.T) {
	paths, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	ms, err := manifests.LoadFiles(paths)
	if err != nil {
		t.Fatalf("examples have problems:\n%v", err)
	}
	if len(ms) != len(paths) {
		t.Errorf("loaded %d manifests from %d files", len(ms), len(paths))
	}
}

var (
	registerToolRE     = regexp.MustCompile(`registerTool\(\s*"([^"]+)"`)
	registerResourceRE = regexp.MustCompile(`\.(registerResource|resource)\(`)
	registerPromptRE   = regexp.MustCompile(`\.(registerPrompt|prompt)\(`)
)

// TestExamplesMatchUpstream checks each example against the JavaScript of
// the npm server it describes (installed by npm ci from package.json): every
// declared tool exists there, and every tool there is declared, so the
// examples cannot drift from the pinned version.
func TestExamplesMatchUpstream(t *testing.T) {
	for _, tt := range []struct{ manifest, server string }{
		{"examples/filesystem.yaml", "server-filesystem"},
		{"examples/memory.yaml", "server-memory"},
	} {
		t.Run(filepath.Base(tt.manifest), func(t *testing.T) {
			source := testenv.NPMServer(t, tt.server)
			src, err := os.ReadFile(source)
			if err != nil {
				t.Fatal(err)
			}
			m, err := manifests.Load(tt.manifest)
			if err != nil {
				t.Fatal(err)
			}
			var upstream []string
			for _, match := range registerToolRE.FindAllStringSubmatch(string(src), -1) {
				upstream = append(upstream, match[1])
			}
			sort.Strings(upstream)
			var declared []string
			for name := range m.Tools {
				declared = append(declared, name)
			}
			sort.Strings(declared)
			if diff := cmp.Diff(upstream, declared); diff != "" {
				t.Errorf("tools (-in %s +in %s):\n%s", source, tt.manifest, diff)
			}
			// A resources or prompts block exactly when the server offers them.
			for _, kind := range []struct {
				name     string
				offered  bool
				declared bool
			}{
				{"resources", registerResourceRE.MatchString(string(src)), m.Resources != nil},
				{"prompts", registerPromptRE.MatchString(string(src)), m.Prompts != nil},
			} {
				if kind.offered != kind.declared {
					t.Errorf("%s: the server offers %s: %v, the manifest has a %s block: %v", tt.manifest, kind.name, kind.offered, kind.name, kind.declared)
				}
			}
		})
	}
}
