package expr

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		kind Kind
		src  string
		want string // "" means no error
	}{
		{Capture, "args.path", ""},
		{Capture, `roots[0] + "/" + call.slug`, ""},
		{Capture, "call.id + call.task + call.tool", ""},
		{Capture, "result.content", "undeclared reference to 'result'"},
		{Capture, "before.content", "undeclared reference to 'before'"},
		{Capture, "steps.a.result", "undeclared reference to 'steps'"},
		{Capture, "call.slg", "undefined field 'slg'"},
		{Capture, "principal.name", "undeclared reference to 'principal'"},
		{Lock, `"file:" + args.path + ":" + principal.name`, ""},
		{Lock, `"admin" in principal.roles`, ""},
		{Lock, "principal.team", "undefined field 'team'"},
		{Lock, "result.path", "undeclared reference to 'result'"},
		{Compensation, "before.content", ""},
		{Compensation, "before != null", ""},
		{Compensation, "result.entities.map(e, e.name)", ""},
		{Compensation, "args.path.replace('/', '_')", ""},
		{Compensation, "'a,b'.split(',')", ""},
		{Compensation, "args.?mode.orValue('w')", ""},
		{Compensation, "vars.dir", "undeclared reference to 'vars'"},
		{Compensation, "task.id", "undeclared reference to 'task'"},
		{Step, "steps.a.result", ""},
		{Step, "steps.a.outcome == 'ok' && steps.a.reason != ''", ""},
		{Step, "vars.dir + '/' + task.id + task.plan", ""},
		{Step, "steps.a.outcom", "undefined field 'outcom'"},
		{Step, "task.name", "undefined field 'name'"},
		{Step, "args.path", "undeclared reference to 'args'"},
		{Step, "before", "undeclared reference to 'before'"},
		{Step, "call.slug", "undeclared reference to 'call'"},
		{Step, "steps.x.result.", "Syntax error: "},
		{Step, "1 + 'a'", "found no matching overload for '_+_' applied to '(int, string)'"},
		{Step, "  ", "the expression is empty"},
		{Step, strings.Repeat("a", maxExprBytes+1), "expression code point size exceeds limit"},
		{Kind(7), "1", "unknown expression kind 7"},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String()+"/"+tt.src[:min(len(tt.src), 40)], func(t *testing.T) {
			err := Check(tt.kind, tt.src)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Check succeeded, want %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Check: %v, want it to contain %q", err, tt.want)
			case err != nil && strings.Contains(err.Error(), "<input>:"):
				t.Fatalf("error has a position: %v", err)
			}
			// The mistakes a message names are also its types.
			for _, m := range []error{ErrUndeclaredReference, ErrUndefinedField} {
				if want := tt.want != "" && strings.HasPrefix(tt.want, m.Error()); errors.Is(err, m) != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, m, !want, want)
				}
			}
		})
	}
}

func TestCompileBool(t *testing.T) {
	for _, src := range []string{"before != null", "args.force", "args.?force.orValue(false)"} {
		if _, err := CompileBool(Compensation, src); err != nil {
			t.Errorf("CompileBool(%q): %v", src, err)
		}
	}
	_, err := CompileBool(Compensation, "args.path + 'x'")
	if want := "the condition is of type string, not bool; compare it, e.g. before != null"; err == nil || err.Error() != want || !errors.Is(err, ErrNotBool) {
		t.Errorf("CompileBool(string) = %v, want %q (ErrNotBool)", err, want)
	}
}

