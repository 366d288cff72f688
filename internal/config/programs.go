package config

import (
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// Programs configures code mode (issue 27): airlock_run_program, with
// which an agent runs a Starlark program whose tool calls go through the
// task's call pipeline.
type Programs struct {
	// Enabled offers airlock_run_program (default true).
	Enabled *bool `yaml:"enabled,omitempty"`
	// MaxDescriptionBytes bounds the tool's description: its rules and one
	// stub per tool the caller may see. Past it the description holds the
	// rules and points at airlock_find_tools (format "stubs"). Default
	// DefaultProgramDescriptionBytes.
	MaxDescriptionBytes int `yaml:"max_description_bytes,omitempty"`
	// Limits bound each program; omitted ones are api.DefaultProgramLimits.
	Limits ProgramLimits `yaml:"limits,omitempty"`
}

// ProgramLimits are programs.limits (see api.ProgramLimits).
type ProgramLimits struct {
	MaxCalls             int                `yaml:"max_calls,omitempty"`
	MaxDataBytes         int                `yaml:"max_data_bytes,omitempty"`
	MaxResultBytes       int                `yaml:"max_result_bytes,omitempty"`
	MaxPrintBytes        int                `yaml:"max_print_bytes,omitempty"`
	MaxSteps             int64              `yaml:"max_steps,omitempty"`
	MaxStepsBetweenCalls int64              `yaml:"max_steps_between_calls,omitempty"`
	MaxParallel          int                `yaml:"max_parallel,omitempty"`
	MemoryMB             int                `yaml:"memory_mb,omitempty"`
	Timeout              manifests.Duration `yaml:"timeout,omitempty"`
	MaxSourceBytes       int                `yaml:"max_source_bytes,omitempty"`
}

// DefaultProgramDescriptionBytes is programs.max_description_bytes'
// default.
const DefaultProgramDescriptionBytes = 8192

// Bounds of programs.limits.memory_mb: below 16 MiB the interpreter does
// not start; above 1 GiB one program could take a worker's memory.
const (
	MinProgramMemoryMB = 16
	MaxProgramMemoryMB = 1024
)

// ProgramsEnabled reports whether airlock_run_program is offered.
func (p Programs) ProgramsEnabled() bool { return p.Enabled == nil || *p.Enabled }

// DescriptionBytes is the effective max_description_bytes.
func (p Programs) DescriptionBytes() int {
	if p.MaxDescriptionBytes > 0 {
		return p.MaxDescriptionBytes
	}
	return DefaultProgramDescriptionBytes
}

// Effective is the limits configured, each omitted one from
// api.DefaultProgramLimits.
func (l ProgramLimits) Effective() api.ProgramLimits {
	return api.ProgramLimits{
		MaxSourceBytes:       l.MaxSourceBytes,
		MaxCalls:             l.MaxCalls,
		MaxDataBytes:         l.MaxDataBytes,
		MaxResultBytes:       l.MaxResultBytes,
		MaxPrintBytes:        l.MaxPrintBytes,
		MaxSteps:             l.MaxSteps,
		MaxStepsBetweenCalls: l.MaxStepsBetweenCalls,
		MaxParallel:          l.MaxParallel,
		MemoryBytes:          int64(max(l.MemoryMB, 0)) << 20, // a negative one shifted could turn positive
		Timeout:              time.Duration(l.Timeout),
	}.Or(api.DefaultProgramLimits)
}

// validatePrograms checks the programs section: a limit written must be
// positive (omit it for the default), memory_mb within its bounds, and the
// limits must hang together.
func (c *Config) validatePrograms(v *validator) {
	p := c.Programs
	positive := func(field string, n int64, what string) {
		if n <= 0 && v.lines.Has(field) {
			v.add(field, "must be at least 1, got %d; it bounds %s (omit it for the default)", n, what)
		}
	}
	positive("programs.max_description_bytes", int64(p.MaxDescriptionBytes), "the bytes of airlock_run_program's description")
	if p.MaxDescriptionBytes > 0 && p.MaxDescriptionBytes < 1024 {
		v.add("programs.max_description_bytes", "is %d, too small for the program rules alone; write at least 1024 (default %d)", p.MaxDescriptionBytes, DefaultProgramDescriptionBytes)
	}
	l := p.Limits
	d := api.DefaultProgramLimits
	positive("programs.limits.max_calls", int64(l.MaxCalls), "the tool calls of one program")
	positive("programs.limits.max_data_bytes", int64(l.MaxDataBytes), "the arguments and results of one program's calls")
	positive("programs.limits.max_result_bytes", int64(l.MaxResultBytes), "the JSON a program returns")
	positive("programs.limits.max_print_bytes", int64(l.MaxPrintBytes), "what a program prints")
	positive("programs.limits.max_steps", l.MaxSteps, "the interpreter steps of one program")
	positive("programs.limits.max_steps_between_calls", l.MaxStepsBetweenCalls, "the interpreter steps between two tool calls")
	positive("programs.limits.max_parallel", int64(l.MaxParallel), "the functions one parallel(...) runs")
	positive("programs.limits.max_source_bytes", int64(l.MaxSourceBytes), "a program's source")
	if l.Timeout <= 0 && v.lines.Has("programs.limits.timeout") {
		v.add("programs.limits.timeout", `must be positive, got %s; write how long a program may run, approval waits included, e.g. "1h" (omit it for %s)`, l.Timeout, manifests.Duration(d.Timeout))
	}
	if v.lines.Has("programs.limits.memory_mb") && (l.MemoryMB < MinProgramMemoryMB || l.MemoryMB > MaxProgramMemoryMB) {
		v.add("programs.limits.memory_mb", "is %d; write a number of MiB from %d to %d (omit it for %d)", l.MemoryMB, MinProgramMemoryMB, MaxProgramMemoryMB, d.MemoryBytes>>20)
	}
	if l.MaxSourceBytes > api.MaxArgumentBytes {
		v.add("programs.limits.max_source_bytes", "is %d, more than the %d bytes a task records as one call's input; write a smaller size", l.MaxSourceBytes, api.MaxArgumentBytes)
	}
	eff := l.Effective()
	if l.MaxStepsBetweenCalls > 0 && eff.MaxStepsBetweenCalls > eff.MaxSteps {
		v.add("programs.limits.max_steps_between_calls", "is %d, more than max_steps (%d); lower it or raise max_steps", eff.MaxStepsBetweenCalls, eff.MaxSteps)
	}
	if l.MaxParallel > 0 && eff.MaxParallel > eff.MaxCalls {
		v.add("programs.limits.max_parallel", "is %d, more than max_calls (%d); lower it or raise max_calls", eff.MaxParallel, eff.MaxCalls)
	}
}
