package plans

// Program steps (code mode, issue 27 §6): a step may run a Starlark
// program instead of one tool call. Its source is inline (program:) or in
// a file next to the plan (program_file:), read when the plan is parsed,
// so that the plan that travels to the workflow carries the source itself.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/airlock-run/airlock/manifests"
)

// ProgramLimits override a program step's limits; a zero field leaves the
// default (api.DefaultProgramLimits). The names are the gateway's
// programs limits.
type ProgramLimits struct {
	MaxCalls             int                `yaml:"max_calls,omitempty" json:"max_calls,omitempty"`
	MaxDataBytes         int                `yaml:"max_data_bytes,omitempty" json:"max_data_bytes,omitempty"`
	MaxResultBytes       int                `yaml:"max_result_bytes,omitempty" json:"max_result_bytes,omitempty"`
	MaxPrintBytes        int                `yaml:"max_print_bytes,omitempty" json:"max_print_bytes,omitempty"`
	MaxSteps             int64              `yaml:"max_steps,omitempty" json:"max_steps,omitempty"`
	MaxStepsBetweenCalls int64              `yaml:"max_steps_between_calls,omitempty" json:"max_steps_between_calls,omitempty"`
	MaxParallel          int                `yaml:"max_parallel,omitempty" json:"max_parallel,omitempty"`
	MemoryMB             int                `yaml:"memory_mb,omitempty" json:"memory_mb,omitempty"`
	Timeout              manifests.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	MaxSourceBytes       int                `yaml:"max_source_bytes,omitempty" json:"max_source_bytes,omitempty"`
}

// DefaultMaxSourceBytes is a program's source limit where limits say
// none: api.DefaultProgramLimits.MaxSourceBytes (plans cannot import api;
// a test in api keeps the two equal).
const DefaultMaxSourceBytes = 64 << 10

// Ceilings a plan's overrides may not pass: a program's source, calls'
// data and interpreter memory all weigh on the task's history or the
// worker.
const (
	MaxProgramSourceBytes = 1 << 20
	MaxProgramMemoryMB    = 1024
	MaxProgramDataBytes   = 64 << 20
)

// SourceLimit is the most bytes the step's program may have.
func (s Step) SourceLimit() int {
	if s.Limits != nil && s.Limits.MaxSourceBytes > 0 {
		return min(s.Limits.MaxSourceBytes, MaxProgramSourceBytes)
	}
	return DefaultMaxSourceBytes
}

// readPrograms reads each step's program_file into Program. The file must
// lie inside the plan file's directory (after symlinks), be a regular file
// within the step's source limit, and hold UTF-8 text.
func (p *Plan) readPrograms() []manifests.Problem {
	var ps []manifests.Problem
	for i := range p.Steps {
		s := &p.Steps[i]
		if s.ProgramFile == "" || s.Program != "" {
			continue // none, or both (Validate says so)
		}
		lp := fmt.Sprintf("steps[%d].program_file", i)
		add := func(format string, args ...any) {
			ps = append(ps, manifests.Problem{File: p.File, Line: p.Lines.Line(lp), Field: lp, Msg: fmt.Sprintf(format, args...)})
		}
		src, err := readProgramFile(p.File, s.ProgramFile, s.SourceLimit())
		if err != "" {
			add("%s", err)
			continue
		}
		s.Program = src
	}
	return ps
}

