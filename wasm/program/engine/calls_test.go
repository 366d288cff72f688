package engine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

func TestDeniedCallNamesLine(t *testing.T) {
	d := run(t, `
x = 1
data = fs.read_file(path="/secret/key")
`, newHost(t, fakeFS))
	if d.Outcome != wire.OutcomeError || d.Line != 3 {
		t.Fatalf("done = %+v, want error at line 3", d)
	}
	if want := "fs.read_file (line 3): denied: rule no-secrets"; !strings.Contains(d.Error, want) {
		t.Errorf("error = %q, want %q", d.Error, want)
	}
}

func TestDeniedInFunctionNamesInnermostLine(t *testing.T) {
	d := run(t, `
def fetch(p):
    return fs.read_file(path=p)

def main():
    return fetch("/secret/x")
`, newHost(t, fakeFS))
	if d.Outcome != wire.OutcomeError || d.Line != 3 || !strings.Contains(d.Error, "denied") {
		t.Fatalf("done = %+v, want error at line 3", d)
	}
}

func TestAttempt(t *testing.T) {
	d := run(t, `
def main():
    a = attempt(fs.read_file, path="/secret/key")
    b = attempt(fs.read_file, path="/repo/go.mod")
    c = attempt(lambda: fail("boom"))
    e = attempt(lambda: 1 // 0)
    f = attempt(call, "fs__read_file", path="/nope")
    return [
        [a.ok, a.outcome, a.error, a.value],
        [b.ok, b.outcome, b.error, b.value],
        [c.ok, c.outcome, c.error],
        [e.ok, e.outcome, e.error],
        [f.ok, f.outcome, f.error],
    ]
`, newHost(t, fakeFS))
	if d.Outcome != wire.OutcomeOK {
		t.Fatalf("done = %+v", d)
	}
	want := `[[false,"denied","fs.read_file (line 3): denied: rule no-secrets",null],` +
		`[true,"ok",null,"module demo\n\ngo 1.22\n"],` +
		`[false,"error","fail: boom"],` +
		`[false,"error","floored division by zero"],` +
		`[false,"tool_error","fs.read_file (line 7): tool_error: ENOENT: no such file /nope"]]`
	if string(d.Result) != want {
		t.Errorf("result =\n%s\nwant\n%s", d.Result, want)
	}
}

func TestToolArgs(t *testing.T) {
	h := newHost(t, func(m wire.GuestMessage) wire.Reply { return rawOK(`null`) })
	d := run(t, `
fs.write_file(path="/a", content={"z": 1, "a": [1, 2.5, (3, None)], "big": 1 << 64, "s": struct(y=1, b=True)}, mode="w")
`, h)
	if d.Outcome != wire.OutcomeOK {
		t.Fatalf("done = %+v", d)
	}
	// Insertion order for dicts (what the program wrote), sorted fields for structs.
	want := `{"path":"/a","content":{"z":1,"a":[1,2.5,[3,null]],"big":18446744073709551616,"s":{"b":true,"y":1}},"mode":"w"}`
	if got := string(h.started[0].Args); got != want {
		t.Errorf("args = %s\nwant   %s", got, want)
	}
	for src, want := range map[string]string{
		`fs.write_file(path="/a", content=len)`:                      "fs.write_file argument content is a builtin_function_or_method",
		`fs.write_file(path="/a", content={1: 2})`:                   "fs.write_file argument content has a key of type int",
		`fs.write_file(path="/a", content=float("nan"))`:             "fs.write_file argument content is nan",
		`fs.write_file(path="/a", content=set([1]))`:                 "is a set",
		"l = []\nl.append(l)\nfs.write_file(path=\"/a\", content=l)": "nested deeper than 512",
		`fs.write_file(path="/a", content=[lambda: 1])`:              "content[0] is a function",
		`f = fs.write_file` + "\n" + `f("/a")`:                       "pass arguments by name",
	} {
		h := newHost(t, fakeFS)
		d := run(t, src, h)
		if d.Outcome != wire.OutcomeError || !strings.Contains(d.Error, want) || d.Line == 0 {
			t.Errorf("%s: done = %+v, want error with %q", src, d, want)
		}
		if len(h.started) != 0 {
			t.Errorf("%s: a call started", src)
		}
	}
}

