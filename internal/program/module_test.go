package program

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/wasm"
	"github.com/airlock-run/airlock/wasm/program/wire"
)

// The tests here run the real interpreter, wasm.Program, on a Runtime and
// on Native, and expect the same Done from both where memory allows.

var moduleLimits = wire.Limits{
	MaxResultBytes:       64 << 10,
	MaxPrintBytes:        16 << 10,
	MaxSteps:             10_000_000,
	MaxStepsBetweenCalls: 1_000_000,
	MaxParallel:          16,
}

var moduleTools = []wire.Tool{{Name: "fs__stat", Module: "fs", Function: "stat"}}

func moduleRequest(source string) wire.Request {
	return wire.Request{ProgramID: "prog1", Source: source, Tools: moduleTools, Limits: moduleLimits}
}

// runner is Runtime.Run or Native.Run.
type runner interface {
	Run(ctx context.Context, req wire.Request, memoryBytes int64, h wire.Host) (wire.Done, error)
}

func runModule(t testing.TB, r runner, source string) (wire.Done, *fakeHost) {
	t.Helper()
	h := &fakeHost{t: t, runG: goid()}
	d, err := r.Run(context.Background(), moduleRequest(source), DefaultMemoryBytes, h)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return d, h
}

const threeCalls = `
def main():
    out = []
    for i in range(3):
        out.append(fs.stat(path = "p%d" % i))
    print("made", len(out), "calls")
    return out
`

func TestModuleCalls(t *testing.T) {
	r := newRuntime(t, wasm.Program)
	var first wire.Done
	for i := range 2 {
		d, h := runModule(t, r, threeCalls)
		if d.Outcome != wire.OutcomeOK || string(d.Result) != `[{"echo":1},{"echo":2},{"echo":3}]` || d.Output != "made 3 calls\n" {
			t.Fatalf("Done = %+v", d)
		}
		if len(h.started) != 3 {
			t.Fatalf("%d calls started", len(h.started))
		}
		for j, m := range h.started {
			if m.ID != j+1 || m.Tool != "fs__stat" || string(m.Args) != fmt.Sprintf(`{"path":"p%d"}`, j) || m.Line != 5 {
				t.Errorf("call %d = %+v", j+1, m)
			}
		}
		if i == 0 {
			first = d
		} else if !equalDone(first, d) {
			t.Errorf("two runs ended differently:\n%+v\n%+v", first, d)
		}
	}
	if d, _ := runModule(t, Native{}, threeCalls); !equalDone(first, d) {
		t.Errorf("Native ended differently:\n%+v\n%+v", d, first)
	}
}

func TestModuleLimits(t *testing.T) {
	r := newRuntime(t, wasm.Program)
	memory := "the program used more than its 64 MiB of memory; work on less data at a time"
	for _, tc := range []struct {
		name, source string
		want         string // in Done.Error; Outcome is limit
		native       bool   // Native ends the same way
	}{
		{"list", "x = [0] * 10000000\n", memory, false},
		{"string", "s = \"ab\"\nfor i in range(40):\n    s = s + s\n", memory, false},
		{"loop", "def main():\n    while True:\n        pass\n", "more than the 1000000 allowed between calls", true},
		{"after calls", "def main():\n    for i in range(3):\n        fs.stat(path = str(i))\n    s = \"ab\"\n    for i in range(40):\n        s = s + s\n", memory, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d1, h := runModule(t, r, tc.source)
			d2, _ := runModule(t, r, tc.source)
			calls := 0
			if tc.name == "after calls" {
				calls = 3
			}
			if d1.Outcome != wire.OutcomeLimit || !strings.Contains(d1.Error, tc.want) || len(h.started) != calls {
				t.Fatalf("Done = %+v after %d calls; want a limit naming %q", d1, len(h.started), tc.want)
			}
			if !equalDone(d1, d2) {
				t.Errorf("two runs ended differently:\n%+v\n%+v", d1, d2)
			}
			if tc.native {
				if d, _ := runModule(t, Native{}, tc.source); !equalDone(d, d1) {
					t.Errorf("Native ended differently:\n%+v\n%+v", d, d1)
				}
			}
		})
	}
}

// TestModuleToolNames: a tool's Name reaches the host as it is, whatever
// it holds (the guest encodes start messages by hand).
func TestModuleToolNames(t *testing.T) {
	r := newRuntime(t, wasm.Program)
	for _, name := range []string{"plain__name", `q"uote\\back<>&`, "tab\there\x00nul", "ünï€😀"} {
		req := moduleRequest("def main():\n    return o.f(a = [1, {\"k\": None}])\n")
		req.Tools = []wire.Tool{{Name: name, Module: "o", Function: "f"}}
		h := &fakeHost{t: t, runG: goid()}
		d, err := r.Run(context.Background(), req, 0, h)
		if err != nil || d.Outcome != wire.OutcomeOK || len(h.started) != 1 {
			t.Fatalf("%q: Done = %+v, %v after %d calls", name, d, err, len(h.started))
		}
		if m := h.started[0]; m.Tool != name || string(m.Args) != `{"a":[1,{"k":null}]}` {
			t.Errorf("%q: the host saw %+v", name, m)
		}
	}
}

// TestModuleInvalid: a program that does not parse ends at once, with no
// call, the same in the guest and natively.
func TestModuleInvalid(t *testing.T) {
	r := newRuntime(t, wasm.Program)
	src := "def main(:\n"
	d, h := runModule(t, r, src)
	if d.Outcome != wire.OutcomeInvalid || len(h.started) != 0 {
		t.Fatalf("Done = %+v", d)
	}
	if n, _ := runModule(t, Native{}, src); !equalDone(d, n) {
		t.Errorf("Native ended differently:\n%+v\n%+v", n, d)
	}
}
