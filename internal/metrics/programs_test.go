package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestObserveProgram: each program counts once by outcome, and its calls,
// steps and duration land in their histograms; an unknown outcome is
// "other", and negative values are clamped to 0.
func TestObserveProgram(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Programs, ProgramCalls, ProgramSteps, ProgramDuration)
	before := scrape(t, reg)
	ObserveProgram("ok", 3, 1500, 2*time.Second)
	ObserveProgram("limit", 0, 10_000_000, 90*time.Minute)
	ObserveProgram("\x1bweird", 0, -5, -time.Second)
	got := scrape(t, reg)
	delta := func(series string) float64 { return got[series] - before[series] }
	for series, want := range map[string]float64{
		`airlock_programs_total{outcome="ok"}`:                1,
		`airlock_programs_total{outcome="limit"}`:             1,
		`airlock_programs_total{outcome="other"}`:             1,
		`airlock_program_calls_count`:                         3,
		`airlock_program_calls_sum`:                           3,
		`airlock_program_calls_bucket{le="0"}`:                2,
		`airlock_program_calls_bucket{le="5"}`:                3,
		`airlock_program_steps_sum`:                           10_001_500,
		`airlock_program_steps_bucket{le="100"}`:              1,
		`airlock_program_steps_bucket{le="10000"}`:            2,
		`airlock_program_steps_bucket{le="1e+06"}`:            2,
		`airlock_program_steps_bucket{le="1e+07"}`:            3,
		`airlock_program_duration_seconds_sum`:                2 + 90*60,
		`airlock_program_duration_seconds_bucket{le="0.01"}`:  1,
		`airlock_program_duration_seconds_bucket{le="2.5"}`:   2,
		`airlock_program_duration_seconds_bucket{le="3600"}`:  2,
		`airlock_program_duration_seconds_bucket{le="14400"}`: 3,
		`airlock_program_duration_seconds_count`:              3,
	} {
		if d := delta(series); d != want {
			t.Errorf("%s went up by %v, want %v", series, d, want)
		}
	}
	for s := range got {
		if strings.Contains(s, "weird") {
			t.Errorf("an unknown outcome became a label: %s", s)
		}
	}
}