func TestResultConversion(t *testing.T) {
	big := "123456789012345678901234567890"
	reply := `{"b": 9007199254740993, "a": -9007199254740993, "big": ` + big + `, "f": 1.5, "e": 1e3, "n": null, "t": true, "s": "x\u00e9", "l": [1, [2, {}]], "dup": 1, "dup": 2}`
	h := newHost(t, func(m wire.GuestMessage) wire.Reply { return rawOK(reply) })
	d := run(t, `
def main():
    r = gh.list_issues(owner="o", repo="r")
    keys = list(r.keys())
    gh.create_issue(title=str(r["b"] + 1), body=r)
    return {"keys": keys, "b": r["b"], "b1": r["b"] + 1, "big": r["big"], "types": [type(r[k]) for k in keys], "dup": r["dup"]}
`, h)
	if d.Outcome != wire.OutcomeOK {
		t.Fatalf("done = %+v", d)
	}
	// Document order; a repeated key keeps its first place and its last value.
	want := `{"b":9007199254740993,"b1":9007199254740994,"big":` + big + `,"dup":2,` +
		`"keys":["b","a","big","f","e","n","t","s","l","dup"],` +
		`"types":["int","int","int","float","float","NoneType","bool","string","list","int"]}`
	if string(d.Result) != want {
		t.Errorf("result =\n%s\nwant\n%s", d.Result, want)
	}
	args := string(h.started[1].Args)
	if !strings.Contains(args, `"title":"9007199254740994"`) || !strings.Contains(args, `"b":9007199254740993,"a":-9007199254740993,"big":`+big) {
		t.Errorf("args = %s: integers past 2^53 must round-trip exactly", args)
	}
}

func TestHostileResults(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	for name, c := range map[string]struct {
		reply   string
		outcome string
		want    string
	}{
		"deep":         {deep, wire.OutcomeError, "nested deeper than 512"},
		"deep-ok":      {strings.Repeat("[", 500) + strings.Repeat("]", 500), wire.OutcomeOK, ""},
		"invalid":      {`{"a": `, wire.OutcomeError, "its result cannot be read: invalid JSON"},
		"trailing":     {`{} {}`, wire.OutcomeError, "after top-level value"},
		"long-int":     {strings.Repeat("9", 5000), wire.OutcomeError, "5000 digits"},
		"huge-float":   {`[1e400]`, wire.OutcomeError, "the number 1e400 is out of range"},
		"empty":        {``, wire.OutcomeOK, ""},
		"many-strings": {`[` + strings.Repeat(`"xxxxxxxxxx",`, 100000) + `"y"]`, wire.OutcomeOK, ""},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, func(m wire.GuestMessage) wire.Reply { return rawOK(c.reply) })
			d := run(t, "x = fs.read_file(path='/a')\nresult = type(x)", h)
			if d.Outcome != c.outcome || !strings.Contains(d.Error, c.want) {
				t.Fatalf("done = %+v, want %s with %q", d, c.outcome, c.want)
			}
			if c.outcome == wire.OutcomeError && d.Line != 1 {
				t.Errorf("line = %d, want 1", d.Line)
			}
		})
	}
}

func TestHugeResultLimit(t *testing.T) {
	lim := testLimits
	lim.MaxResultBytes = 1000
	d := runLimits(t, `result = ["x" * 100 for i in range(20)]`, newHost(t, fakeFS), lim)
	if d.Outcome != wire.OutcomeLimit || !strings.HasPrefix(d.Error, "return less: the result is 2061 bytes of JSON, more than the 1000 allowed") {
		t.Errorf("done = %+v", d)
	}
	d = run(t, `result = len`, newHost(t, fakeFS))
	if d.Outcome != wire.OutcomeError || !strings.Contains(d.Error, "the result is a builtin_function_or_method") {
		t.Errorf("done = %+v", d)
	}
}

func TestCallByName(t *testing.T) {
	h := newHost(t, fakeFS)
	d := run(t, `
name = "fs__" + "stat"
result = call(name, path="/repo/go.mod")["size"]
r = attempt(call, "fs__nope", path="x")
print(r.error)
`, h)
	if d.Outcome != wire.OutcomeOK || string(d.Result) != "21" {
		t.Fatalf("done = %+v", d)
	}
	if !strings.Contains(d.Output, `call: no tool "fs__nope"`) {
		t.Errorf("output = %q", d.Output)
	}
}