func TestEval(t *testing.T) {
	entities := map[string]any{"entities": []any{
		map[string]any{"name": "a", "observations": []any{"x"}},
		map[string]any{"name": "b", "observations": []any{}},
	}}
	call := map[string]any{"id": "c1", "task": "t1", "tool": "filesystem__write_file", "slug": Slug("t1", "c1")}
	tests := []struct {
		name    string
		kind    Kind
		src     string
		vars    map[string]any
		want    any
		wantErr string
	}{
		{name: "capture arg", kind: Capture, src: "args.path", vars: map[string]any{"args": map[string]any{"path": "/a"}}, want: "/a"},
		{name: "capture with no args", kind: Capture, src: "size(args)", vars: map[string]any{"args": nil}, want: int64(0)},
		{name: "trash path", kind: Compensation, src: `roots[1] + "/" + call.slug`,
			vars: map[string]any{"roots": []string{"/s", "/trash"}, "call": call}, want: "/trash/" + Slug("t1", "c1")},
		{name: "principal as a struct", kind: Lock, src: `principal.name + ":" + principal.roles.join(",")`,
			vars: map[string]any{"principal": Principal{Name: "alice", Roles: []string{"dev", "ops"}}}, want: "alice:dev,ops"},
		{name: "principal as a map", kind: Lock, src: `"ops" in principal.roles ? principal.name : "-"`,
			vars: map[string]any{"principal": map[string]any{"name": "bob", "roles": []any{"ops"}}}, want: "bob"},
		{name: "principal with no roles", kind: Lock, src: `size(principal.roles)`, vars: map[string]any{"principal": Principal{Name: "c"}}, want: int64(0)},
		{name: "call as a struct", kind: Capture, src: "call.tool", vars: map[string]any{"call": Call{Tool: "x__y"}}, want: "x__y"},
		{name: "before content", kind: Compensation, src: "before.content", vars: map[string]any{"before": map[string]any{"content": "old"}}, want: "old"},
		{name: "null before", kind: Compensation, src: "before.content", vars: map[string]any{"before": nil}, wantErr: "no such key: content"},
		{name: "null before tested", kind: Compensation, src: "before == null", vars: map[string]any{"before": nil}, want: true},
		{name: "missing variable", kind: Compensation, src: "before == null", vars: map[string]any{}, wantErr: "no such attribute"},
		{name: "map macro", kind: Compensation, src: "result.entities.map(e, e.name)", vars: map[string]any{"result": entities}, want: []any{"a", "b"}},
		{name: "filter macro", kind: Compensation, src: "result.entities.filter(e, size(e.observations) > 0).map(e, e.name)", vars: map[string]any{"result": entities}, want: []any{"a"}},
		{name: "map of objects", kind: Compensation, src: `result.entities.map(e, {"entityName": e.name, "n": size(e.observations)})`,
			vars: map[string]any{"result": entities}, want: []any{map[string]any{"entityName": "a", "n": int64(1)}, map[string]any{"entityName": "b", "n": int64(0)}}},
		{name: "json number stays a double", kind: Compensation, src: "args.n", vars: map[string]any{"args": map[string]any{"n": 3.0}}, want: 3.0},
		{name: "double arithmetic", kind: Compensation, src: "args.n * 2.0", vars: map[string]any{"args": map[string]any{"n": 1.5}}, want: 3.0},
		{name: "int arithmetic", kind: Step, src: "1 + 2", want: int64(3)},
		{name: "uint", kind: Step, src: "7u", want: int64(7)},
		{name: "uint above int64", kind: Step, src: "18446744073709551615u", want: uint64(18446744073709551615)},
		{name: "mixed numbers compare", kind: Compensation, src: "args.n > 1 && args.n == 2", vars: map[string]any{"args": map[string]any{"n": 2.0}}, want: true},
		{name: "mixed arithmetic fails", kind: Compensation, src: "args.n + 1", vars: map[string]any{"args": map[string]any{"n": 2.0}}, wantErr: "no such overload"},
		{name: "infinity", kind: Step, src: "1.0 / 0.0", wantErr: "+Inf is not a JSON number"},
		{name: "int keys", kind: Step, src: "{1: 'a'}", wantErr: "JSON object keys are strings"},
		{name: "strings extension", kind: Step, src: "'a,b,c'.split(',').join('-').replace('-', '+')", want: "a+b+c"},
		{name: "optional absent", kind: Step, src: "vars.?x", vars: map[string]any{"vars": map[string]any{}}, want: nil},
		{name: "optional present", kind: Step, src: "vars.?x", vars: map[string]any{"vars": map[string]any{"x": "y"}}, want: "y"},
		{name: "optional default", kind: Step, src: "vars.?x.orValue('d')", want: "d", vars: map[string]any{"vars": nil}},
		{name: "bytes, duration, timestamp", kind: Step, src: "[b'hi', duration('90s'), timestamp('2024-01-02T03:04:05Z')]", want: []any{"aGk=", "1m30s", "2024-01-02T03:04:05Z"}},
		{name: "step result", kind: Step, src: "steps.a.result.names[1]",
			vars: map[string]any{"steps": map[string]any{"a": map[string]any{"result": map[string]any{"names": []any{"x", "y"}}, "outcome": "ok"}}}, want: "y"},
		{name: "step as a struct", kind: Step, src: "steps.a.outcome + ':' + steps.a.reason",
			vars: map[string]any{"steps": map[string]StepState{"a": {Outcome: "denied", Reason: "policy"}}}, want: "denied:policy"},
		{name: "whole step", kind: Step, src: "steps.a",
			vars: map[string]any{"steps": map[string]any{"a": map[string]any{"result": "r", "outcome": "ok"}}}, want: map[string]any{"result": "r", "outcome": "ok", "reason": ""}},
		{name: "task", kind: Step, src: "task.plan + '/' + task.id", vars: map[string]any{"task": map[string]string{"id": "t", "plan": "p"}}, want: "p/t"},
		{name: "missing step", kind: Step, src: "steps.a.result", vars: map[string]any{"steps": map[string]any{}}, wantErr: "no such key: a"},
		{name: "sorted keys", kind: Step, src: "vars.m.map(k, k)",
			vars: map[string]any{"vars": map[string]any{"m": map[string]any{"z": 1.0, "a": 1.0, "q": 1.0, "b": 1.0, "y": 1.0, "c": 1.0}}}, want: []any{"a", "b", "c", "q", "y", "z"}},
		{name: "sorted keys of a step result", kind: Step, src: "steps.s.result.map(k, k)",
			vars: map[string]any{"steps": map[string]any{"s": map[string]any{"result": map[string]any{"z": 1.0, "a": 1.0, "q": 1.0, "b": 1.0}}}}, want: []any{"a", "b", "q", "z"}},
		{name: "sorted keys in a list", kind: Step, src: "vars.l[0].map(k, k)",
			vars: map[string]any{"vars": map[string]any{"l": []any{map[string]any{"z": 1.0, "a": 1.0, "q": 1.0, "b": 1.0}}}}, want: []any{"a", "b", "q", "z"}},
		// Bad data is an error, never a panic.
		{name: "call of the wrong type", kind: Capture, src: "call.id", vars: map[string]any{"call": 3}, wantErr: "variable call: a int, want a map of strings"},
		{name: "call with an unknown key", kind: Capture, src: "call.id", vars: map[string]any{"call": map[string]any{"slg": "x"}}, wantErr: `variable call: unknown key "slg"; the keys are id, slug, task, tool`},
		{name: "principal with an unknown key", kind: Lock, src: "principal.name", vars: map[string]any{"principal": map[string]any{"team": "x"}}, wantErr: `variable principal: unknown key "team"; the keys are name, roles`},
		{name: "steps of the wrong type", kind: Step, src: "steps.a.result", vars: map[string]any{"steps": "a"}, wantErr: "variable steps: a string"},
		{name: "step outcome not a string", kind: Step, src: "steps.a.outcome", vars: map[string]any{"steps": map[string]any{"a": map[string]any{"outcome": 1.0}}}, wantErr: "a: outcome is a float64, not a string"},
		{name: "args not a map", kind: Capture, src: "args.path", vars: map[string]any{"args": "x"}, wantErr: "no such key"},
		{name: "roots not a list", kind: Capture, src: "roots[1]", vars: map[string]any{"roots": "x"}, wantErr: "no such key: 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.kind, tt.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Eval(tt.vars)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Eval = %#v, want an error containing %q", got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Eval: %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Eval: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Eval (-want +got):\n%s", diff)
			}
		})
	}
}

