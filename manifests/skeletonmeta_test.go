package manifests

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// listed is v as a client decodes it from a tools/list answer.
func listed(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// flatComments is text with comment marks and line breaks as spaces, so
// that a wrapped comment reads as one line.
func flatComments(text string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(text, "#", " ")), " ")
}

// TestSkeletonFromDeclaredMetadata: a skeleton of an upstream that lists
// its tools as airlock does (risk and recovery metadata in _meta) says what
// the upstream's manifest said: risk, side effects, data access level,
// idempotency, approval with its quorum, and the capture and compensation
// (else chain included), although the annotations say otherwise.
func TestSkeletonFromDeclaredMetadata(t *testing.T) {
	write := &Tool{SideEffects: []SideEffect{SideEffectWrite}, DataAccessLevel: DataConfidential, Risk: RiskHigh, Idempotent: true,
		Approval: &Approval{Group: "ops", Quorum: 3},
		Capture:  &Call{Tool: "read_file", Args: map[string]string{"path": "args.path"}},
		Compensation: &Call{Tool: "write_file", Args: map[string]string{"path": "args.path", "content": "before.content"}, When: "before != null",
			Else: &Call{Tool: "delete_file", Args: map[string]string{"path": `args.path + ""`}}}}
	del := &Tool{SideEffects: []SideEffect{SideEffectDelete, SideEffectSend}, DataAccessLevel: DataSensitive, Risk: RiskCritical}
	read := &Tool{SideEffects: []SideEffect{SideEffectRead}, DataAccessLevel: DataPublic, Risk: RiskLow, Idempotent: true}
	exposed := func(n string) string { return n } // the upstream lists its names unprefixed
	meta := func(d *Tool, decision string, quorum int) map[string]any {
		ses := make([]string, len(d.SideEffects))
		for i, s := range d.SideEffects {
			ses[i] = string(s)
		}
		return map[string]any{
			MetaRisk:     listed(t, DescribeRisk(ses, d.DataAccessLevel, d.Risk, d.Idempotent, d.Compensable(), true, decision, quorum, false)),
			MetaRecovery: listed(t, d.Recovery(exposed)),
		}
	}
	yes := true
	lying := &ToolHints{ReadOnlyHint: true, IdempotentHint: false, OpenWorldHint: &yes}
	tools := []*UpstreamTool{
		{Name: "write_file", Annotations: lying, Meta: meta(write, "require_approval", 3)},
		{Name: "delete_file", Annotations: lying, Meta: meta(del, "require_approval", 1)},
		{Name: "read_file", Meta: meta(read, "allow", 0)},
	}
	text, st := Skeleton(Server{Name: "files", HTTP: &HTTPServer{URL: "http://up/mcp"}}, "test", tools, time.Unix(0, 0))
	m := parseSkeleton(t, text)
	if st.Declared != 3 {
		t.Fatalf("declared %d\n%s", st.Declared, text)
	}
	got := m.Tools["write_file"]
	if d := cmp.Diff(write.Capture, got.Capture); d != "" {
		t.Errorf("capture (-declared +skeleton):\n%s\n%s", d, text)
	}
	if d := cmp.Diff(write.Compensation, got.Compensation); d != "" {
		t.Errorf("compensation (-declared +skeleton):\n%s\n%s", d, text)
	}
	for name, want := range map[string]*Tool{"write_file": write, "delete_file": del, "read_file": read} {
		g := m.Tools[name]
		if !cmp.Equal(g.SideEffects, want.SideEffects) || g.Risk != want.Risk || g.DataAccessLevel != want.DataAccessLevel || g.Idempotent != want.Idempotent {
			t.Errorf("%s: skeleton %v %s %s idempotent=%v, manifest %v %s %s %v\n%s", name, g.SideEffects, g.Risk, g.DataAccessLevel, g.Idempotent,
				want.SideEffects, want.Risk, want.DataAccessLevel, want.Idempotent, text)
		}
	}
	if a := got.Approval; a == nil || a.Group != "CHANGE-ME" || a.Quorum != 3 {
		t.Errorf("write_file approval = %+v, want CHANGE-ME with quorum 3", a)
	}
	if a := m.Tools["delete_file"].Approval; a == nil || a.Quorum != 0 {
		t.Errorf("delete_file approval = %+v, want CHANGE-ME, default quorum", a)
	}
	if m.Tools["read_file"].Approval != nil || m.Tools["read_file"].Compensation != nil {
		t.Errorf("read_file = %+v, want no approval nor compensation", m.Tools["read_file"])
	}
	if flat := flatComments(text); !strings.Contains(flat, "taken from what the server declares (airlock.dev/risk)") || !strings.Contains(flat, "as the server declares them (airlock.dev/recovery)") {
		t.Errorf("the skeleton does not say where values came from:\n%s", text)
	}
}