// TestSameProgramSameOutput: a program and its replies fully determine
// the calls started and Done.
func TestSameProgramSameOutput(t *testing.T) {
	src := `
def main():
    paths = ["/repo/README.md", "/repo/main.go", "/repo/go.mod", "/secret/a"]
    rs = parallel([lambda p=p: attempt(fs.read_file, path=p) for p in paths])
    stats = parallel(lambda: fs.stat(path="/repo/go.mod"), lambda: fs.list_directory(path="/repo"))
    print([r.ok for r in rs])
    return {"n": [len(r.value or "") for r in rs], "stats": stats}
`
	var first wire.Done
	var firstCalls []wire.GuestMessage
	for i := 0; i < 5; i++ {
		h := newHost(t, fakeFS)
		d := run(t, src, h)
		if d.Outcome != wire.OutcomeOK {
			t.Fatalf("done = %+v", d)
		}
		if i == 0 {
			first, firstCalls = d, h.started
			continue
		}
		if !reflect.DeepEqual(d, first) || !reflect.DeepEqual(h.started, firstCalls) {
			t.Fatalf("run %d differs:\n%+v\n%+v", i, d, first)
		}
	}
}

// TestParallelOrder: results come back in argument order whatever order
// the replies come in; with the same reply order everything is the same.
func TestParallelOrder(t *testing.T) {
	src := `
def main():
    def work(p):
        a = fs.stat(path=p)
        print("stat", p)
        b = fs.read_file(path=p)
        print("read", p)
        return [p, a["size"], len(b)]
    ps = ["/repo/README.md", "/repo/main.go", "/repo/go.mod"]
    return parallel([lambda p=p: work(p) for p in ps])
`
	picks := map[string]func([]wire.GuestMessage) int{
		"fifo":    nil,
		"lifo":    func(f []wire.GuestMessage) int { return len(f) - 1 },
		"middle":  func(f []wire.GuestMessage) int { return len(f) / 2 },
		"highest": func(f []wire.GuestMessage) int { return highestID(f) },
	}
	var result string
	for name, pick := range picks {
		var outs []wire.Done
		var calls [][]wire.GuestMessage
		for i := 0; i < 2; i++ {
			h := newHost(t, fakeFS)
			h.pick = pick
			d := run(t, src, h)
			if d.Outcome != wire.OutcomeOK {
				t.Fatalf("%s: done = %+v", name, d)
			}
			outs = append(outs, d)
			calls = append(calls, h.started)
			// The first three calls are the branches' stats, in argument order.
			for j := 0; j < 3; j++ {
				if h.started[j].Tool != "fs__stat" || h.started[j].Line != 4 {
					t.Errorf("%s: call %d = %+v", name, j+1, h.started[j])
				}
			}
		}
		if !reflect.DeepEqual(outs[0], outs[1]) || !reflect.DeepEqual(calls[0], calls[1]) {
			t.Errorf("%s: two runs with the same reply order differ", name)
		}
		if result == "" {
			result = string(outs[0].Result)
		} else if string(outs[0].Result) != result {
			t.Errorf("%s: result %s, want %s (argument order)", name, outs[0].Result, result)
		}
		if name == "lifo" && !strings.HasPrefix(outs[0].Output, "stat /repo/go.mod\n") {
			t.Errorf("lifo: output %q: the last branch's reply came first", outs[0].Output)
		}
	}
	if want := `[["/repo/README.md",40,40],["/repo/main.go",52,52],["/repo/go.mod",21,21]]`; result != want {
		t.Errorf("result = %s, want %s", result, want)
	}
}

func highestID(f []wire.GuestMessage) int {
	best := 0
	for i, m := range f {
		if m.ID > f[best].ID {
			best = i
		}
	}
	return best
}

// TestParallelConcurrent: every branch's call is in flight before the
// host is asked for a reply (Wait once per reply).
func TestParallelConcurrent(t *testing.T) {
	h := newHost(t, fakeFS)
	maxFlight := 0
	answer := h.answer
	h.answer = func(m wire.GuestMessage) wire.Reply {
		maxFlight = max(maxFlight, len(h.flight)+1)
		return answer(m)
	}
	d := run(t, `result = parallel([lambda i=i: fs.stat(path="/repo/go.mod")["size"] + i for i in range(16)])`, h)
	if d.Outcome != wire.OutcomeOK || maxFlight != 16 || h.waits != 16 {
		t.Fatalf("done = %+v, in flight at once %d, waits %d; want 16, 16", d, maxFlight, h.waits)
	}
	want := make([]int, 16)
	for i := range want {
		want[i] = 21 + i
	}
	var got []int
	json.Unmarshal(d.Result, &got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("result = %s", d.Result)
	}
}

