package approver

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestChannelsImportNoOtherChannel: a channel (approver/slack, web,
// webhook) imports approver and never another channel, tests included;
// what two channels share belongs in approver. (approver importing a
// channel would be an import cycle, which the compiler refuses.)
func TestChannelsImportNoOtherChannel(t *testing.T) {
	const base = "github.com/airlock-run/airlock/approver/"
	channels := []string{"slack", "web", "webhook"}
	for _, ch := range channels {
		files, err := filepath.Glob(filepath.Join(ch, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in approver/%s: %v", ch, err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				other, ok := strings.CutPrefix(path, base)
				if ok && other != ch && !strings.HasPrefix(other, "internal/") {
					t.Errorf("approver/%s imports %s: channels import approver, never each other; move what they share into approver", f, path)
				}
			}
		}
	}
}
