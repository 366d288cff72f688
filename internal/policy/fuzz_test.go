package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// preRuleChecks are the checks that come before the rules: a deny from one
// of them must stand whatever the rules say.
var preRuleChecks = map[string]bool{
	api.CheckAllowlist: true, api.CheckPermission: true, api.CheckDataLevel: true,
	api.CheckSize: true, api.CheckJSON: true, api.CheckSchema: true, api.CheckPath: true,
}

var allChecks = map[string]bool{
	api.CheckAllowlist: true, api.CheckPermission: true, api.CheckDataLevel: true, api.CheckSize: true, api.CheckJSON: true,
	api.CheckSchema: true, api.CheckPath: true, api.CheckRule: true, api.CheckDefault: true, api.CheckError: true,
}

// FuzzDecide feeds arbitrary arguments and an arbitrary rule to Decide.
// "ROOT" in the arguments stands for the sandbox root of the fixture (see
// newFS), so seeds can aim at it. It asserts that Decide does not panic
// (not even a recovered panic), returns a valid decision, gives the same
// decision twice, and that a rule, here one that allows, never overturns a
// deny from an earlier check.
func FuzzDecide(f *testing.F) {
	seeds := []struct{ args, rule string }{
		{`{"path": "ROOT/notes.txt"}`, `true`},
		{`{"path": "ROOT/../outside/secret.txt"}`, `true`},
		{`{"path": "ROOT/sub/../../outside/secret.txt"}`, `args.path.startsWith("ROOT")`},
		{`{"path": "ROOT/escape/secret.txt"}`, `true`},
		{`{"path": "ROOT/escape/../escape/x"}`, `true`},
		{`{"path": "ROOT/inner/../escape"}`, `true`},
		{`{"path": "ROOT/dangling"}`, `true`},
		{`{"path": "ROOT/./escape/./secret.txt/"}`, `true`},
		{`{"path": "ROOT//escape//secret.txt"}`, `true`},
		{`{"path": "/etc/passwd"}`, `true`},
		{`{"path": "../../etc/passwd"}`, `true`},
		{`{"path": "~/.ssh/id_rsa"}`, `true`},
		{`{"path": "ROOT/a\u0000b"}`, `true`},
		{`{"path": ""}`, `true`},
		{`{"paths": ["ROOT/notes.txt", "ROOT/escape"]}`, `true`},
		{`{"paths": ["ROOT/notes.txt", 1, null]}`, `true`},
		{`{"paths": "ROOT/escape"}`, `true`},
		{`{"path": {"nested": "ROOT"}}`, `true`},
		{`[]`, `true`},
		{`"x"`, `true`},
		{`null`, `true`},
		{``, `true`},
		{`{"a":` + strings.Repeat(`[`, 5000) + strings.Repeat(`]`, 5000) + `}`, `true`},
		{`{"a":` + strings.Repeat(`{"b":`, 20000) + `1` + strings.Repeat(`}`, 20000) + `}`, `true`},
		{`{"content": "` + strings.Repeat("x", DefaultMaxArgBytes) + `"}`, `true`},
		{`{"path": "ROOT/x", "a": 1, "a": 2}`, `args.a == 2.0`},
		{`{"path": "ROOT/../outside/secret.txt", "path": "ROOT/notes.txt"}`, `true`},
		{`{"path": "ROOT/notes.txt", "path": "ROOT/../outside/secret.txt"}`, `true`},
		{`{"path": "ROOT/notes.txt", "\u0070ath": "ROOT/escape/secret.txt"}`, `true`},
		{`{"path": "ROOT/notes.txt", "o": {"k": 1, "k": 2}}`, `true`},
		{`{"path": "ROOT/x"}`, `args.missing == 1`},
		{`{"path": "ROOT/x"}`, `args.?missing.orValue(1) == 1`},
		{`{"path": "ROOT/x"}`, `args.path`},
		{`{"path": "ROOT/x"}`, `args.path ==`},
		{`{"path": "ROOT/x"}`, `principal.nope`},
		{`{"path": "ROOT/x"}`, `1/0 == 1`},
		{`{"path": "ROOT/x"}`, `int(args.path) > 0`},
		{`{"path": "ROOT/x"}`, `args.path.matches("(a+)+$")`},
		{`{"path": "ROOT/x"}`, `[1,2,3].all(a, [1,2,3].all(b, [1,2,3].all(c, [1,2,3].all(d, a+b+c+d > 0))))`},
		{`{"path": "ROOT/x", "n": 1e308}`, `args.n * 10.0 > 1.0`},
		{`{"path": "ROOT/x", "n": 9223372036854775807}`, `int(args.n) + 1 > 0`},
		{`{"path": "ROOT/x", "l": [1,2,3]}`, `args.l.map(x, args.l.map(y, args.l)).size() > 0`},
		{`{"path": "ROOT/x"}`, strings.Repeat("(", 300) + "true" + strings.Repeat(")", 300)},
	}
	for _, s := range seeds {
		f.Add(s.args, s.rule)
	}

	fx := newFS(f)
	schema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"paths":{"type":["array","string"]},"content":{"type":"string"}}}`)
	tool := writeFile(fx.root)
	tool.Decl.PathArgs = []string{"path", "paths"}
	tool.InputSchema = schema
	base := mustCompile(f, Config{})

	f.Fuzz(func(t *testing.T, rawArgs, rule string) {
		in := Input{
			Principal: alice(),
			Tool:      tool,
			Args:      json.RawMessage(strings.ReplaceAll(rawArgs, "ROOT", fx.root)),
			Task:      Task{ID: "fuzz", AllowTools: []string{"filesystem__*"}},
		}
		d0 := base.Decide(in)
		checkDecision(t, base, d0)

		p, err := Compile(Config{Rules: []Rule{{Name: "fuzz", When: strings.ReplaceAll(rule, "ROOT", fx.root), Effect: api.Allow}}})
		if err != nil {
			return
		}
		d1 := p.Decide(in)
		checkDecision(t, p, d1)
		if again := p.Decide(in); again != d1 {
			t.Fatalf("not deterministic:\n%+v\n%+v", d1, again)
		}
		if d0.Effect == api.Deny && preRuleChecks[d0.Check] {
			d1.Version = d0.Version
			if d1 != d0 {
				t.Fatalf("a rule overturned an earlier deny:\nwithout rules: %+v\nwith rule %q: %+v", d0, rule, d1)
			}
		}
		if d1.Effect == api.Allow && d1.Check == api.CheckRule && d0.Effect == api.Deny && d0.Check != api.CheckDefault && d0.Check != api.CheckError {
			t.Fatalf("allowed by a rule after %s denied: %+v", d0.Check, d0)
		}
	})
}

func checkDecision(t *testing.T, p *Policy, d api.Verdict) {
	t.Helper()
	if !d.Effect.Valid() {
		t.Fatalf("invalid effect in %+v", d)
	}
	if !allChecks[d.Check] {
		t.Fatalf("unknown check in %+v", d)
	}
	if d.Version != p.Version() {
		t.Fatalf("Version %q, want %q", d.Version, p.Version())
	}
	if d.Reason == "" {
		t.Fatalf("no reason in %+v", d)
	}
	if strings.Contains(d.Reason, "internal policy error") || strings.Contains(d.Reason, "internal error in the") {
		t.Fatalf("recovered panic: %+v", d)
	}
	if d.Effect == api.RequireApproval && (d.Group == "" || d.Quorum < 1) {
		t.Fatalf("approval without group or quorum: %+v", d)
	}
	if d.Check == api.CheckError && d.Effect != api.Deny {
		t.Fatalf("error that does not deny: %+v", d)
	}
}