func TestParallelFailure(t *testing.T) {
	h := newHost(t, fakeFS)
	d := run(t, `
def main():
    return parallel(
        lambda: fs.stat(path="/repo/go.mod"),
        lambda: fs.read_file(path="/secret/b"),
        lambda: fs.read_file(path="/repo/main.go"),
    )
`, h)
	if d.Outcome != wire.OutcomeError || d.Line != 5 || !strings.Contains(d.Error, "parallel: function 2 of 3 failed: fs.read_file (line 5): denied: rule no-secrets") {
		t.Fatalf("done = %+v", d)
	}
	if len(h.started) != 3 || len(h.flight) != 0 {
		t.Errorf("%d calls, %d left in flight: the others must finish", len(h.started), len(h.flight))
	}
	// Caught inside a branch, or around parallel.
	d = run(t, `
r = parallel(lambda: attempt(fs.read_file, path="/secret/b").outcome, lambda: 2)
a = attempt(parallel, lambda: fs.read_file(path="/secret/b"))
result = [r, a.ok, a.outcome]
`, newHost(t, fakeFS))
	if d.Outcome != wire.OutcomeOK || string(d.Result) != `[["denied",2],false,"denied"]` {
		t.Fatalf("done = %+v", d)
	}
}

func TestParallelLimits(t *testing.T) {
	lim := testLimits
	lim.MaxParallel = 3
	h := newHost(t, fakeFS)
	d := runLimits(t, `result = parallel([lambda: 1 for i in range(4)])`, h, lim)
	if d.Outcome != wire.OutcomeError || !strings.Contains(d.Error, "parallel: 4 functions, more than the 3 allowed at once") {
		t.Errorf("done = %+v", d)
	}
	for src, want := range map[string]string{
		`result = parallel()`:                       `[]`,
		`result = parallel([])`:                     `[]`,
		`result = parallel((lambda: 1, lambda: 2))`: `[1,2]`,
		`result = parallel(lambda: parallel(lambda: 1, lambda: 2), lambda: 3)`: `[[1,2],3]`,
	} {
		if d := run(t, src, newHost(t, fakeFS)); d.Outcome != wire.OutcomeOK || string(d.Result) != want {
			t.Errorf("%s: done = %+v, want %s", src, d, want)
		}
	}
	for src, want := range map[string]string{
		`result = parallel(1)`:           "argument 1 is int, not a function",
		`result = parallel(f=len)`:       "not keyword arguments",
		`result = parallel(lambda x: x)`: "missing 1 argument (x)",
	} {
		if d := run(t, src, newHost(t, fakeFS)); d.Outcome != wire.OutcomeError || !strings.Contains(d.Error, want) {
			t.Errorf("%s: done = %+v, want %q", src, d, want)
		}
	}
	// Nested parallel cannot spawn threads without bound.
	d = run(t, `
def fan(n):
    if n == 0:
        return 0
    return parallel([lambda: fan(n - 1) for i in range(16)])
`+"result = fan(3)", newHost(t, fakeFS))
	if d.Outcome != wire.OutcomeError {
		t.Errorf("done = %+v", d)
	}
}

func TestStoppedIsUncatchable(t *testing.T) {
	for outcome, want := range map[string]string{wire.ReplyStopped: wire.OutcomeStopped, wire.ReplyProgramLimit: wire.OutcomeLimit} {
		h := newHost(t, func(m wire.GuestMessage) wire.Reply {
			if m.ID == 2 {
				return wire.Reply{Outcome: outcome, Reason: "operator stopped it"}
			}
			return fakeFS(m)
		})
		d := run(t, `
def main():
    for i in range(10):
        r = attempt(fs.stat, path="/repo/go.mod")
        print(i, r.ok)
    return "finished"
`, h)
		if d.Outcome != want || d.Error != "operator stopped it" || d.Line != 4 || d.Output != "0 True\n" {
			t.Errorf("%s: done = %+v", outcome, d)
		}
		if len(h.started) != 2 {
			t.Errorf("%s: %d calls after the stop", outcome, len(h.started))
		}
	}
}

