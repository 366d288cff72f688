package guard

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFalsePositivesOnRepository scans this repository's own Go, Markdown,
// YAML and JSON files (source, prose, manifests, the example servers'
// JSON): a benign corpus, holding no credential, so every finding is a
// false positive. The count is reported (RATIONALE.md) and bounded.
func TestFalsePositivesOnRepository(t *testing.T) {
	root := filepath.Join("..", "..")
	var files, bytes int
	var found []string
	personal := map[string]int{}
	var personalFound []string
	injection := map[string]int{}
	var injectionFound []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", ".airlock":
				return filepath.SkipDir
			case "guard":
				if filepath.Base(filepath.Dir(path)) == "internal" {
					return filepath.SkipDir // this package's fixtures are secrets by design
				}
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".json":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		bytes += len(b)
		s := string(b)
		for _, m := range Scan(s) {
			line := strings.Count(s[:m.Start], "\n") + 1
			found = append(found, path+":"+itoa(line)+": "+m.Rule)
		}
		for _, m := range ScanPersonal(s) {
			line := strings.Count(s[:m.Start], "\n") + 1
			personal[m.Rule]++
			personalFound = append(personalFound, path+":"+itoa(line)+": "+m.Rule+" "+s[m.Start:m.End])
		}
		for _, m := range ScanInjection(s) {
			line := strings.Count(s[:m.Start], "\n") + 1
			injection[m.Rule]++
			injectionFound = append(injectionFound, path+":"+itoa(line)+": "+m.Rule+" "+strconv.Quote(s[m.Start:m.End]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("scanned %d files: not the repository", files)
	}
	t.Logf("scanned %d files, %d bytes: %d findings", files, bytes, len(found))
	for _, f := range found {
		t.Log(f)
	}
	if len(found) > maxRepositoryFindings {
		t.Fatalf("%d false positives on the repository, more than %d", len(found), maxRepositoryFindings)
	}
	// Personal data: the repository holds some legitimately (see
	// repositoryPersonalData); the count per rule is asserted exactly, so
	// that a rule that starts matching more (or stops) shows.
	t.Logf("personal data: %v", personal)
	for _, f := range personalFound {
		t.Log(f)
	}
	if diff := cmp.Diff(repositoryPersonalData, personal); diff != "" {
		t.Errorf("personal data on the repository (-want +got):\n%s", diff)
	}
	// Prompt-injection markers: the repository holds none meant as one
	// outside this package; each finding is a false positive, counted per
	// rule exactly (RATIONALE.md reports them).
	t.Logf("injection markers: %v", injection)
	for _, f := range injectionFound {
		t.Log(f)
	}
	if diff := cmp.Diff(repositoryInjection, injection); diff != "" {
		t.Errorf("injection markers on the repository (-want +got):\n%s", diff)
	}
}

// maxRepositoryFindings bounds the false positives on the repository
// (see TestFalsePositivesOnRepository's log for each).
const maxRepositoryFindings = 0

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// repositoryPersonalData is what the personal-data rules find in the
// repository outside this package (TestFalsePositivesOnRepository logs
// each): true matches only, the example addresses of the docs and tests
// (alice@example.com and others at example.com, bridge.example.com, pdp.example.com
// and a.example.com, and the egress rules test's user@api.github.com, a URL user part),
// among them the labels tests' evil@example.com); no card number, IBAN
// or phone number. Test values elsewhere are assembled at run time, as
// secrets are, so that they do not count here.
var repositoryPersonalData = map[string]int{"email": 20}

// repositoryInjection is what the injection rules find in the repository
// outside this package (TestFalsePositivesOnRepository logs each): true
// matches only: the injected tool descriptions of the pinning tests
// (internal/pin's "Ignore previous instructions", three times, and
// gateway's <IMPORTANT> wrapper, opened and closed), the labels tests'
// injected page (integration/labels_test.go, once as written and six
// times base64-encoded in the payloads of the recorded histories
// workflows/testdata/labels_v1_run*.json); no false positive. Test values
// elsewhere are assembled at run time.
var repositoryInjection = map[string]int{"injection-ignore-instructions": 4, "injection-system-impersonation": 2, "injection-encoded-instructions": 6}
