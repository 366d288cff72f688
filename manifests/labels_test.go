package manifests

import (
	"strings"
	"testing"
)

// TestOpenWorldField: open_world is a boolean; anything else is a load
// error naming the file, line and field, and a duplicate key is refused
// like any other (a second value could otherwise lower the first).
func TestOpenWorldField(t *testing.T) {
	const head = "server: {name: web, stdio: {command: web-mcp}}\ntools:\n  fetch:\n    side_effects: [read]\n    data_access_level: public\n    risk: low\n    idempotent: true\n"
	m, err := Parse("web.yaml", []byte(head+"    open_world: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil || !m.Tools["fetch"].OpenWorld {
		t.Fatalf("open_world: true: %v, %v", err, m.Tools["fetch"].OpenWorld)
	}
	for name, tail := range map[string]string{
		"a string":      "    open_world: \"sometimes\"\n",
		"a list":        "    open_world: [true]\n",
		"duplicate key": "    open_world: true\n    open_world: false\n",
	} {
		_, err := Parse("web.yaml", []byte(head+tail))
		if err == nil || !strings.Contains(err.Error(), "web.yaml") {
			t.Errorf("%s: %v, want an error naming web.yaml", name, err)
		}
	}
}
