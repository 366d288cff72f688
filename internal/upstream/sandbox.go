package upstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"

	"github.com/airlock-run/airlock/internal/bwrap"
	"github.com/airlock-run/airlock/manifests"
)

// Sandbox is what the pool knows of the host's stdio sandbox (bubblewrap;
// see internal/bwrap and README.md, "Stdio servers run in a sandbox").
// Make it with ProbeSandbox and pass it in Options.Sandbox.
type Sandbox struct {
	host *bwrap.Host
	err  error
	// hide are airlock's own directories and files, never shown to a server.
	hide []string
}

// ProbeSandbox checks (once per process) whether this host can sandbox stdio servers.
// hide are the paths no server may see (airlock's data directory,
// configuration directory and key files). The result is usable either
// way: Err says why there is no sandbox.
func ProbeSandbox(hide []string) *Sandbox {
	h, err := probe()
	var abs []string
	for _, p := range hide {
		if p == "" {
			continue
		}
		if a, err := filepath.Abs(p); err == nil {
			abs = append(abs, a)
		}
	}
	return &Sandbox{host: h, err: err, hide: abs}
}

// NoSandbox is a Sandbox that is off for the given reason: servers whose
// manifest does not require a sandbox run unconfined (with a warning).
func NoSandbox(reason string) *Sandbox { return &Sandbox{err: errors.New(reason)} }

// probe runs bwrap.Probe once per process: it costs a sandbox start.
var probe = sync.OnceValues(func() (*bwrap.Host, error) { return bwrap.Probe(context.Background()) })

// Err is why stdio servers cannot be sandboxed here (nil when they can).
func (s *Sandbox) Err() error {
	if s == nil {
		return errors.New("no sandbox configured")
	}
	return s.err
}

// Describe is the start-up line about the sandbox.
func (s *Sandbox) Describe() string {
	if s.Err() != nil {
		return s.Err().Error()
	}
	return fmt.Sprintf("stdio servers run in bubblewrap (%s; a sandbox starts in %s)", s.host.Bwrap, s.host.Probe.Round(100_000))
}

// sandboxMode is how one stdio server is started.
type sandboxMode int

const (
	sandboxNone    sandboxMode = iota // plain child process
	sandboxOn                         // in bubblewrap
	sandboxRefused                    // demanded by the manifest, not available
)

// sandboxMode decides for this upstream: the manifest's setting against
// what the host can do. reason is for the log or the status.
func (u *upstream) sandboxMode() (mode sandboxMode, reason string) {
	sb := u.pool.opts.Sandbox
	switch {
	case u.cfg.Stdio == nil || sb == nil || !u.cfg.Sandboxed():
		return sandboxNone, ""
	case sb.err == nil:
		return sandboxOn, ""
	case u.cfg.SandboxDemanded():
		return sandboxRefused, "the manifest requires a sandbox (server.sandbox: on, or required: true) and " + sb.err.Error()
	}
	return sandboxNone, "running unsandboxed: " + sb.err.Error()
}

// sandboxedCommand builds the bubblewrap command for this server.
func (u *upstream) sandboxedCommand() (*exec.Cmd, func(), error) {
	sb := u.pool.opts.Sandbox
	c, cfg := u.cfg.Stdio, u.cfg.Sandbox
	spec := bwrap.Spec{
		Command:   c.Command,
		Args:      c.Args,
		Env:       maps.Clone(c.Env),
		Dir:       c.Dir,
		Writable:  slices.Concat(u.cfg.PathRoots, sandboxPaths(cfg, true)),
		ReadOnly:  sandboxPaths(cfg, false),
		Hide:      sb.hide,
		Network:   cfg.HostNetwork(),
		Memory:    int64(cfg.EffectiveMemory()),
		Processes: cfg.EffectiveProcesses(),
		OpenFiles: cfg.EffectiveOpenFiles(),
		Name:      u.name,
	}
	// write_paths are the server's own state: made when missing (path_roots
	// are the operator's and must exist).
	for _, d := range sandboxPaths(cfg, true) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, nil, fmt.Errorf("server.sandbox.write_paths: %w", err)
		}
	}
	return sb.host.Command(spec)
}

func sandboxPaths(s *manifests.Sandbox, write bool) []string {
	if s == nil {
		return nil
	}
	if write {
		return s.WritePaths
	}
	return s.ReadPaths
}