// Eval's results marshal as JSON the way they read: CEL ints as integers,
// doubles as numbers, and they decode back to the same JSON.
func TestEvalMarshals(t *testing.T) {
	p, err := Compile(Compensation, `{"n": 3, "d": args.d, "half": 0.5, "list": [1, "a", null, true], "o": {"k": args.k}}`)
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.Eval(map[string]any{"args": map[string]any{"d": 2.0, "k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"d":2,"half":0.5,"list":[1,"a",null,true],"n":3,"o":{"k":"v"}}`; string(b) != want {
		t.Errorf("marshalled %s, want %s", b, want)
	}
}

func TestEvalBool(t *testing.T) {
	p, err := CompileBool(Compensation, "before != null")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		before any
		want   bool
	}{{nil, false}, {map[string]any{"content": ""}, true}, {"", true}} {
		got, err := p.EvalBool(map[string]any{"before": tt.before})
		if err != nil || got != tt.want {
			t.Errorf("EvalBool(before: %#v) = %v, %v; want %v", tt.before, got, err, tt.want)
		}
	}
	d, err := CompileBool(Compensation, "args.force")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.EvalBool(map[string]any{"args": map[string]any{"force": "yes"}}); err == nil || err.Error() != "the condition is of type string, not a bool" {
		t.Errorf("EvalBool(a string) = %v", err)
	}
}

func TestLimits(t *testing.T) {
	xs := make([]any, 3000)
	for i := range xs {
		xs[i] = float64(i)
	}
	vars := map[string]any{"args": map[string]any{"xs": xs}}
	const heavy = "args.xs.all(a, args.xs.all(b, a + b >= 0.0))"

	t.Run("cost limit", func(t *testing.T) {
		p, err := Compile(Capture, heavy)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Eval(vars)
		if err == nil || !strings.Contains(err.Error(), "cost limit exceeded") {
			t.Fatalf("Eval = %v, want the cost limit to stop it", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		old := evalTimeout
		evalTimeout = 20 * time.Millisecond
		t.Cleanup(func() { evalTimeout = old })
		p, err := compile(Capture, heavy, 0)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = p.Eval(vars)
		if err == nil || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("Eval = %v, want the timeout to interrupt it", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the interrupted evaluation took %s", d)
		}
	})
}

func TestRefs(t *testing.T) {
	tests := []struct {
		src     string
		fields  []string
		dynamic bool
		vars    []string
	}{
		{src: "steps.a.result + steps['b'].result + steps.?c.orValue(null).result + steps.a.outcome", fields: []string{"a", "b", "c"}},
		{src: "has(steps.a) && vars.x == ''", fields: []string{"a"}, vars: []string{"x"}},
		{src: "steps[vars.which].result", dynamic: true, vars: []string{"which"}},
		{src: "steps.all(k, k != '')", dynamic: true},
		{src: "task.id"},
	}
	for _, tt := range tests {
		p, err := Compile(Step, tt.src)
		if err != nil {
			t.Fatal(err)
		}
		fields, dynamic := p.Fields("steps")
		if diff := cmp.Diff(tt.fields, fields); diff != "" || dynamic != tt.dynamic {
			t.Errorf("%s: Fields(steps) = %v, %v; want %v, %v", tt.src, fields, dynamic, tt.fields, tt.dynamic)
		}
		vars, _ := p.Fields("vars")
		if diff := cmp.Diff(tt.vars, vars); diff != "" {
			t.Errorf("%s: Fields(vars) = %v, want %v", tt.src, vars, tt.vars)
		}
	}
	p, err := Compile(Compensation, "before == null ? args.path : before.content")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Uses("before") || !p.Uses("args") || p.Uses("result") {
		t.Errorf("Uses: before %v, args %v, result %v", p.Uses("before"), p.Uses("args"), p.Uses("result"))
	}
}

func TestResultValue(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want any
	}{
		{"empty", "", nil},
		{"not a result", `[1]`, nil},
		{"not JSON", `{`, nil},
		{"structured", `{"content":[{"type":"text","text":"ignored"}],"structuredContent":{"content":"old","n":2}}`, map[string]any{"content": "old", "n": int64(2)}},
		{"structured null falls back to text", `{"content":[{"type":"text","text":"hi"}],"structuredContent":null}`, "hi"},
		{"text that is JSON", `{"content":[{"type":"text","text":"{\"entities\":"},{"type":"text","text":"[]}"}]}`, map[string]any{"entities": []any{}}},
		{"text that is not JSON", `{"content":[{"type":"text","text":"Successfully wrote"}]}`, "Successfully wrote"},
		{"text that is a number", `{"content":[{"type":"text","text":"42"}]}`, int64(42)},
		{"empty text", `{"content":[{"type":"text","text":""}]}`, ""},
		{"only an image", `{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"}]}`, nil},
		{"error result", `{"content":[{"type":"text","text":"ENOENT: no such file"}],"isError":true}`, "ENOENT: no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ResultValue(json.RawMessage(tt.raw))); diff != "" {
				t.Errorf("ResultValue (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJSONValue(t *testing.T) {
	for _, raw := range []string{"", "  ", "null"} {
		if v, err := JSONValue(json.RawMessage(raw)); v != nil || err != nil {
			t.Errorf("JSONValue(%q) = %v, %v; want nil, nil", raw, v, err)
		}
	}
	v, err := JSONValue(json.RawMessage(`{"a":[1,"x",1.5,9007199254740993,1234567890123456789,18446744073709551615]}`))
	want := map[string]any{"a": []any{int64(1), "x", 1.5, int64(9007199254740993), int64(1234567890123456789), uint64(18446744073709551615)}}
	if diff := cmp.Diff(want, v); diff != "" || err != nil {
		t.Errorf("JSONValue: %v (-want +got):\n%s", err, diff)
	}
	for _, raw := range []string{`{"a":`, `{"a":1} {}`, `{"a":[9007199254740993.5]}`} {
		if _, err := JSONValue(json.RawMessage(raw)); err == nil {
			t.Errorf("JSONValue(%s) succeeded", raw)
		}
	}
}

// TestIntegersPassExactly: a compensation or lock key computed from an ID
// beyond 2^53 names that ID, not its nearest double (issue 25 item 4).
func TestIntegersPassExactly(t *testing.T) {
	for _, id := range []string{"9007199254740991", "9007199254740992", "9007199254740993", "1234567890123456789", "1234567890123456700"} {
		args, err := JSONValue(json.RawMessage(`{"id":` + id + `}`))
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := CompileTemplate(Compensation, map[string]any{"id": "${{ args.id }}", "key": `${{ "acct-" + string(args.id) }}`})
		if err != nil {
			t.Fatal(err)
		}
		out, err := tpl.Eval(map[string]any{"args": args})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(out)
		if want := `{"id":` + id + `,"key":"acct-` + id + `"}`; string(b) != want {
			t.Errorf("compensation arguments from id %s: %s; want %s", id, b, want)
		}
	}
}

func TestSlug(t *testing.T) {
	// printf 'task-1\0call-7' | sha256sum | cut -c1-16
	if got, want := Slug("task-1", "call-7"), "f6f109c619b6545c"; got != want {
		t.Errorf("Slug = %s, want %s", got, want)
	}
	if Slug("a", "bc") == Slug("ab", "c") {
		t.Error("the separator does not separate")
	}
}

func TestCompileCaches(t *testing.T) {
	a, err := Compile(Step, "vars.cached")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Compile(Step, "vars.cached")
	c, _ := Compile(Capture, "args.cached")
	if a != b || a == c {
		t.Error("programs are not cached by kind and source")
	}
}

// FuzzEval checks that no expression over any JSON values panics, and that
// every result marshals as JSON.
func FuzzEval(f *testing.F) {
	f.Add("before.content", `{"content":"x"}`)
	f.Add("before.content", `null`)
	f.Add(`result.entities.map(e, {"n": e.name})`, `{"entities":[{"name":"a"}]}`)
	f.Add("args.xs.filter(x, x > 1).size()", `[1, 2, 3]`)
	f.Add("before.?a.orValue(1) + 1", `{"a": 1}`)
	f.Add(`roots[1] + "/" + call.slug`, `{}`)
	f.Add("{before: 1}", `"k"`)
	// A key twice in a result (issue 13 item 1): read as encoding/json reads it.
	f.Add("result.path", `{"path":"secret.env","path":"ok.txt"}`)
	f.Add(`{"path": before.o.path}`, `{"o":{"path":"a","path":"b"}}`)
	f.Fuzz(func(t *testing.T, src, data string) {
		p, err := Compile(Compensation, src)
		if err != nil {
			return
		}
		v, err := JSONValue(json.RawMessage(data))
		if err != nil {
			return
		}
		vars := map[string]any{
			"args":   map[string]any{"xs": v, "path": "/p"},
			"result": v,
			"before": v,
			"call":   map[string]any{"id": "c", "task": "t", "tool": "s__t", "slug": "0123"},
			"roots":  []string{"/a", "/b"},
		}
		out, err := p.Eval(vars)
		if err != nil {
			return
		}
		if _, err := json.Marshal(out); err != nil {
			t.Fatalf("Eval(%q) = %#v, which does not marshal: %v", src, out, err)
		}
		_, _ = p.EvalBool(vars)
	})
}
