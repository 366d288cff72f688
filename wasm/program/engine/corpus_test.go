package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// TestCorpus runs programs of the kind models write (Python habits
// included) against the fake filesystem host. Each file's first line is
// "# expect: ok" or "# expect: invalid|error: <substring of the hint>".
// A program that ends otherwise (above all: fails without its hint)
// fails the test; the log gives the share that runs as written.
func TestCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/corpus/*.star")
	if err != nil || len(files) < 20 {
		t.Fatalf("corpus: %d programs (%v), want at least 20", len(files), err)
	}
	asWritten, hinted := 0, 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(src), "\n")
		expect, ok := strings.CutPrefix(first, "# expect: ")
		if !ok {
			t.Errorf("%s: first line %q is not # expect: ...", file, first)
			continue
		}
		outcome, want, _ := strings.Cut(expect, ": ")
		d := run(t, string(src), newHost(t, fakeFS))
		switch {
		case d.Outcome != outcome:
			t.Errorf("%s: outcome %s (%s, line %d), want %s", file, d.Outcome, d.Error, d.Line, expect)
		case outcome == wire.OutcomeOK:
			asWritten++
			t.Logf("%s: ok: %s", filepath.Base(file), d.Result)
		case !strings.Contains(d.Error, want) || d.Line == 0:
			t.Errorf("%s: %s without the hint %q or a line: %s (line %d)", file, d.Outcome, want, d.Error, d.Line)
		default:
			hinted++
			t.Logf("%s: %s, line %d: %s", filepath.Base(file), d.Outcome, d.Line, d.Error)
		}
	}
	t.Logf("corpus: %d/%d run as written, %d/%d fail with an actionable hint, %d/%d either way",
		asWritten, len(files), hinted, len(files), asWritten+hinted, len(files))
}
