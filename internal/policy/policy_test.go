package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error, each must appear
	}{
		{
			name: "CEL errors name file, rule and cause, for every bad rule",
			cfg: Config{File: "conf/airlock.yaml", Rules: []Rule{
				{Name: "ok", When: "true", Effect: api.Allow},
				{Name: "syntax", When: "args.path ==", Effect: api.Deny},
				{Name: "typo", When: `principal.rol == "x"`, Effect: api.Deny},
				{Name: "undeclared", When: `agent == "x"`, Effect: api.Deny},
			}},
			want: []string{
				"conf/airlock.yaml: rules[1] syntax: ERROR: <input>:1:13: Syntax error",
				"conf/airlock.yaml: rules[2] typo: ERROR: <input>:1:10: undefined field 'rol'",
				"conf/airlock.yaml: rules[3] undeclared: ERROR: <input>:1:1: undeclared reference to 'agent'",
			},
		},
		{
			name: "non-bool rule",
			cfg:  Config{Rules: []Rule{{Name: "str", When: `principal.name`, Effect: api.Deny}, {Name: "dyn", When: `args.force`, Effect: api.Deny}}},
			want: []string{
				"policy: rules[0] str: condition is of type string, not bool",
				"policy: rules[1] dyn: condition is of type dyn, not bool",
			},
		},
		{
			name: "names, effects, groups, quorums",
			cfg: Config{File: "p.yaml", Rules: []Rule{
				{Name: "", When: "true", Effect: api.Deny},
				{Name: "a", When: "true", Effect: api.Deny},
				{Name: "a", When: "true", Effect: api.Allow},
				{Name: "b", When: "true", Effect: "block"},
				{Name: "c", When: "true", Effect: api.Deny, Group: "ops"},
				{Name: "d", When: "true", Effect: api.RequireApproval, Quorum: -1},
				{Name: "e", When: " ", Effect: api.Allow},
			}},
			want: []string{
				"p.yaml: rules[0] (unnamed): name is empty",
				"p.yaml: rules[2] a: name is already used by rules[1]",
				`p.yaml: rules[3] b: effect "block" is not an effect`,
				"p.yaml: rules[4] c: group and quorum apply only to require_approval rules",
				"p.yaml: rules[5] d: quorum must be at least 1, got -1",
				"p.yaml: rules[6] e: when is empty",
			},
		},
		{
			name: "limits and defaults",
			cfg: Config{File: "p.yaml", MaxArgBytes: -1, RiskDefaults: map[manifests.Risk]api.Effect{
				"extreme": api.Deny, manifests.RiskLow: "maybe",
			}},
			want: []string{
				"p.yaml: max_arg_bytes: must not be negative",
				`p.yaml: risk_defaults: "extreme" is not a risk tier`,
				`p.yaml: risk_defaults[low]: "maybe" is not an effect`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.cfg)
			if err == nil {
				t.Fatalf("Compile succeeded (%v), want errors", p)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			if lines := strings.Count(err.Error(), ": rules["); lines < strings.Count(strings.Join(tt.want, "\n"), ": rules[") {
				t.Errorf("%d rule errors, want at least %d:\n%v", lines, len(tt.want), err)
			}
		})
	}
}

func TestCompileRuleErrorType(t *testing.T) {
	_, err := Compile(Config{File: "f", Rules: []Rule{{Name: "x", When: "1", Effect: api.Deny}}})
	var re *RuleError
	if !errors.As(err, &re) {
		t.Fatalf("error %v is not a *RuleError", err)
	}
	if re.File != "f" || re.Index != 0 || re.Name != "x" {
		t.Errorf("RuleError = %+v", re)
	}
}

func TestCompileAcceptsExamples(t *testing.T) {
	// Rules an operator would write; they must compile as written.
	rules := []Rule{
		{Name: "no-secrets", When: `args.?path.orValue("").matches("(?i)\\.(env|pem|key)$")`, Effect: api.Deny, Reason: "secret files are off limits"},
		{Name: "bulk-delete", When: `"delete" in tool.side_effects && size(args.?paths.orValue([])) > 10`, Effect: api.RequireApproval, Group: "ops", Quorum: 2},
		{Name: "runaway", When: `task.calls > 200 || task.elapsed_seconds > 3600`, Effect: api.RequireApproval},
		{Name: "interns", When: `"intern" in principal.roles && tool.risk != "low"`, Effect: api.Deny},
		{Name: "public-reads", When: `tool.side_effects.all(s, s == "read") && tool.data_access_level == "public"`, Effect: api.Allow},
	}
	if _, err := Compile(Config{Rules: rules}); err != nil {
		t.Fatal(err)
	}
}

func TestVersion(t *testing.T) {
	base := func() Config {
		return Config{
			File: "a.yaml",
			Rules: []Rule{
				{Name: "r1", When: `tool.risk == "critical"`, Effect: api.Deny, Reason: "no"},
				{Name: "r2", When: `task.calls > 10`, Effect: api.RequireApproval, Group: "ops", Quorum: 2},
			},
		}
	}
	v0 := mustCompile(t, base()).Version()
	if len(v0) != 16 {
		t.Errorf("Version %q is not 16 hex digits", v0)
	}

	same := map[string]func(*Config){
		"compiled again":        func(*Config) {},
		"other file":            func(c *Config) { c.File = "b.yaml" },
		"explicit default size": func(c *Config) { c.MaxArgBytes = DefaultMaxArgBytes },
		"explicit default risk effect": func(c *Config) {
			c.RiskDefaults = map[manifests.Risk]api.Effect{manifests.RiskHigh: api.RequireApproval}
		},
	}
	for name, edit := range same {
		c := base()
		edit(&c)
		if v := mustCompile(t, c).Version(); v != v0 {
			t.Errorf("%s: Version = %s, want %s", name, v, v0)
		}
	}

	changed := map[string]func(*Config){
		"condition":    func(c *Config) { c.Rules[0].When = `tool.risk == "high"` },
		"effect":       func(c *Config) { c.Rules[0].Effect = api.RequireApproval },
		"reason":       func(c *Config) { c.Rules[0].Reason = "never" },
		"name":         func(c *Config) { c.Rules[0].Name = "r0" },
		"group":        func(c *Config) { c.Rules[1].Group = "leads" },
		"quorum":       func(c *Config) { c.Rules[1].Quorum = 3 },
		"order":        func(c *Config) { c.Rules[0], c.Rules[1] = c.Rules[1], c.Rules[0] },
		"rule added":   func(c *Config) { c.Rules = append(c.Rules, Rule{Name: "r3", When: "false", Effect: api.Allow}) },
		"rule removed": func(c *Config) { c.Rules = c.Rules[:1] },
		"size limit":   func(c *Config) { c.MaxArgBytes = 1024 },
		"risk default": func(c *Config) {
			c.RiskDefaults = map[manifests.Risk]api.Effect{manifests.RiskLow: api.RequireApproval}
		},
		"approval group": func(c *Config) { c.ApprovalGroup = "admins" },
	}
	seen := map[string]string{v0: "base"}
	for name, edit := range changed {
		c := base()
		edit(&c)
		v := mustCompile(t, c).Version()
		if prev, ok := seen[v]; ok {
			t.Errorf("%s: Version %s equals that of %s", name, v, prev)
		}
		seen[v] = name
	}
}
