package workflows

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/metrics"
)

// TestStateCallsAreCounted: each call of a state tool is counted once in
// airlock_task_state_calls_total by op and result (ok, or the check that
// refused it), through the worker's SDK metrics handler.
func TestStateCallsAreCounted(t *testing.T) {
	harnessMetrics = metrics.NewSDKHandler()
	t.Cleanup(func() { harnessMetrics = nil })
	series := [][2]string{{"set", "ok"}, {"get", "ok"}, {"delete", "ok"}, {"set", checkStateArgs}, {"delete", checkStateArgs}}
	count := func() map[[2]string]float64 {
		out := map[[2]string]float64{}
		for _, s := range series {
			var m dto.Metric
			if err := metrics.StateCalls.WithLabelValues(s[0], s[1]).Write(&m); err != nil {
				t.Fatal(err)
			}
			out[s] = m.GetCounter().GetValue()
		}
		return out
	}
	before := count()
	h := newHarness(t)
	h.stateCalls(
		stateReq("s1", api.ToolStateSet, `{"key":"a","value":1}`),
		stateReq("s2", api.ToolStateSet, `{"key":"b","value":2}`),
		stateReq("g1", api.ToolStateGet, `{"key":"a"}`),
		stateReq("d1", api.ToolStateDelete, `{"key":"b"}`),
		stateReq("x1", api.ToolStateSet, `{"key":"a"}`), // no value: state_args
	)
	h.finishAt(time.Minute)
	h.run(baseInput())
	after := count()
	got := map[[2]string]float64{}
	for _, s := range series {
		got[s] = after[s] - before[s]
	}
	want := map[[2]string]float64{{"set", "ok"}: 2, {"get", "ok"}: 1, {"delete", "ok"}: 1, {"set", checkStateArgs}: 1, {"delete", checkStateArgs}: 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("airlock_task_state_calls_total increments (-want +got):\n%s", diff)
	}
}
