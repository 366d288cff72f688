package integration

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/airlock-run/airlock/manifests"
)

// TestExampleCompensationsMatchServedSchemas checks every capture and
// compensation (each when/else branch) of the example manifests against
// the input schema the real npm server serves for its tool: each argument
// it passes is a property of that schema, and each required property is
// passed. A manifest can only be checked this way against a live upstream.
func TestExampleCompensationsMatchServedSchemas(t *testing.T) {
	t.Parallel()
	n := newNPMStack(t, stackOptions{})
	cs := n.connect(t, nil)
	waitTools(t, cs, "filesystem__write_file", "memory__create_entities")
	for _, m := range []string{"filesystem.yaml", "memory.yaml"} {
		man, err := manifests.Load(filepath.Join(repoRoot(), "manifests", "examples", m))
		if err != nil {
			t.Fatal(err)
		}
		schemas := map[string]struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}{}
		for _, ut := range n.pool.Status(man.Server.Name).Tools {
			b, _ := json.Marshal(ut.InputSchema)
			s := schemas[ut.Name]
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			schemas[ut.Name] = s
		}
		checked := 0
		for name, tool := range man.Tools {
			for field, c := range map[string]*manifests.Call{"capture": tool.Capture, "compensation": tool.Compensation} {
				for ; c != nil; c, field = c.Else, field+".else" {
					s, ok := schemas[c.Tool]
					if !ok {
						t.Errorf("%s: tools.%s.%s.tool: the server serves no tool %q", m, name, field, c.Tool)
						continue
					}
					var args []string
					for a := range c.Args {
						args = append(args, a)
						if _, ok := s.Properties[a]; !ok {
							t.Errorf("%s: tools.%s.%s.args.%s: %s takes no argument %q", m, name, field, a, c.Tool, a)
						}
					}
					sort.Strings(args)
					for _, r := range s.Required {
						if !slices.Contains(args, r) {
							t.Errorf("%s: tools.%s.%s: %s requires %q, which is not passed", m, name, field, c.Tool, r)
						}
					}
					checked++
				}
			}
		}
		if checked < 5 {
			t.Errorf("%s: only %d captures/compensations checked", m, checked)
		}
	}
}
