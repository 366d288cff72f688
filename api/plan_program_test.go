package api

import (
	"testing"
	"time"

	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
)

// plans cannot import api, so it keeps its own copy of the default source
// limit.
func TestPlansSourceLimitIsTheDefault(t *testing.T) {
	if plans.DefaultMaxSourceBytes != DefaultProgramLimits.MaxSourceBytes {
		t.Errorf("plans.DefaultMaxSourceBytes = %d, DefaultProgramLimits.MaxSourceBytes = %d; keep them equal",
			plans.DefaultMaxSourceBytes, DefaultProgramLimits.MaxSourceBytes)
	}
}

func TestPlanProgramLimits(t *testing.T) {
	if got := PlanProgramLimits(nil); got != DefaultProgramLimits {
		t.Errorf("no overrides: %+v", got)
	}
	got := PlanProgramLimits(&plans.ProgramLimits{MaxCalls: 3, MaxDataBytes: 10, MaxResultBytes: 11, MaxPrintBytes: 12, MaxSteps: 13,
		MaxStepsBetweenCalls: 14, MaxParallel: 2, MemoryMB: 16, Timeout: manifests.Duration(time.Minute), MaxSourceBytes: 100})
	want := ProgramLimits{MaxSourceBytes: 100, MaxCalls: 3, MaxDataBytes: 10, MaxResultBytes: 11, MaxPrintBytes: 12, MaxSteps: 13,
		MaxStepsBetweenCalls: 14, MaxParallel: 2, MemoryBytes: 16 << 20, Timeout: time.Minute}
	if got != want {
		t.Errorf("overrides: got %+v, want %+v", got, want)
	}
	// Past the ceilings (a plan sent as JSON, never validated): held there.
	huge := PlanProgramLimits(&plans.ProgramLimits{MemoryMB: 1 << 40, MaxSourceBytes: 1 << 50, MaxDataBytes: 1 << 50, MaxResultBytes: 1 << 50, MaxPrintBytes: 1 << 50})
	if huge.MemoryBytes != plans.MaxProgramMemoryMB<<20 || huge.MaxSourceBytes != plans.MaxProgramSourceBytes ||
		huge.MaxDataBytes != plans.MaxProgramDataBytes || huge.MaxResultBytes != plans.MaxProgramDataBytes || huge.MaxPrintBytes != plans.MaxProgramDataBytes {
		t.Errorf("past the ceilings: %+v", huge)
	}
	// A zero or negative field leaves the default (Validate refuses them).
	if got := PlanProgramLimits(&plans.ProgramLimits{MaxCalls: -1, MemoryMB: 0}); got != DefaultProgramLimits {
		t.Errorf("non-positive overrides: %+v", got)
	}
	// Negative numbers whose shift to bytes would turn positive (-2^63+1
	// MiB is 1 MiB shifted): still the default.
	if got := PlanProgramLimits(&plans.ProgramLimits{MemoryMB: -1<<63 + 1, Timeout: manifests.Duration(-1 << 63)}); got != DefaultProgramLimits {
		t.Errorf("non-positive overrides: %+v", got)
	}
}

func TestProgramName(t *testing.T) {
	for _, tt := range []struct{ exposed, module, function string }{
		{"filesystem__read_text_file", "filesystem", "read_text_file"},
		{"my-server__get.item", "my_server", "get_item"},
		{"a__b__c", "a", "b__c"},
		{"9lives__3d", "_9lives", "_3d"},
		{"airlock_state_get", "tools", "airlock_state_get"},
		{"srv__ünïcode", "srv", "_n_code"},
		{"__x", "_", "x"},
		{"print__len", "print_", "len"},
		{"pass__pass", "pass_", "pass_"},
		{"x__", "x", "_"},
	} {
		m, f := ProgramName(tt.exposed)
		if m != tt.module || f != tt.function {
			t.Errorf("ProgramName(%q) = %q, %q; want %q, %q", tt.exposed, m, f, tt.module, tt.function)
		}
	}
}
