package manifests

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// parseSkeleton loads a skeleton as the gateway would and fails the test
// on any problem.
func parseSkeleton(t *testing.T, text string) *Manifest {
	t.Helper()
	m, err := Parse("skeleton.yaml", []byte(text))
	if err != nil {
		t.Fatalf("skeleton does not parse: %v\n%s", err, text)
	}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("skeleton does not validate: %v\n%s", Problems(ps), text)
	}
	return m
}

func effects(ses ...SideEffect) []SideEffect { return ses }

func TestGuessTool(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name     string
		ann      *ToolHints
		ses      []SideEffect
		risk     Risk
		idem     bool
		approval bool
	}{
		{"no annotations", nil, effects("write", "delete"), RiskHigh, false, true},
		{"read only", &ToolHints{ReadOnlyHint: true}, effects("read"), RiskLow, true, false},
		{"read only, open world", &ToolHints{ReadOnlyHint: true, OpenWorldHint: &yes}, effects("read", "send"), RiskMedium, true, false},
		{"additive, idempotent", &ToolHints{DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no}, effects("write"), RiskMedium, true, false},
		{"destructive, open world", &ToolHints{DestructiveHint: &yes, OpenWorldHint: &yes}, effects("write", "delete", "send"), RiskHigh, false, true},
		{"hints unset but idempotent", &ToolHints{IdempotentHint: true}, effects("write", "delete"), RiskHigh, true, true},
	} {
		g := guessTool(&UpstreamTool{Name: "t", Annotations: tc.ann, InputSchema: map[string]any{"type": "object"}})
		if !reflect.DeepEqual(g.sideEffects, tc.ses) || g.risk != tc.risk || g.idempotent != tc.idem || g.approval != tc.approval {
			t.Errorf("%s: got %v %s idempotent=%v approval=%v; want %v %s %v %v", tc.name, g.sideEffects, g.risk, g.idempotent, g.approval, tc.ses, tc.risk, tc.idem, tc.approval)
		}
	}
}

// TestSkeletonOpenWorld: openWorldHint: true makes the skeleton declare
// open_world: true (its results are untrusted content, task.untrusted),
// which loads; false or absent declares none.
func TestSkeletonOpenWorld(t *testing.T) {
	yes, no := true, false
	tools := []*UpstreamTool{
		{Name: "fetch", Annotations: &ToolHints{ReadOnlyHint: true, OpenWorldHint: &yes}, InputSchema: map[string]any{"type": "object"}},
		{Name: "local", Annotations: &ToolHints{ReadOnlyHint: true, OpenWorldHint: &no}, InputSchema: map[string]any{"type": "object"}},
		{Name: "unsaid", Annotations: &ToolHints{ReadOnlyHint: true}, InputSchema: map[string]any{"type": "object"}},
	}
	text, _ := Skeleton(Server{Name: "web", Stdio: &StdioServer{Command: "web-mcp"}}, "test", tools, time.Unix(0, 0))
	m := parseSkeleton(t, text)
	if !m.Tools["fetch"].OpenWorld || m.Tools["local"].OpenWorld || m.Tools["unsaid"].OpenWorld {
		t.Errorf("open_world: fetch %v, local %v, unsaid %v; want only fetch\n%s", m.Tools["fetch"].OpenWorld, m.Tools["local"].OpenWorld, m.Tools["unsaid"].OpenWorld, text)
	}
}

// TestSkeletonHostileDefinitions: whatever the server says about its tools
// (newlines, YAML syntax, terminal escapes, odd names), the skeleton still
// loads, and names a manifest cannot declare are skipped with a note.
func TestSkeletonHostileDefinitions(t *testing.T) {
	tools := []*UpstreamTool{
		{Name: "true", Description: "line one\nserver:\n  name: evil\n\x1b[8mhidden\u2028next\u0085nel\r\ntools: {}", InputSchema: map[string]any{"type": "object"}},
		{Name: "dotted.name", Description: "not exposable", InputSchema: map[string]any{"type": "object"}},
		{Name: "has space", InputSchema: map[string]any{"type": "object"}},
		{Name: "ok-tool", Description: "# not a comment: \"quotes\" and 'single' & {braces}", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}},
	}
	srv := Server{Name: "odd", Stdio: &StdioServer{Command: "npx", Args: []string{"-y", "pkg: with colon", "yes"}, Env: map[string]string{"TOKEN": "${TOKEN}"}}}
	text, st := Skeleton(srv, "test", tools, time.Unix(0, 0))
	m := parseSkeleton(t, text)
	if st.Declared != 2 || st.Skipped != 2 {
		t.Fatalf("declared %d skipped %d, want 2 and 2\n%s", st.Declared, st.Skipped, text)
	}
	if _, ok := m.Tools["true"]; !ok {
		t.Errorf("tool named true missing:\n%s", text)
	}
	if m.Server.Name != "odd" || !reflect.DeepEqual(m.Server.Stdio.Args, []string{"-y", "pkg: with colon", "yes"}) || m.Server.Stdio.Env["TOKEN"] != "${TOKEN}" {
		t.Errorf("server = %+v", m.Server.Stdio)
	}
	if strings.Contains(text, "\x1b") || strings.Contains(text, "\u2028") || strings.Contains(text, "\u0085") {
		t.Errorf("skeleton carries raw control characters:\n%q", text)
	}
	if !strings.Contains(text, "SKIPPED \"dotted.name\"") || !strings.Contains(text, "pin the package version") {
		t.Errorf("skeleton lacks the skip or version notes:\n%s", text)
	}
}
