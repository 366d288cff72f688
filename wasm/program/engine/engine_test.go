package engine

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

func TestLoopAndCondition(t *testing.T) {
	h := newHost(t, fakeFS)
	d := run(t, `
def main():
    out = {}
    for e in fs.list_directory(path="/repo"):
        if e["type"] == "file":
            text = fs.read_file(path="/repo/" + e["name"])
            out[e["name"]] = text.count("TODO")
    print("files:", len(out))
    return out
`, h)
	if d.Outcome != wire.OutcomeOK {
		t.Fatalf("done = %+v", d)
	}
	if got, want := string(d.Result), `{"README.md":1,"config.json":0,"go.mod":0,"main.go":1}`; got != want {
		t.Errorf("result = %s, want %s", got, want)
	}
	if d.Output != "files: 4\n" {
		t.Errorf("output = %q", d.Output)
	}
	if len(h.started) != 5 {
		t.Errorf("%d calls, want 5", len(h.started))
	}
	if m := h.started[1]; m.Tool != "fs__read_file" || string(m.Args) != `{"path":"/repo/README.md"}` || m.Line != 6 {
		t.Errorf("call 2 = %+v", m)
	}
	if d.Steps <= 0 {
		t.Errorf("steps = %d", d.Steps)
	}
}

func TestResultGlobalAndNone(t *testing.T) {
	for src, want := range map[string]string{
		`result = {"b": 1, "a": [1, 2.5, None, True]}`: `{"a":[1,2.5,null,true],"b":1}`,
		`x = 1`:                       `null`,
		`result = struct(z=1, a="x")`: `{"a":"x","z":1}`,
		`result = 1 << 70`:            `1180591620717411303424`,
		`result = "<&>\u2028"`:        `"<&>\u2028"`,
	} {
		d := run(t, src, newHost(t, fakeFS))
		if d.Outcome != wire.OutcomeOK || string(d.Result) != want {
			t.Errorf("%s: done = %+v, want result %s", src, d, want)
		}
	}
}

func TestInvalidHints(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"try:\n    x = 1\nexcept:\n    pass\n", "use attempt(f, **kwargs)"},
		{`x = 1` + "\n" + `s = f"v={x}"`, `"{}".format(x)`},
		{"import os\n", "no imports"},
		{"from os import path\n", "no imports"},
		{"class A:\n    pass\n", "use dicts or struct"},
		{"x = None\nif x is None:\n    pass\n", "compare with =="},
		{"x = lenn([1])\n", "did you mean len?"},
		{"x = fs.read_fil(path='a')\n", "did you mean fs.read_file?"},
		{"x = fs.read_file('a')\n", "pass arguments by name"},
		{"x = call('fs__read_fil', path='a')\n", "did you mean fs__read_file"},
		{"x = isinstance(1, int)\n", `type(x) == "dict"`},
		{"x = call('fs__read_file', '/a')\n", "keyword arguments only"},
		{"load('x.star', 'y')\n", "load is not available"},
		{"x = 1\nwith x as y:\n    pass\n", "no with statement"},
		{"def f():\n    yield 1\n", "no generators"},
		{"x = [1]\ndel x[0]\n", "Starlark has no del"},
		{"if (n := 3) > 2:\n    pass\n", "no := operator"},
		{"async def f():\n    pass\n", "no async/await"},
		{"assert 1 == 1\n", "no assert"},
		{"x = 2 ** 8\n", "no ** power"},
		{"def f(n):\n    return f(n)\nresult = f(1)\n", ""},
	} {
		h := newHost(t, fakeFS)
		d := run(t, c.src, h)
		if c.want == "" {
			if d.Outcome == wire.OutcomeInvalid {
				t.Errorf("%q: invalid: %s", c.src, d.Error)
			}
			continue
		}
		if d.Outcome != wire.OutcomeInvalid || !strings.Contains(d.Error, c.want) || d.Line == 0 {
			t.Errorf("%q: done = %+v, want invalid with %q", c.src, d, c.want)
		}
		if len(h.started) != 0 {
			t.Errorf("%q: %d calls started", c.src, len(h.started))
		}
	}
}
