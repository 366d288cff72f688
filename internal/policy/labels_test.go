package policy

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// trifectaRule is the documented rule template (airlock.yaml, README):
// approval for an egress call in a task that has read above internal and
// ingested untrusted content.
const trifectaRule = `task.untrusted && level(task.read_level) > level("internal") &&
	(tool.side_effects.exists(s, s in ["send", "pay"]))`

func sendMail() Tool {
	return Tool{Name: "mail__send", Server: "mail", Upstream: "send", Decl: &manifests.Tool{
		SideEffects: []manifests.SideEffect{manifests.SideEffectSend}, DataAccessLevel: manifests.DataInternal, Risk: manifests.RiskMedium}}
}

// TestLabelRules: rules read task.read_level, task.untrusted and
// task.egress, and level() orders data access levels; a task without
// labels has none raised.
func TestLabelRules(t *testing.T) {
	p, err := Compile(Config{File: "airlock.yaml", Rules: []Rule{
		{Name: "trifecta", When: trifectaRule, Effect: api.RequireApproval, Group: "security",
			Reason: "this call sends data out of a task that read confidential data and ingested untrusted content"},
		{Name: "one-egress", When: `size(task.egress) > 0 && !(tool.name in task.egress)`, Effect: api.Deny, Reason: "one egress tool per task"},
		{Name: "bad-level", When: `level(task.read_level) > level("top-secret")`, Effect: api.Deny},
	}})
	if err != nil {
		t.Fatal(err)
	}
	in := func(l *api.Labels, tool Tool) Input {
		return Input{Principal: api.Principal{Name: "alice", DataLevel: manifests.DataRestricted, Permissions: []string{"*"}},
			Tool: tool, Args: []byte(`{}`), Task: Task{ID: "t1", AllowTools: []string{"*"}, Labels: l}}
	}
	// bad-level errors on every call that reaches it (an unknown level
	// name): the call is denied, naming the rule; it is reached only when
	// the rules above it do not match.
	tests := []struct {
		name   string
		labels *api.Labels
		tool   Tool
		effect api.Effect
		rule   string
		reason string
	}{
		{"trifecta: send after confidential and untrusted", &api.Labels{ReadLevel: "confidential", Untrusted: true}, sendMail(), api.RequireApproval, "trifecta", "ingested untrusted"},
		{"trifecta: restricted counts as above internal", &api.Labels{ReadLevel: "restricted", Untrusted: true, Egress: []string{"mail__send"}}, sendMail(), api.RequireApproval, "trifecta", ""},
		{"internal is not above internal", &api.Labels{ReadLevel: "internal", Untrusted: true}, sendMail(), api.Deny, "bad-level", "top-secret"},
		{"trusted content: no approval", &api.Labels{ReadLevel: "confidential"}, sendMail(), api.Deny, "bad-level", ""},
		{"no labels (task keeps none)", nil, sendMail(), api.Deny, "bad-level", "not a data access level"},
		{"another egress tool than the one that ran", &api.Labels{Egress: []string{"pay__charge"}}, sendMail(), api.Deny, "one-egress", "one egress tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.Decide(in(tt.labels, tt.tool))
			if got.Effect != tt.effect || got.Rule != tt.rule || !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("got %s by %q (%s), want %s by %q containing %q", got.Effect, got.Rule, got.Reason, tt.effect, tt.rule, tt.reason)
			}
		})
	}
	if !p.ReadsTaskCounters("mail__send") {
		t.Error("a rule over the task's labels must keep the tool off the fast path (its labels may not be committed yet)")
	}
}

