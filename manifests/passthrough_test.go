package manifests_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/manifests"
)

// The resources and prompts blocks: optional, validated like a tool's
// data_access_level, strict about their fields.
func TestValidatePassthrough(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "absent",
			src:  head + readTool,
		},
		{
			name: "both set",
			src:  head + readTool + "resources:\n  data_access_level: confidential\nprompts:\n  data_access_level: public\n",
		},
		{
			name: "flow style",
			src:  head + readTool + "resources: {data_access_level: restricted}\n",
		},
		{
			name: "only resources, no tools",
			src:  strings.TrimSuffix(head, "tools:\n") + "resources:\n  data_access_level: internal\n",
		},
		{
			name: "only prompts, no tools",
			src:  strings.TrimSuffix(head, "tools:\n") + "prompts:\n  data_access_level: internal\n",
		},
		{
			name: "level missing",
			src:  head + readTool + "resources: {}\n",
			want: []string{`m.yaml:10: resources.data_access_level: is required; use one of public, internal, confidential, sensitive, restricted`},
		},
		{
			name: "level unknown",
			src:  head + readTool + "prompts:\n  data_access_level: secret\n",
			want: []string{`m.yaml:11: prompts.data_access_level: "secret" is not a data access level; use one of public, internal, confidential, sensitive, restricted`},
		},
		{
			name: "empty block",
			src:  head + readTool + "resources:\n",
			want: []string{`m.yaml:10: resources: is empty; set data_access_level (who may see the upstream's resources), or remove resources to keep them hidden`},
		},
		{
			name: "empty prompts block without tools",
			src:  strings.TrimSuffix(head, "tools:\n") + "prompts:\n",
			want: []string{`m.yaml:5: prompts: is empty; set data_access_level (who may see the upstream's prompts), or remove prompts to keep them hidden`},
		},
		{
			name: "no tools, resources or prompts",
			src:  strings.TrimSuffix(head, "tools:\n"),
			want: []string{`m.yaml:1: tools: no tools declared; declare each upstream tool to expose (tools not listed are not exposed)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, problemsOf(t, tt.src)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodePassthroughProblems(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "unknown field in resources",
			src:  head + readTool + "resources:\n  data_access_level: internal\n  subscribe: true\n",
			want: []string{`m.yaml:12: resources.subscribe: unknown field; known fields are data_access_level`},
		},
		{
			name: "misspelt level field in prompts",
			src:  head + readTool + "prompts:\n  data_acess_level: internal\n",
			want: []string{`m.yaml:11: prompts.data_acess_level: unknown field; did you mean "data_access_level"?`},
		},
		{
			name: "scalar instead of a block",
			src:  head + readTool + "resources: internal\n",
			want: []string{`m.yaml:10: resources: expected a mapping (key: value lines), got "internal"`},
		},
		{
			name: "level as a list",
			src:  head + readTool + "prompts: {data_access_level: [public]}\n",
			want: []string{`m.yaml:10: prompts.data_access_level: expected a single value, got a list`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := manifests.Parse("m.yaml", []byte(tt.src))
			if err == nil {
				t.Fatal("Parse succeeded, want problems")
			}
			if diff := cmp.Diff(tt.want, errorLines(t, err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePassthroughValues(t *testing.T) {
	m, err := manifests.Parse("m.yaml", []byte(head+readTool+"resources:\n  data_access_level: sensitive\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Resources == nil || m.Resources.DataAccessLevel != manifests.DataSensitive {
		t.Errorf("resources = %+v, want data_access_level sensitive", m.Resources)
	}
	if m.Prompts != nil {
		t.Errorf("prompts = %+v, want nil (absent block: not exposed)", m.Prompts)
	}
	if got := m.Lines.Line("resources.data_access_level"); got != 11 {
		t.Errorf("line of resources.data_access_level = %d, want 11", got)
	}
}
