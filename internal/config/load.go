package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-run/airlock/manifests"
)

// Defaults for fields airlock.yaml may omit.
const (
	DefaultDataDir     = ".airlock"
	DefaultListen      = "127.0.0.1:7400"
	DefaultNamespace   = "default"
	DefaultTaskQueue   = "airlock"
	DefaultMaxCalls    = 1000
	DefaultDeadline    = 24 * time.Hour
	DefaultIdleTimeout = time.Hour
)

// Load reads the configuration at path, applies defaults, and loads and
// validates every manifest it names. Manifest patterns are relative to the
// configuration file's directory. The error, if any, is manifests.Problems:
// every problem of the configuration and of all manifests together, each as
// "file:line: field: what is wrong and how to fix it".
func Load(path string) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, manifests.Problems{manifests.ReadProblem(path, err)}
	}
	cfg := &Config{}
	lines, decoded := manifests.DecodeYAML(path, data, cfg)
	if lines == nil {
		return nil, manifests.Problems(decoded) // malformed YAML: nothing to go on
	}
	cfg.File = path
	applyDefaults(cfg, lines)

	// Carry on past decode problems with what could be decoded, so that one
	// run reports the manifests' problems too.
	problems := append(manifests.Problems(decoded), manifests.WithoutDecoded(cfg.validate(lines), decoded)...)
	files, globProblems := resolveManifests(cfg, lines)
	problems = append(problems, globProblems...)
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })

	ms, err := manifests.LoadFiles(files)
	if err != nil {
		var mps manifests.Problems
		if !errors.As(err, &mps) {
			return nil, err
		}
		problems = append(problems, mps...)
	}
	if len(problems) > 0 {
		return nil, problems
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Server.Name < ms[j].Server.Name })
	return &Snapshot{Config: cfg, Manifests: ms}, nil
}

// applyDefaults fills fields that the file leaves out. A field written with
// a zero value ("max_calls: 0") is kept, so that validation reports it
// instead of silently replacing it.
func applyDefaults(c *Config, lines manifests.Lines) {
	str := func(p string, f *string, def string) {
		if *f == "" && !lines.Has(p) {
			*f = def
		}
	}
	str("data_dir", &c.DataDir, DefaultDataDir)
	str("listen", &c.Listen, DefaultListen)
	str("temporal.namespace", &c.Temporal.Namespace, DefaultNamespace)
	str("temporal.task_queue", &c.Temporal.TaskQueue, DefaultTaskQueue)
	if c.Task.MaxCalls == 0 && !lines.Has("task.max_calls") {
		c.Task.MaxCalls = DefaultMaxCalls
	}
	dur := func(p string, f *manifests.Duration, def time.Duration) {
		if *f == 0 && !lines.Has(p) {
			*f = manifests.Duration(def)
		}
	}
	dur("task.deadline", &c.Task.Deadline, DefaultDeadline)
	dur("task.idle_timeout", &c.Task.IdleTimeout, DefaultIdleTimeout)
}

type validator struct {
	file     string
	lines    manifests.Lines
	problems manifests.Problems
}

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, manifests.Problem{File: v.file, Line: v.lines.Line(path), Field: path, Msg: fmt.Sprintf(format, args...)})
}

func (c *Config) validate(lines manifests.Lines) manifests.Problems {
	v := &validator{file: c.File, lines: lines}
	if strings.TrimSpace(c.DataDir) == "" {
		v.add("data_dir", "is empty; omit it for the default %q or name a directory", DefaultDataDir)
	}
	v.hostPort("listen", c.Listen, `"127.0.0.1:7400" (":7400" listens on every interface)`)
	if c.Temporal.Address != "" {
		v.hostPort("temporal.address", c.Temporal.Address, `"temporal.example.com:7233", or omit it to use the embedded dev server`)
	}
	if c.Temporal.Namespace == "" {
		v.add("temporal.namespace", "is empty; omit it for %q", DefaultNamespace)
	}
	if c.Temporal.TaskQueue == "" {
		v.add("temporal.task_queue", "is empty; omit it for %q", DefaultTaskQueue)
	}
	if c.Task.MaxCalls < 1 {
		v.add("task.max_calls", "must be at least 1, got %d; it caps the tool calls of one task (default %d)", c.Task.MaxCalls, DefaultMaxCalls)
	}
	if c.Task.Deadline <= 0 {
		v.add("task.deadline", `must be positive, got %s; write how long a task may run, e.g. "24h"`, c.Task.Deadline)
	}
	if c.Task.IdleTimeout <= 0 {
		v.add("task.idle_timeout", `must be positive, got %s; write how long a task may wait for its agent, e.g. "1h"`, c.Task.IdleTimeout)
	}
	if len(c.Manifests) == 0 {
		v.add("manifests", `is required; list manifest files or globs relative to this file, e.g. ["manifests/*.yaml"]`)
	}
	return v.problems
}

func (v *validator) hostPort(path, addr, example string) {
	// An empty host (":7400") means every interface, which is allowed.
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(path, "%q is not host:port; write e.g. %s", addr, example)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(path, "%q has no valid port number (0 to 65535); write e.g. %s", addr, example)
	}
}

// resolveManifests expands the manifest patterns against the directory of
// the configuration file, so that airlock behaves the same whatever the
// current directory. Files matched by several patterns are loaded once.
func resolveManifests(c *Config, lines manifests.Lines) ([]string, manifests.Problems) {
	v := &validator{file: c.File, lines: lines}
	dir := filepath.Dir(c.File)
	seen := map[string]bool{}
	var files []string
	for i, pat := range c.Manifests {
		p := fmt.Sprintf("manifests[%d]", i)
		if strings.TrimSpace(pat) == "" {
			v.add(p, "is empty; write a manifest file or glob, or remove the entry")
			continue
		}
		full := pat
		if !filepath.IsAbs(full) {
			full = filepath.Join(dir, full)
		}
		matches, err := filepath.Glob(full)
		if err != nil {
			v.add(p, "%q is not a valid glob (%v); fix the pattern", pat, err)
			continue
		}
		n := 0
		for _, m := range matches {
			if fi, err := os.Stat(m); err != nil || fi.IsDir() {
				continue
			}
			n++
			if !seen[m] {
				seen[m] = true
				files = append(files, m)
			}
		}
		if n == 0 {
			v.add(p, "%q matches no file (looked for %s); fix the pattern, which is relative to the configuration file, or remove it", pat, full)
		}
	}
	return files, v.problems
}