// TestLevelFunction: level() ranks the manifests' levels in their order,
// "" below public; an unknown name fails (and the call is denied).
func TestLevelFunction(t *testing.T) {
	order := []string{"", "public", "internal", "confidential", "sensitive", "restricted"}
	var conds []string
	for i := 1; i < len(order); i++ {
		conds = append(conds, `level("`+order[i-1]+`") < level("`+order[i]+`")`)
	}
	p, err := Compile(Config{File: "airlock.yaml", Rules: []Rule{
		{Name: "ordered", When: strings.Join(conds, " && ") + ` && level("") == -1 && level("restricted") == 4`, Effect: api.Deny, Reason: "ordered"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := p.Decide(Input{Principal: api.Principal{Name: "a", DataLevel: manifests.DataRestricted, Permissions: []string{"*"}},
		Tool: sendMail(), Args: []byte(`{}`), Task: Task{ID: "t", AllowTools: []string{"*"}}})
	if got.Effect != api.Deny || got.Rule != "ordered" {
		t.Fatalf("levels are not ordered as the manifests order them: %+v", got)
	}
	if _, err := Compile(Config{Rules: []Rule{{Name: "x", When: `level(1) > 0`, Effect: api.Deny}}}); err == nil {
		t.Error("level(1) compiled; level takes a string")
	}
	for _, l := range api.DataLevels {
		if _, ok := levels[manifests.DataLevel(l)]; !ok {
			t.Errorf("api.DataLevels has %q, which policy does not order", l)
		}
	}
	if len(api.DataLevels) != len(levels) {
		t.Errorf("api.DataLevels %v and policy's levels differ", api.DataLevels)
	}
	for l, r := range levels {
		if got, ok := api.LevelRank(string(l)); !ok || got != r {
			t.Errorf("LevelRank(%q) = %d, policy ranks it %d", l, got, r)
		}
	}
}

// BenchmarkTrifectaRule is the cost of a decision under the trifecta
// template, for a send in a labelled task (the rule holds) and a read in
// a clean one (it does not).
func BenchmarkTrifectaRule(b *testing.B) {
	p, err := Compile(Config{File: "airlock.yaml", Rules: []Rule{{Name: "trifecta", When: trifectaRule, Effect: api.RequireApproval, Group: "ops"}}})
	if err != nil {
		b.Fatal(err)
	}
	none, err := Compile(Config{File: "airlock.yaml"})
	if err != nil {
		b.Fatal(err)
	}
	pr := api.Principal{Name: "alice", DataLevel: manifests.DataRestricted, Permissions: []string{"*"}}
	for _, bc := range []struct {
		name   string
		p      *Policy
		labels *api.Labels
	}{
		{"labelled send", p, &api.Labels{ReadLevel: "confidential", Untrusted: true, Egress: []string{"a__send", "b__send"}}},
		{"clean send", p, &api.Labels{}},
		{"no rules", none, &api.Labels{}},
	} {
		p := bc.p
		b.Run(bc.name, func(b *testing.B) {
			in := Input{Principal: pr, Tool: sendMail(), Args: []byte(`{"to":"x@example.com"}`), Task: Task{ID: "t1", AllowTools: []string{"*"}, Labels: bc.labels}}
			for b.Loop() {
				p.Decide(in)
			}
		})
	}
}

// TestToolOpenWorld: rules see the manifest's open_world as
// tool.open_world (a fetch after an egress, say).
func TestToolOpenWorld(t *testing.T) {
	p, err := Compile(Config{File: "airlock.yaml", Rules: []Rule{
		{Name: "no-fetch-after-send", When: `tool.open_world && size(task.egress) > 0`, Effect: api.Deny, Reason: "no fetching after sending"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	fetch := Tool{Name: "web__fetch", Server: "web", Upstream: "fetch", Decl: &manifests.Tool{
		SideEffects: []manifests.SideEffect{manifests.SideEffectRead}, DataAccessLevel: manifests.DataPublic, Risk: manifests.RiskLow, OpenWorld: true}}
	local := fetch
	d := *fetch.Decl
	d.OpenWorld = false
	local.Decl = &d
	sent := &api.Labels{Egress: []string{"mail__send"}}
	pr := api.Principal{Name: "a", DataLevel: manifests.DataRestricted, Permissions: []string{"*"}}
	for _, tc := range []struct {
		tool   Tool
		labels *api.Labels
		want   api.Effect
	}{{fetch, sent, api.Deny}, {fetch, nil, api.Allow}, {local, sent, api.Allow}} {
		got := p.Decide(Input{Principal: pr, Tool: tc.tool, Args: []byte(`{}`), Task: Task{ID: "t", AllowTools: []string{"*"}, Labels: tc.labels}})
		if got.Effect != tc.want {
			t.Errorf("open_world %v, labels %+v: %s (%s), want %s", tc.tool.Decl.OpenWorld, tc.labels, got.Effect, got.Reason, tc.want)
		}
	}
}
