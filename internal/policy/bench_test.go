package policy

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
)

// BenchmarkDecide measures a call that passes every check and is decided by
// the last of n rules. In rules=n and schema/rules=n every rule can match
// any tool, so every rule is evaluated: the worst case. In
// indexed/rules=n the first n-1 rules are each restricted to some other
// tool, the way most rules of a policy are written, so the index skips
// them. The tool has no path arguments (path confinement costs system
// calls, not policy work).
func BenchmarkDecide(b *testing.B) {
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
		Tool:      readTextFile(),
		Args:      json.RawMessage(`{"path": "/srv/sandbox/notes/2026-01-01.md", "head": 20}`),
		Task:      Task{ID: "bench", Calls: 12, AllowTools: []string{"memory__*", "filesystem__read_*"}},
	}
	general := func(i int) string {
		return fmt.Sprintf(`args.?path.orValue("").startsWith("/srv/private/%d/") || task.calls > %d`, i, 1000+i)
	}
	restricted := func(i int) string {
		switch i % 3 {
		case 0:
			return fmt.Sprintf(`tool.name == "server%d__write" && args.?path.orValue("").startsWith("/srv/private/")`, i)
		case 1:
			return fmt.Sprintf(`tool.name.startsWith("server%d__") && task.calls > 1000`, i)
		default:
			return fmt.Sprintf(`tool.name in ["server%d__a", "server%d__b"] && args.?mode.orValue("") == "w"`, i, i)
		}
	}
	cases := []struct {
		name   string
		when   func(i int) string
		schema bool
		sizes  []int
	}{
		{name: "", when: general, sizes: []int{1, 10, 100}},
		{name: "schema/", when: general, schema: true, sizes: []int{1, 10, 100}},
		{name: "indexed/", when: restricted, sizes: []int{100}},
	}
	for _, c := range cases {
		for _, n := range c.sizes {
			rules := make([]Rule, n)
			for i := range n - 1 {
				rules[i] = Rule{Name: fmt.Sprintf("r%d", i), When: c.when(i), Effect: api.Deny}
			}
			rules[n-1] = Rule{Name: "last", When: `"dev" in principal.roles && tool.name.startsWith("filesystem__read_")`, Effect: api.Allow}
			p := mustCompile(b, Config{Rules: rules})
			in := in
			if c.schema {
				in.Tool.InputSchema = schema
			}
			b.Run(fmt.Sprintf("%srules=%d", c.name, n), func(b *testing.B) {
				b.ReportAllocs()
				cpu0, cpuOK := testenv.ProcessCPU()
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
	cpu1, ok1 := testenv.ProcessCPU()
	if ok && ok1 && b.N > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}