// TestSkeletonHostileDeclaredMetadata: declared metadata a manifest
// cannot hold is named and left out, and the skeleton still validates.
func TestSkeletonHostileDeclaredMetadata(t *testing.T) {
	deep := map[string]any{"tool": "t"}
	for range 40 {
		deep = map[string]any{"tool": "t", "when": "true", "else": deep}
	}
	cases := []struct {
		name string
		meta map[string]any
		want string // in the skeleton
		risk Risk   // the tool's risk in the skeleton
		ses  []SideEffect
	}{
		{"wrong types", map[string]any{MetaRisk: map[string]any{"riskLevel": 7}}, "is not the shape airlock lists", RiskHigh, nil},
		{"not an object", map[string]any{MetaRisk: "low", MetaRecovery: []any{1}}, "is not the shape airlock lists", RiskHigh, nil},
		{"unknown values", map[string]any{MetaRisk: map[string]any{"riskLevel": "trivial", "sideEffects": []any{"read", "rm -rf /", "none"}, "dataAccessLevel": "top"}},
			`riskLevel "trivial", side effect "rm -rf /", dataAccessLevel "top", which a manifest cannot hold`, RiskHigh, []SideEffect{SideEffectRead}},
		{"huge", map[string]any{MetaRisk: map[string]any{"riskLevel": "low", "pad": strings.Repeat("x", maxDeclaredMeta)}}, "over 65536; ignored", RiskHigh, nil},
		{"lower than the hints", map[string]any{MetaRisk: map[string]any{"riskLevel": "low", "sideEffects": []any{"read"}}},
			"the declared riskLevel low is lower than the high the annotations suggest (MCP's defaults where unset)", RiskLow, []SideEffect{SideEffectRead}},
		{"quorum huge", map[string]any{MetaRisk: map[string]any{"riskLevel": "high", "quorum": 1e9}}, "approval by 20", RiskHigh, nil},
		{"compensation of an undeclared tool", map[string]any{MetaRecovery: map[string]any{"compensable": true, "compensation": map[string]any{"tool": "elsewhere__undo"}}},
			`"elsewhere__undo" is not declared in this manifest`, RiskHigh, nil},
		{"compensation that does not compile", map[string]any{MetaRecovery: map[string]any{"compensable": true, "compensation": map[string]any{"tool": "t", "arguments": map[string]any{"x": "args.(("}}}},
			"this manifest cannot hold", RiskHigh, nil},
		{"compensation using before without capture", map[string]any{MetaRecovery: map[string]any{"compensable": true, "compensation": map[string]any{"tool": "t", "arguments": map[string]any{"x": "before.x"}}}},
			"uses before, but the tool has no capture", RiskHigh, nil},
		{"bidi override", map[string]any{MetaRecovery: map[string]any{"compensable": true, "compensation": map[string]any{"tool": "t", "arguments": map[string]any{"x": "\"safe\u202e\" + args.x"}}}},
			"control or invisible characters", RiskHigh, nil},
		{"endless else", map[string]any{MetaRecovery: map[string]any{"compensable": true, "compensation": deep}}, "else chain is longer than 16", RiskHigh, nil},
		{"long expression", map[string]any{MetaRecovery: map[string]any{"compensable": true, "compensation": map[string]any{"tool": "t", "when": strings.Repeat("true && ", 400) + "true"}}},
			"over 2000", RiskHigh, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text, _ := Skeleton(Server{Name: "odd", HTTP: &HTTPServer{URL: "http://up/mcp"}}, "test", []*UpstreamTool{{Name: "t", Meta: c.meta}}, time.Unix(0, 0))
			m := parseSkeleton(t, text)
			if !strings.Contains(flatComments(text), c.want) {
				t.Errorf("skeleton lacks %q:\n%s", c.want, text)
			}
			tl := m.Tools["t"]
			if tl.Risk != c.risk || tl.Compensation != nil || tl.Capture != nil {
				t.Errorf("tool = %+v, want risk %s and no capture or compensation\n%s", tl, c.risk, text)
			}
			if c.ses != nil && !cmp.Equal(tl.SideEffects, c.ses) {
				t.Errorf("side effects %v, want %v", tl.SideEffects, c.ses)
			}
			if strings.Contains(text, "\u202e") {
				t.Errorf("skeleton carries a bidi override:\n%q", text)
			}
		})
	}
}

// TestHintsReadBack: the annotations airlock lists for a declaration
// (HintsOf) read back, by a skeleton of a server that declares nothing
// else, as side effects that include the declared kinds.
func TestHintsReadBack(t *testing.T) {
	for _, tc := range []struct {
		ses  []string
		want []SideEffect
	}{
		{[]string{"read"}, effects(SideEffectRead)},
		{[]string{"none"}, effects(SideEffectRead)},
		{[]string{"write"}, effects(SideEffectWrite)},
		{[]string{"delete"}, effects(SideEffectWrite, SideEffectDelete)},
		{[]string{"write", "send"}, effects(SideEffectWrite, SideEffectSend)},
		{[]string{"pay"}, effects(SideEffectWrite, SideEffectSend)},
		{[]string{"exec"}, effects(SideEffectWrite, SideEffectDelete)},
	} {
		h := HintsOf(tc.ses, false)
		g := guessTool(&UpstreamTool{Name: "t", Annotations: &h})
		if !cmp.Equal(g.sideEffects, tc.want) {
			t.Errorf("%v: hints %+v read back as %v, want %v", tc.ses, h, g.sideEffects, tc.want)
		}
	}
}
