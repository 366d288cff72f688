package manifests_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/manifests"
)

// A field of type any takes any YAML value, and the lines of what is
// inside it are recorded.
func TestDecodeYAMLAny(t *testing.T) {
	type doc struct {
		Name string         `yaml:"name"`
		Vars map[string]any `yaml:"vars"`
		One  any            `yaml:"one"`
	}
	src := `name: x
vars:
  a: 1
  b:
    c: [x, {d: true}]
  e: &e {f: g}
  h: *e
one: [1, 2]
`
	var d doc
	lines, ps := manifests.DecodeYAML("d.yaml", []byte(src), &d)
	if len(ps) > 0 {
		t.Fatalf("problems: %v", manifests.Problems(ps))
	}
	want := doc{Name: "x", One: []any{1, 2}, Vars: map[string]any{
		"a": 1,
		"b": map[string]any{"c": []any{"x", map[string]any{"d": true}}},
		"e": map[string]any{"f": "g"},
		"h": map[string]any{"f": "g"},
	}}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	for path, line := range map[string]int{"vars.a": 3, "vars.b.c": 5, "vars.b.c[1]": 5, "vars.b.c[1].d": 5, "vars.h.f": 6, "one[1]": 8} {
		if got := lines.Line(path); got != line {
			t.Errorf("line of %s = %d, want %d", path, got, line)
		}
	}

	_, ps = manifests.DecodeYAML("d.yaml", []byte("vars:\n  a:\n    1: x\n    true: y\n"), &d)
	var got []string
	for _, p := range ps {
		got = append(got, p.Error())
	}
	wantPs := []string{
		`d.yaml:3: vars.a.1: key 1 is not a string; quote it ("1") or use a list`,
		`d.yaml:4: vars.a.true: key true is not a string; quote it ("true") or use a list`,
	}
	if diff := cmp.Diff(wantPs, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestDecodeYAMLRecursiveAlias(t *testing.T) {
	var d struct {
		Vars map[string]any `yaml:"vars"`
	}
	_, ps := manifests.DecodeYAML("d.yaml", []byte("vars: &v\n  a: *v\n"), &d)
	var got []string
	for _, p := range ps {
		got = append(got, p.Error())
	}
	want := []string{`d.yaml:2: vars.a: the alias *v is inside the value it refers to; write the value out`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