// TestStoppedInParallel: a stop ends every branch, including those waiting
// for calls (no Wait for their replies) and those not yet started.
func TestStoppedInParallel(t *testing.T) {
	h := newHost(t, func(m wire.GuestMessage) wire.Reply {
		if m.ID == 1 {
			return wire.Reply{Outcome: wire.ReplyStopped, Reason: "task ended"}
		}
		return fakeFS(m)
	})
	d := run(t, `
r = parallel(
    lambda: attempt(fs.stat, path="/a"),
    lambda: attempt(fs.stat, path="/b"),
    lambda: [attempt(fs.stat, path="/c") for i in range(5)],
    lambda: parallel(lambda: attempt(fs.stat, path="/d")),
)
print("after")
`, h)
	if d.Outcome != wire.OutcomeStopped || d.Error != "task ended" || d.Output != "" {
		t.Errorf("done = %+v", d)
	}
	if h.waits != 1 || len(h.started) != 4 {
		t.Errorf("waits %d, started %d; want 1, 4", h.waits, len(h.started))
	}
}

func TestStepLimits(t *testing.T) {
	lim := testLimits
	lim.MaxStepsBetweenCalls = 10_000
	lim.MaxSteps = 50_000
	d := runLimits(t, `
fs.stat(path="/repo/go.mod")
r = attempt(lambda: [0 for x in range(1000000)])
`, newHost(t, fakeFS), lim)
	if d.Outcome != wire.OutcomeLimit || d.Line != 3 ||
		!strings.HasPrefix(d.Error, "the program ran 10001 steps without calling a tool, more than the 10000 allowed between calls; it was stopped (an endless loop?)") {
		t.Errorf("between calls: done = %+v", d)
	}
	// Each segment stays under the between-calls limit; the total does not.
	d = runLimits(t, `
def main():
    while True:
        for i in range(500):
            pass
        attempt(fs.stat, path="/repo/go.mod")
`, newHost(t, fakeFS), lim)
	if d.Outcome != wire.OutcomeLimit || d.Steps != 50_001 ||
		!strings.HasPrefix(d.Error, "the program ran 50001 steps, more than the 50000 allowed in all") {
		t.Errorf("total: done = %+v", d)
	}
	// Parallel branches share both budgets.
	d = runLimits(t, `parallel(lambda: fs.stat(path="/a"), lambda: [0 for x in range(6000)], lambda: [0 for x in range(6000)])`, newHost(t, fakeFS), lim)
	if d.Outcome != wire.OutcomeLimit || !strings.Contains(d.Error, "without calling a tool") {
		t.Errorf("parallel: done = %+v", d)
	}
}

func TestStepLimitDeterministic(t *testing.T) {
	lim := testLimits
	lim.MaxStepsBetweenCalls = 5_000
	src := `
def spin(n):
    s = 0
    for i in range(n):
        s += i
    return s
result = parallel(lambda: spin(1000), lambda: fs.stat(path="/a"), lambda: spin(100000))
`
	first := runLimits(t, src, newHost(t, fakeFS), lim)
	for i := 0; i < 3; i++ {
		if d := runLimits(t, src, newHost(t, fakeFS), lim); !reflect.DeepEqual(d, first) {
			t.Fatalf("run %d: %+v, first %+v", i, d, first)
		}
	}
	if first.Outcome != wire.OutcomeLimit || first.Line != 5 {
		t.Errorf("done = %+v", first)
	}
}

func TestPrintLimit(t *testing.T) {
	lim := testLimits
	lim.MaxPrintBytes = 100
	d := runLimits(t, `
for i in range(100):
    r = attempt(print, "line", i)
`, newHost(t, fakeFS), lim)
	if d.Outcome != wire.OutcomeLimit || len(d.Output) != 100 || d.Line != 3 ||
		!strings.Contains(d.Error, "printed more than the 100 bytes allowed") {
		t.Errorf("done = %+v", d)
	}
}

