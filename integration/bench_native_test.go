package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/loadgen"
	"github.com/airlock-run/airlock/internal/sandbox"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// BenchmarkNativeCall compares a native (WASM) tool call with a comparable
// upstream call, both through airlock in one task each, in alternating
// rounds: the sandbox guest's upper (JSON in, a CallToolResult out) and
// testupstream's echo over stdio, with the same arguments. It reports
// each side's p50/p99 and native-over-upstream, the native call's extra
// cost at p50. warm is the sandbox as airlock runs it (a pool of started
// instances per tool); cold has pools off (Warm: -1), every call
// instantiating the module, as before pools. reactor and reactor-cold are
// the same guest built as a reactor (internal/sandbox's snapshot ABI):
// each call's instance made from the snapshot of its start, with pools
// and without.
//
//	go test -run '^$' -bench NativeCall -benchtime 200x ./integration/
func BenchmarkNativeCall(b *testing.B) {
	native := func(b *testing.B, guest string) *manifests.Manifest {
		wasm, err := os.ReadFile(guest)
		if err != nil {
			b.Fatal(err)
		}
		sum := sha256.Sum256(wasm)
		nat, err := manifests.Parse(filepath.Join(b.TempDir(), "native.yaml"), []byte(`server:
  name: nat
  wasm: {}
tools:
  upper:
    description: the sandbox guest's upper
    side_effects: [none]
    data_access_level: public
    risk: low
    idempotent: true
    wasm:
      module: `+guest+`
      sha256: `+hex.EncodeToString(sum[:])+`
      args: [upper]
      input_schema: {type: object}
`))
		if err != nil {
			b.Fatal(err)
		}
		return nat
	}
	testdata := filepath.Join(repoRoot(), "internal", "sandbox", "testdata")
	command, reactor := filepath.Join(testdata, "guest.wasm"), filepath.Join(testdata, "reactor", "guest.wasm")
	for _, mode := range []struct {
		name   string
		warm   int
		module string
	}{{"warm", 0, command}, {"cold", -1, command}, {"reactor", 0, reactor}, {"reactor-cold", -1, reactor}} {
		b.Run(mode.name, func(b *testing.B) {
			nat := native(b, mode.module)
			counter, _ := counterManifest(b, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")
			s := newStack(b, stackOptions{manifests: []*manifests.Manifest{nat, counter}, maxCalls: 1 << 30, sandboxWarm: mode.warm})
			waitTools(b, s.connect(b, nil), "nat__upper", "counter__echo")
			auth := http.Header{"Authorization": {"Bearer " + testKey}}
			lb, err := loadgen.Open(context.Background(), []loadgen.Target{
				{Name: "upstream", URL: s.url, Tool: "counter__echo", Header: auth},
				{Name: "native", URL: s.url, Tool: "nat__upper", Header: auth},
			}, loadgen.Options{Args: json.RawMessage(`{"text":"ping"}`), Sessions: 1, Calls: b.N, Warmup: 3, Rounds: 5})
			if err != nil {
				b.Fatal(err)
			}
			defer lb.Close()
			b.ResetTimer()
			rs := lb.Run(context.Background())
			b.StopTimer()
			for _, r := range rs {
				if r.Calls != b.N || r.OK != b.N || r.Errs() != 0 {
					b.Fatalf("%s: %d calls (%d ok, %d transport errors, %d isError), want %d answered: %+v",
						r.Target, r.Calls, r.OK, r.TransportErrors, r.ToolErrors, b.N, r.Errors)
				}
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			up, native := rs[0], rs[1]
			b.ReportMetric(ms(up.Latency.P50), "upstream-p50-ms")
			b.ReportMetric(ms(up.Latency.P99), "upstream-p99-ms")
			b.ReportMetric(ms(native.Latency.P50), "native-p50-ms")
			b.ReportMetric(ms(native.Latency.P99), "native-p99-ms")
			b.ReportMetric(ms(native.Latency.P50-up.Latency.P50), "native-over-upstream-p50-ms")
			// Calls spaced as an agent spaces them (it thinks between
			// calls): the same two tools, one after the other in one
			// session, then a pause, in which a pool refills.
			spaced := spacedCalls(b, s, min(b.N, 100), func() {
				if mode.warm == 0 {
					testenv.WaitFor(b, "warm instances", 30*time.Second, func() bool { return s.sandbox.Stats().Ready >= sandbox.DefaultWarm })
				}
			})
			b.ReportMetric(ms(pct(spaced[0], 50)), "spaced-upstream-p50-ms")
			b.ReportMetric(ms(pct(spaced[1], 50)), "spaced-native-p50-ms")
			b.ReportMetric(ms(pct(spaced[1], 50)-pct(spaced[0], 50)), "spaced-native-over-upstream-p50-ms")
			// The upstream pool alone (what the activity does), to show
			// where the time goes; after the measured run.
			for _, tgt := range []struct{ server, tool, metric string }{{"counter", "echo", "upstream-pool-p50-ms"}, {"nat", "upper", "native-pool-p50-ms"}} {
				pd := make([]time.Duration, 0, min(b.N, 200))
				for range cap(pd) {
					t0 := time.Now()
					if _, err := s.pool.CallTool(context.Background(), tgt.server, tgt.tool, []byte(`{"text":"ping"}`)); err != nil {
						b.Fatal(err)
					}
					pd = append(pd, time.Since(t0))
					if mode.warm == 0 && tgt.server == "nat" {
						// As calls through airlock are spaced.
						testenv.WaitFor(b, "a warm instance", 30*time.Second, func() bool { return s.sandbox.Stats().Ready >= sandbox.DefaultWarm })
					}
				}
				b.ReportMetric(ms(pct(pd, 50)), tgt.metric)
			}
			st := s.sandbox.Stats()
			b.ReportMetric(100*float64(st.WarmCalls)/float64(max(1, st.WarmCalls+st.ColdCalls)), "warm-%")
		})
	}
}

// spacedCalls calls counter__echo then nat__upper n times in one session,
// pausing 20 ms (and then for pause) after each pair, and returns the
// durations of each tool's calls.
func spacedCalls(b *testing.B, s *stack, n int, pause func()) [2][]time.Duration {
	b.Helper()
	cs := s.connect(b, nil)
	var ds [2][]time.Duration
	for range n {
		for i, tool := range []string{"counter__echo", "nat__upper"} {
			t0 := time.Now()
			res := call(b, cs, tool, map[string]any{"text": "ping"}, "")
			ds[i] = append(ds[i], time.Since(t0))
			if res.IsError {
				b.Fatalf("%s: %s", tool, text(res))
			}
		}
		time.Sleep(20 * time.Millisecond) // an agent's think time, far shorter than a model's
		pause()
	}
	return ds
}
