package engine

import (
	"fmt"
	"testing"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// tools30 is a realistic catalog size: 30 tools in 5 modules.
func tools30() []wire.Tool {
	var ts []wire.Tool
	for _, m := range []string{"fs", "gh", "slack", "pg", "web"} {
		for i := 0; i < 6; i++ {
			f := fmt.Sprintf("function_%d", i)
			ts = append(ts, wire.Tool{Name: m + "__" + f, Module: m, Function: f})
		}
	}
	return ts
}

// BenchmarkStart: predeclare 30 tools, parse, resolve, compile and run a
// small program with no call.
func BenchmarkStart(b *testing.B) {
	req := wire.Request{ProgramID: "p", Tools: tools30(), Limits: testLimits, Source: `
def main():
    xs = [i * 2 for i in range(10)]
    return {"n": len(xs), "sum": sum(xs)}
`}
	h := &leanHost{}
	b.ReportAllocs()
	for b.Loop() {
		if d := Run(req, h); d.Outcome != wire.OutcomeOK {
			b.Fatal(d)
		}
	}
}

// BenchmarkCall: the interpreter's cost per tool call (arguments to JSON,
// the hand-off to Run's goroutine and back, the result from JSON), with a
// host that answers at once.
func BenchmarkCall(b *testing.B) {
	const calls = 100
	req := wire.Request{ProgramID: "p", Tools: fsTools, Limits: testLimits, Source: fmt.Sprintf(`
def main():
    n = 0
    for i in range(%d):
        r = fs.stat(path="/repo/go.mod", follow=True, depth=i)
        n += r["size"]
    return n
`, calls)}
	reply := rawOK(`{"path": "/repo/go.mod", "size": 21, "type": "file", "mode": 420, "tags": ["a", "b"]}`)
	h := &leanHost{reply: reply}
	b.ReportAllocs()
	for b.Loop() {
		if d := Run(req, h); d.Outcome != wire.OutcomeOK {
			b.Fatal(d)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*calls)/1e3, "µs/call")
}

// leanHost answers every call at once with the same reply, doing no
// checks of its own (fakeHost's cost would swamp the interpreter's).
type leanHost struct {
	reply  wire.Reply
	flight []int
}

func (h *leanHost) Start(m wire.GuestMessage) { h.flight = append(h.flight, m.ID) }

func (h *leanHost) Wait() wire.Reply {
	r := h.reply
	r.ID, h.flight = h.flight[0], h.flight[1:]
	return r
}

// BenchmarkParallelCall: the cost per call made from parallel branches
// (10 branches of 10 calls each: goroutine hand-offs included).
func BenchmarkParallelCall(b *testing.B) {
	req := wire.Request{ProgramID: "p", Tools: fsTools, Limits: testLimits, Source: `
def branch(i):
    n = 0
    for j in range(10):
        n += fs.stat(path="/repo/go.mod", depth=j)["size"]
    return n
result = sum(parallel([lambda i=i: branch(i) for i in range(10)]))
`}
	h := &leanHost{reply: rawOK(`{"path": "/repo/go.mod", "size": 21, "type": "file"}`)}
	b.ReportAllocs()
	for b.Loop() {
		if d := Run(req, h); d.Outcome != wire.OutcomeOK || string(d.Result) != "2100" {
			b.Fatal(d)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100)/1e3, "µs/call")
}
