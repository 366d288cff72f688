package config_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/config"
)

func loadPrograms(t *testing.T, programs string) (*config.Snapshot, error) {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("fs"))
	src := "manifests: [m.yaml]\n"
	if programs != "" {
		src += "programs:\n" + programs
	}
	return config.Load(write(t, filepath.Join(dir, "airlock.yaml"), src))
}

func TestProgramsDefaults(t *testing.T) {
	snap, err := loadPrograms(t, "")
	if err != nil {
		t.Fatal(err)
	}
	p := snap.Config.Programs
	if !p.ProgramsEnabled() || p.DescriptionBytes() != config.DefaultProgramDescriptionBytes {
		t.Errorf("enabled %v, description bytes %d; want true and %d", p.ProgramsEnabled(), p.DescriptionBytes(), config.DefaultProgramDescriptionBytes)
	}
	if got := p.Limits.Effective(); got != api.DefaultProgramLimits {
		t.Errorf("limits %+v, want the defaults %+v", got, api.DefaultProgramLimits)
	}
}

func TestProgramsConfigured(t *testing.T) {
	snap, err := loadPrograms(t, "  enabled: false\n  max_description_bytes: 4096\n  limits:\n"+
		"    max_calls: 10\n    max_data_bytes: 1000\n    max_result_bytes: 100\n    max_print_bytes: 50\n"+
		"    max_steps: 5000\n    max_steps_between_calls: 500\n    max_parallel: 4\n    memory_mb: 32\n"+
		"    timeout: 10m\n    max_source_bytes: 2000\n")
	if err != nil {
		t.Fatal(err)
	}
	p := snap.Config.Programs
	if p.ProgramsEnabled() || p.DescriptionBytes() != 4096 {
		t.Errorf("enabled %v, description bytes %d; want false, 4096", p.ProgramsEnabled(), p.DescriptionBytes())
	}
	want := api.ProgramLimits{MaxSourceBytes: 2000, MaxCalls: 10, MaxDataBytes: 1000, MaxResultBytes: 100, MaxPrintBytes: 50,
		MaxSteps: 5000, MaxStepsBetweenCalls: 500, MaxParallel: 4, MemoryBytes: 32 << 20, Timeout: 10 * time.Minute}
	if got := p.Limits.Effective(); got != want {
		t.Errorf("limits %+v, want %+v", got, want)
	}
	// One limit alone: the others stay the defaults.
	snap, err = loadPrograms(t, "  limits: {max_calls: 7}\n")
	if err != nil {
		t.Fatal(err)
	}
	want = api.DefaultProgramLimits
	want.MaxCalls = 7
	if got := snap.Config.Programs.Limits.Effective(); got != want {
		t.Errorf("limits %+v, want %+v", got, want)
	}
}

func TestProgramsInvalid(t *testing.T) {
	for _, tc := range []struct{ name, src, field, msg string }{
		{"zero calls", "  limits: {max_calls: 0}\n", "programs.limits.max_calls", "must be at least 1, got 0"},
		{"negative steps", "  limits: {max_steps: -5}\n", "programs.limits.max_steps", "must be at least 1, got -5"},
		{"negative data", "  limits: {max_data_bytes: -1}\n", "programs.limits.max_data_bytes", "must be at least 1"},
		{"zero parallel", "  limits: {max_parallel: 0}\n", "programs.limits.max_parallel", "must be at least 1"},
		{"zero source", "  limits: {max_source_bytes: 0}\n", "programs.limits.max_source_bytes", "must be at least 1"},
		{"source over a call's input", "  limits: {max_source_bytes: 2000000}\n", "programs.limits.max_source_bytes", "a smaller size"},
		{"memory too small", "  limits: {memory_mb: 8}\n", "programs.limits.memory_mb", "from 16 to 1024"},
		{"memory too large", "  limits: {memory_mb: 4096}\n", "programs.limits.memory_mb", "from 16 to 1024"},
		{"memory zero", "  limits: {memory_mb: 0}\n", "programs.limits.memory_mb", "from 16 to 1024"},
		{"timeout zero", "  limits: {timeout: 0s}\n", "programs.limits.timeout", "must be positive"},
		{"description zero", "  max_description_bytes: 0\n", "programs.max_description_bytes", "must be at least 1"},
		{"description tiny", "  max_description_bytes: 100\n", "programs.max_description_bytes", "at least 1024"},
		{"segment over total", "  limits: {max_steps: 100, max_steps_between_calls: 1000}\n", "programs.limits.max_steps_between_calls", "more than max_steps"},
		{"parallel over calls", "  limits: {max_calls: 2, max_parallel: 3}\n", "programs.limits.max_parallel", "more than max_calls"},
		{"unknown key", "  limits: {max_call: 3}\n", "", "max_call"},
		{"unknown section key", "  enable: true\n", "", "enable"},
		{"wrong type", "  limits: {max_calls: many}\n", "", "many"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadPrograms(t, tc.src)
			if err == nil {
				t.Fatalf("loaded; want a problem with %s", tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q; want it to name %q and say %q", err, tc.field, tc.msg)
			}
		})
	}
}

// TestProgramsDocumentedDefaults: the block the README and airlock.yaml
// show, every value written out, is the defaults.
func TestProgramsDocumentedDefaults(t *testing.T) {
	snap, err := loadPrograms(t, "  enabled: true\n  max_description_bytes: 8192\n  limits:\n"+
		"    max_calls: 200\n    max_data_bytes: 4194304\n    max_result_bytes: 65536\n    max_print_bytes: 16384\n"+
		"    max_steps: 10000000\n    max_steps_between_calls: 300000\n    max_parallel: 16\n    memory_mb: 64\n"+
		"    timeout: 1h\n    max_source_bytes: 65536\n")
	if err != nil {
		t.Fatal(err)
	}
	p := snap.Config.Programs
	if got := p.Limits.Effective(); got != api.DefaultProgramLimits || p.DescriptionBytes() != config.DefaultProgramDescriptionBytes || !p.ProgramsEnabled() {
		t.Errorf("limits %+v, want the defaults %+v", got, api.DefaultProgramLimits)
	}
}

// Effective without Load's validation: a non-positive field, even one whose
// shift to bytes would turn positive (-2^63+1 MiB), is the default.
func TestProgramLimitsEffectiveNonPositive(t *testing.T) {
	l := config.ProgramLimits{MaxCalls: -1, MemoryMB: -1<<63 + 1, MaxSteps: -5}
	if got := l.Effective(); got != api.DefaultProgramLimits {
		t.Errorf("limits %+v, want the defaults %+v", got, api.DefaultProgramLimits)
	}
}