// readProgramFile reads rel, relative to planFile's directory; the error
// says what is wrong and what to do.
func readProgramFile(planFile, rel string, limit int) (string, string) {
	if !filepath.IsLocal(rel) {
		return "", fmt.Sprintf("%q is not inside the plan's directory; put the program next to the plan file (or below it) and name it by a relative path without ..", rel)
	}
	dir := filepath.Dir(planFile)
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Sprintf("cannot resolve the plan's directory %s: %v", dir, err)
	}
	full := filepath.Join(dir, rel)
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		if os.IsNotExist(err) {
			return "", fmt.Sprintf("%s does not exist; create it, or fix the path (relative to the plan file's directory, %s)", full, dir)
		}
		return "", fmt.Sprintf("cannot read %s: %v", full, err)
	}
	if r, err := filepath.Rel(realDir, real); err != nil || !filepath.IsLocal(r) {
		return "", fmt.Sprintf("%q leads outside the plan's directory (through a symlink, to %s); put the program itself next to the plan file", rel, real)
	}
	f, err := os.Open(real)
	if err != nil {
		return "", fmt.Sprintf("cannot read %s: %v", full, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Sprintf("%s is not a regular file; name the program's .star file", full)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	switch {
	case err != nil:
		return "", fmt.Sprintf("cannot read %s: %v", full, err)
	case len(data) > limit:
		return "", fmt.Sprintf("%s is more than %d bytes, the program's source limit (limits.max_source_bytes); shorten the program, split the step, or raise limits.max_source_bytes (at most %d)", full, limit, MaxProgramSourceBytes)
	case !utf8.Valid(data):
		return "", fmt.Sprintf("%s is not UTF-8 text; a program is Starlark source", full)
	}
	return string(data), ""
}

// program checks a program step (its tool-step fields are checked by the
// caller when it has none).
func (v *validator) program(s Step, name, at string) {
	switch {
	case s.Tool != "":
		v.add(name+".program", at+".tool", "the step has both tool and a program; a step calls one tool or runs one program: remove tool (and args), or the program")
	case s.Args != nil:
		v.add(name+".args", at+".args", "a program step takes no args; the program passes each tool its arguments (read vars and earlier steps in the program's source, or use a tool step)")
	}
	inline := v.lines.Has(at + ".program")
	switch {
	case s.ProgramFile != "" && inline:
		v.add(name+".program", at+".program", "the step has both program and program_file; keep one")
	case s.ProgramFile != "" && s.Program == "" && v.lines.Has(at+".program_file"):
		// The loader reported why it could not read the file.
	case s.Program == "" && s.ProgramFile != "":
		v.add(name+".program_file", at+".program_file", "%q was not read; load the plan with plans.Load or plans.Parse, which read program files", s.ProgramFile)
	case len(s.Program) > s.SourceLimit():
		field := "program"
		if !inline {
			field = "program_file"
		}
		v.add(name+"."+field, at+"."+field, "the program is %d bytes, more than its source limit of %d (limits.max_source_bytes); shorten it, split the step, or raise the limit (at most %d)", len(s.Program), s.SourceLimit(), MaxProgramSourceBytes)
	case !utf8.ValidString(s.Program):
		v.add(name+".program", at+".program", "is not UTF-8 text; a program is Starlark source")
	case isBlank(s.Program):
		field := "program"
		if !inline {
			field = "program_file"
		}
		v.add(name+"."+field, at+"."+field, "the program is empty; write its Starlark source, e.g. result = fs.read_text_file(path = \"/srv/x\")")
	}
	if l := s.Limits; l != nil {
		v.programLimits(l, name+".limits", at+".limits")
	}
}

func (v *validator) programLimits(l *ProgramLimits, name, at string) {
	check := func(key string, val, ceiling int64) {
		set := v.lines.Has(at + "." + key)
		switch {
		case val < 0 || (val == 0 && set):
			v.add(name+"."+key, at+"."+key, "must be at least 1, got %d; omit it for the default", val)
		case ceiling > 0 && val > ceiling:
			v.add(name+"."+key, at+"."+key, "is %d, more than the most a plan may set, %d; lower it", val, ceiling)
		}
	}
	check("max_calls", int64(l.MaxCalls), 0)
	check("max_data_bytes", int64(l.MaxDataBytes), MaxProgramDataBytes)
	check("max_result_bytes", int64(l.MaxResultBytes), MaxProgramDataBytes)
	check("max_print_bytes", int64(l.MaxPrintBytes), MaxProgramDataBytes)
	check("max_steps", l.MaxSteps, 0)
	check("max_steps_between_calls", l.MaxStepsBetweenCalls, 0)
	check("max_parallel", int64(l.MaxParallel), 0)
	check("memory_mb", int64(l.MemoryMB), MaxProgramMemoryMB)
	check("max_source_bytes", int64(l.MaxSourceBytes), MaxProgramSourceBytes)
	if l.Timeout < 0 || (l.Timeout == 0 && v.lines.Has(at+".timeout")) {
		v.add(name+".timeout", at+".timeout", `must be positive, got %s; write how long the program may run, e.g. "10m"`, l.Timeout)
	}
}

func isBlank(s string) bool {
	for _, r := range s {
		if r != ' ' && r != '\t' && r != '\n' && r != '\r' {
			return false
		}
	}
	return true
}
