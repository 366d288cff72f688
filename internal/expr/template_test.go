package expr

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTemplate(t *testing.T) {
	vars := map[string]any{
		"vars": map[string]any{"dir": "/tmp/x", "n": 3.0, "tags": []any{"a", "b"}},
		"steps": map[string]any{
			"mk": map[string]any{"result": map[string]any{"content": "ok"}, "outcome": "ok"},
		},
		"task": map[string]any{"id": "t1", "plan": "seed"},
	}
	tests := []struct {
		name string
		in   any
		want any
	}{
		{name: "no placeholders", in: map[string]any{"a": "b", "n": 1.0, "l": []any{true, nil}}, want: map[string]any{"a": "b", "n": 1.0, "l": []any{true, nil}}},
		{name: "interpolated", in: "${{ vars.dir }}/README.md", want: "/tmp/x/README.md"},
		{name: "whole keeps the type", in: "${{ vars.tags }}", want: []any{"a", "b"}},
		{name: "whole number", in: "${{ vars.n }}", want: 3.0},
		{name: "non-strings interpolated as JSON", in: "n=${{ vars.n }} tags=${{ vars.tags }} ${{ 1 + 1 }}", want: "n=3 tags=[\"a\",\"b\"] 2"},
		{name: "several", in: "${{ task.plan }}-${{ task.id }}", want: "seed-t1"},
		{name: "step result", in: map[string]any{"obs": []any{"${{ steps.mk.result.content }}", "fixed"}}, want: map[string]any{"obs": []any{"ok", "fixed"}}},
		{name: "braces inside", in: `${{ {"a": {"b": "}}"}}.a.b }}`, want: "}}"},
		{name: "escaped", in: "$${{ not an expression }} ${{ vars.dir }}", want: "${{ not an expression }} /tmp/x"},
		{name: "escaped only", in: "cost: $${{", want: "cost: ${{"},
		{name: "spaces around are text", in: " ${{ vars.n }}", want: " 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl, err := CompileTemplate(Step, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.Eval(vars)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Eval (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTemplateDoesNotChangeItsValue(t *testing.T) {
	in := map[string]any{"a": "${{ vars.x }}", "l": []any{"${{ vars.x }}"}}
	tpl, err := CompileTemplate(Step, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tpl.Eval(map[string]any{"vars": map[string]any{"x": "y"}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"a": "${{ vars.x }}", "l": []any{"${{ vars.x }}"}}, in); diff != "" {
		t.Errorf("the value changed (-want +got):\n%s", diff)
	}
}

func TestCompileTemplateErrors(t *testing.T) {
	in := map[string]any{
		"content": "${{ steps.x.result. }}",
		"items":   []any{"ok", "${{ before }}"},
		"open":    "${{ vars.dir",
		"empty":   "a ${{ }} b",
		"odd":     struct{}{},
	}
	_, err := CompileTemplate(Step, in)
	var tes TemplateErrors
	if !errors.As(err, &tes) {
		t.Fatalf("error is %T, want TemplateErrors: %v", err, err)
	}
	var got []string
	for _, e := range tes {
		got = append(got, e.Error())
	}
	want := []string{
		"content: ${{ steps.x.result. }}: Syntax error: ",
		"empty: ${{ }} is empty; write an expression between ${{ and }}",
		"items[1]: ${{ before }}: undeclared reference to 'before'",
		`odd: a struct {} is not a JSON value`,
		`open: "${{ vars.dir" has no closing }}; end the expression with }} (write $${{ for a literal ${{)`,
	}
	if len(got) != len(want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d = %q, want it to start with %q", i, got[i], want[i])
		}
	}
}

func TestTemplateEvalError(t *testing.T) {
	tpl, err := CompileTemplate(Step, map[string]any{"a": []any{"x ${{ steps.gone.result }}"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Eval(map[string]any{"steps": map[string]any{}})
	if want := "a[0]: ${{ steps.gone.result }}: no such key: gone"; err == nil || err.Error() != want {
		t.Errorf("Eval = %v, want %q", err, want)
	}
}

func TestTemplateReferences(t *testing.T) {
	tpl, err := CompileTemplate(Step, map[string]any{
		"a": "${{ steps.write.result.content }} ${{ steps['mk'].outcome }}",
		"b": []any{"${{ steps.write.outcome }}", "${{ vars.dir }}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"mk", "write"}, tpl.References()); diff != "" {
		t.Errorf("References (-want +got):\n%s", diff)
	}
	var paths []string
	for _, p := range tpl.Placeholders() {
		paths = append(paths, p.Path+" "+p.Program.Source())
	}
	want := []string{"a steps.write.result.content", "a steps['mk'].outcome", "b[0] steps.write.outcome", "b[1] vars.dir"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("Placeholders (-want +got):\n%s", diff)
	}
}

func TestIsPlaceholder(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"${{ a == b }}", "a == b", true},
		{"a == b", "", false},
		{"x${{ a }}", "", false},
		{"${{ a }}${{ b }}", "", false},
	} {
		got, ok := IsPlaceholder(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("IsPlaceholder(%q) = %q, %v", tt.in, got, ok)
		}
	}
}