func TestFailAndRuntimeErrors(t *testing.T) {
	for src, want := range map[string]struct {
		line int
		msg  string
	}{
		"x = 1\nfail(\"bad input\", x)":                               {2, "bad input 1"},
		"d = {}\nx = d[\"k\"]":                                        {2, `key "k" not in dict`},
		"def f():\n    return 1 + \"a\"\ndef main():\n    return f()": {2, "unknown binary op: int + string"},
		"def f(n):\n    return f(n)\nresult = f(1)":                   {2, "called recursively"},
	} {
		d := run(t, src, newHost(t, fakeFS))
		if d.Outcome != wire.OutcomeError || d.Line != want.line || !strings.Contains(d.Error, want.msg) {
			t.Errorf("%q: done = %+v, want line %d %q", src, d, want.line, want.msg)
		}
	}
}

func TestPrelude(t *testing.T) {
	d := run(t, `result = [sum([1, 2, 3]), sum([0.5, 1]), sum([[1], [2]], start=[]), round(2.5), round(3.5), round(2.675, 2), round(7), sorted(["b", "A", "c"], key=lambda s: s.lower())]`, newHost(t, fakeFS))
	if d.Outcome != wire.OutcomeOK || string(d.Result) != `[6,1.5,[1,2],2,4,2.67,7,["A","b","c"]]` {
		t.Errorf("done = %+v", d)
	}
}

func TestBadRequest(t *testing.T) {
	d := Run(wire.Request{Source: "x = 1", Limits: wire.Limits{MaxSteps: 1}}, newHost(t, fakeFS))
	if d.Outcome != wire.OutcomeInvalid || !strings.Contains(d.Error, "Limits.MaxResultBytes, Limits.MaxPrintBytes") {
		t.Errorf("done = %+v", d)
	}
	d = Run(wire.Request{Source: "x = 1", Limits: testLimits, Tools: []wire.Tool{{Name: "a", Module: "m", Function: "f"}, {Name: "b", Module: "m", Function: "f"}}}, newHost(t, fakeFS))
	if d.Outcome != wire.OutcomeInvalid || !strings.Contains(d.Error, `tools "a" and "b" are both m.f`) {
		t.Errorf("done = %+v", d)
	}
	// A module named like a builtin is reachable through call() only.
	h := newHost(t, func(m wire.GuestMessage) wire.Reply { return ok(m.Tool) })
	d = Run(wire.Request{Source: `result = [json.encode([1]), call("json_tool"), len("ab")]`, Limits: testLimits, Tools: []wire.Tool{
		{Name: "json_tool", Module: "json", Function: "encode"}, {Name: "len_tool", Module: "len", Function: "x"}, {Name: "bad", Module: "a-b", Function: "c"}}}, h)
	if d.Outcome != wire.OutcomeOK || string(d.Result) != `["[1]","json_tool",2]` {
		t.Errorf("done = %+v", d)
	}
}

func TestHostileSource(t *testing.T) {
	big := strings.Repeat("x = [1, 2, 3]\ny = {\"a\": x}\n", 64<<10/26)
	deep := "x = " + strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000)
	deepList := "x = " + strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	longExpr := "x = 1" + strings.Repeat(" + 1", 64<<10/4)
	indent := ""
	for i := 0; i < 100; i++ {
		indent += strings.Repeat(" ", i) + "if True:\n"
	}
	indent += strings.Repeat(" ", 100) + "result = 1\n"
	for name, c := range map[string]struct {
		src     string
		outcome string
		want    string
	}{
		"64KiB":        {big, wire.OutcomeOK, ""},
		"deep-parens":  {deep, wire.OutcomeInvalid, "brackets nested 1000 deep, more than the 200 allowed"},
		"deep-list":    {deepList, wire.OutcomeInvalid, "more than the 200 allowed"},
		"long-expr":    {longExpr, wire.OutcomeOK, ""},
		"deep-indent":  {indent, wire.OutcomeOK, ""},
		"strings":      {`x = "((((((" + '[[[[[[' + """{{{{` + "\n" + `"""`, wire.OutcomeOK, ""},
		"bad-utf8":     {"x = '\xff'", wire.OutcomeOK, ""},
		"unterminated": {`x = "abc`, wire.OutcomeInvalid, "unexpected"},
		"load":         {`load("x.star", "y")`, wire.OutcomeInvalid, "load is not available"},
		"string-lines": {"x = 'a(\n" + deep, wire.OutcomeInvalid, "line 2: brackets nested 1000 deep"},
	} {
		t.Run(name, func(t *testing.T) {
			d := run(t, c.src, newHost(t, fakeFS))
			if d.Outcome != c.outcome || !strings.Contains(d.Error, c.want) {
				t.Errorf("done = %+v, want %s %q", trim(d), c.outcome, c.want)
			}
		})
	}
}

