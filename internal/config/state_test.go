package config_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/config"
)

func loadState(t *testing.T, task string, files map[string]string) (*config.Snapshot, error) {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("fs"))
	for name, src := range files {
		write(t, filepath.Join(dir, name), src)
	}
	return config.Load(write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\ntask:\n"+task))
}

func TestTaskStateConfig(t *testing.T) {
	schema := `{"type":"object","properties":{"step":{"type":"integer"}}}`
	for _, tc := range []struct {
		name, task string
		files      map[string]string
		max        int
		schema     string
	}{
		{"limit only", "  state: {max_bytes: 8KiB}\n", nil, 8 << 10, ""},
		{"schema file", "  state: {schema: schemas/state.json}\n", map[string]string{"schemas/state.json": schema}, 0, schema},
		{"inline schema", "  state:\n    schema: {type: object, properties: {step: {type: integer}}}\n", nil, 0, schema},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, err := loadState(t, tc.task, tc.files)
			if err != nil {
				t.Fatal(err)
			}
			sc := snap.Config.StateConfig()
			if sc == nil || sc.MaxBytes != tc.max {
				t.Fatalf("state config %+v, want max %d", sc, tc.max)
			}
			var got, want any
			if tc.schema != "" {
				_ = json.Unmarshal(sc.Schema, &got)
				_ = json.Unmarshal([]byte(tc.schema), &want)
				if g, w := mustMarshal(got), mustMarshal(want); g != w {
					t.Errorf("schema %s, want %s", g, w)
				}
			}
		})
	}
	snap, err := loadState(t, "  max_calls: 5\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if sc := snap.Config.StateConfig(); sc != nil {
		t.Errorf("no task.state: state config %+v, want nil (the defaults)", sc)
	}
}

func mustMarshal(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestTaskStateProblems(t *testing.T) {
	for _, tc := range []struct {
		name, task string
		files      map[string]string
		want       string
	}{
		{"zero limit", "  state:\n    max_bytes: 0B\n", nil, "airlock.yaml:4: task.state.max_bytes: must be positive, got 0B"},
		{"limit too large", "  state:\n    max_bytes: 4MiB\n", nil, "airlock.yaml:4: task.state.max_bytes: is 4MiB, more than the 512KiB"},
		{"limit without unit", "  state:\n    max_bytes: 100\n", nil, "task.state.max_bytes"},
		{"missing schema file", "  state:\n    schema: nope.json\n", nil, "airlock.yaml:4: task.state.schema: cannot read the schema file"},
		{"schema file not JSON", "  state:\n    schema: s.json\n", map[string]string{"s.json": "type: object"}, "airlock.yaml:4: task.state.schema: is not a usable JSON schema"},
		{"inline schema wrong", "  state:\n    schema: {type: 5}\n", nil, "airlock.yaml:4: task.state.schema: is not a usable JSON schema"},
		{"schema a list", "  state:\n    schema: [1]\n", nil, "airlock.yaml:4: task.state.schema: is a []interface {}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadState(t, tc.task, tc.files)
			if err == nil {
				t.Fatalf("loaded; want %q", tc.want)
			}
			got := strings.Join(problems(t, err), "\n")
			if !strings.Contains(got, tc.want) {
				t.Fatalf("problems:\n%s\nwant %q", got, tc.want)
			}
		})
	}
}
