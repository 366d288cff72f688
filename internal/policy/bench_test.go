package policy

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// BenchmarkDecide measures a call that passes every check and is decided by
// the last of n rules, so that every rule is evaluated. The tool has no path
// arguments (path confinement costs system calls, not policy work).
func BenchmarkDecide(b *testing.B) {
	tool := readTextFile()
	schema := json.RawMessage(`{
		"type": "object",
		"properties": {
			"path": {"type": "string"},
			"head": {"type": "number"},
			"tail": {"type": "number"}
		},
		"required": ["path"],
		"additionalProperties": false
	}`)
	in := Input{
		Principal: alice(),
		Args:      json.RawMessage(`{"path": "/srv/sandbox/notes/2026-01-01.md", "head": 20}`),
		Task:      Task{ID: "bench", Calls: 12, AllowTools: []string{"memory__*", "filesystem__read_*"}},
	}
	for _, withSchema := range []bool{false, true} {
		for _, n := range []int{1, 10, 100} {
			rules := make([]Rule, n)
			for i := range n - 1 {
				rules[i] = Rule{
					Name:   fmt.Sprintf("r%d", i),
					When:   fmt.Sprintf(`args.?path.orValue("").startsWith("/srv/private/%d/") || task.calls > %d`, i, 1000+i),
					Effect: Deny,
				}
			}
			rules[n-1] = Rule{Name: "last", When: `"dev" in principal.roles && tool.name.startsWith("filesystem__read_")`, Effect: Allow}
			p := mustCompile(b, Config{Rules: rules})
			in.Tool = tool
			name := fmt.Sprintf("rules=%d", n)
			if withSchema {
				in.Tool.InputSchema = schema
				name = "schema/" + name
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				cpu0, cpuOK := processCPU()
				for b.Loop() {
					if d := p.Decide(in); d.Rule != "last" {
						b.Fatalf("decided by %+v", d)
					}
				}
				reportCPU(b, cpu0, cpuOK)
			})
		}
	}
}

// reportCPU reports the process CPU time per operation since cpu0
// (cpu-ns/op), which the load of a shared machine inflates far less than
// the wall time of ns/op.
func reportCPU(b *testing.B, cpu0 time.Duration, ok bool) {
	cpu1, ok1 := processCPU()
	if ok && ok1 && b.N > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}