func trim(d wire.Done) string {
	s := fmt.Sprintf("%+v", d)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func TestRulesSize(t *testing.T) {
	if len(Rules) > 900 {
		t.Errorf("Rules is %d bytes, more than 900", len(Rules))
	}
	for _, want := range []string{"module.function(name=value", "attempt(", "parallel(", "print(", "main()", "result =", "try/except", "imports", "f-strings", "Limits"} {
		if !strings.Contains(Rules, want) {
			t.Errorf("Rules lacks %q", want)
		}
	}
}

// TestFromJSONMatchesEncodingJSON: the parser reads what encoding/json
// reads (strings with escapes, unicode and invalid UTF-8, numbers,
// whitespace).
func TestFromJSONMatchesEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`{"a": "x\"y\\z\n\u00e9\ud83d\ude00", "b": "h\u00e9llo w\u00f6rld", "c": "\u2028"}`,
		"{\"bad\": \"\xff\xfe ok\"}",
		"{\"k\": \"caf\u00e9 \u65e5\u672c\"}",
		` [ 1 , -2 , 3.25 , -0.5e-3 , 1E+2 , 0 , true , false , null , [ ] , { } ] `,
		`{"nested": {"a": [{"b": [1, {"c": null}]}]}, "": "empty key"}`,
	} {
		v, err := fromJSON([]byte(doc))
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		got, err := toJSON(v, true, "")
		if err != nil {
			t.Fatal(err)
		}
		var want any
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		var gotV any
		if err := json.Unmarshal(got, &gotV); err != nil {
			t.Fatalf("%s: re-encoded %s: %v", doc, got, err)
		}
		if !reflect.DeepEqual(gotV, want) {
			t.Errorf("%s:\n got %s\nwant %#v", doc, got, want)
		}
	}
}

// TestReplyForUnknownCall: a reply for a call not in flight (another
// program's, a repeat) ends the program with an error instead of waking
// the wrong thread or waiting forever.
func TestReplyForUnknownCall(t *testing.T) {
	for _, id := range []int{99, 1} {
		calls := 0
		h := newHost(t, fakeFS)
		h.answer = func(m wire.GuestMessage) wire.Reply {
			calls++
			return fakeFS(m)
		}
		pick := 0
		var hh wire.Host = hostFunc{start: h.Start, wait: func() wire.Reply {
			r := h.Wait()
			pick++
			if pick == 2 {
				r.ID = id
			}
			return r
		}}
		d := Run(wire.Request{Source: "result = parallel(lambda: attempt(fs.stat, path='/a'), lambda: attempt(fs.stat, path='/b'))", Tools: fsTools, Limits: testLimits}, hh)
		if d.Outcome != wire.OutcomeError || !strings.Contains(d.Error, fmt.Sprintf("the host replied to call %d, which is not in flight", id)) {
			t.Errorf("id %d: done = %+v", id, d)
		}
		// The same on the main thread, which calls inline.
		pick = 0
		h.started, h.flight = nil, nil
		d = Run(wire.Request{Source: "a = attempt(fs.stat, path='/a')\nb = attempt(fs.stat, path='/b')\nprint('after')", Tools: fsTools, Limits: testLimits}, hh)
		if d.Outcome != wire.OutcomeError || d.Output != "" || !strings.Contains(d.Error, fmt.Sprintf("the host replied to call %d, which is not in flight", id)) {
			t.Errorf("inline, id %d: done = %+v", id, d)
		}
	}
}

type hostFunc struct {
	start func(wire.GuestMessage)
	wait  func() wire.Reply
}

func (h hostFunc) Start(m wire.GuestMessage) { h.start(m) }
func (h hostFunc) Wait() wire.Reply          { return h.wait() }

func TestPrintLimitKeepsUTF8(t *testing.T) {
	lim := testLimits
	lim.MaxPrintBytes = 10
	d := runLimits(t, `print("aaaaaaaaaéé")`, newHost(t, fakeFS), lim)
	if d.Outcome != wire.OutcomeLimit || d.Output != "aaaaaaaaa" {
		t.Errorf("done = %+v", d)
	}
}
