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
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/bwrap"
	"github.com/airlock-run/airlock/internal/egress"
	"github.com/airlock-run/airlock/internal/metrics"
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
	// resolver is the egress proxies' (nil: the system's); tests set it.
	resolver egress.Resolver
	// sockets holds the egress proxies' sockets.
	sockets socketDir
	// reporters are the servers' refusal reporters (*upstream to
	// *refusalReporter), kept across restarts so that a server cannot
	// restart itself into a fresh burst.
	reporters sync.Map
	// warned are the start-up warnings given (warnOnce).
	warned sync.Map
}

// socketDir is the directory the egress proxies' sockets are made in.
// It is hidden from every server, so that one allowed to read /tmp
// cannot use another server's proxy (and its allowlist). It is made at
// the first sandboxed start, and removed when no sandboxed server runs:
// a directory removed and made again would not be covered in the
// sandboxes of servers started before.
type socketDir struct {
	mu    sync.Mutex
	path  string
	users int
}

// acquire returns the directory, making it when needed; call done when
// the server's process has exited.
func (d *socketDir) acquire() (string, func(), error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.users == 0 {
		p, err := os.MkdirTemp("", "airlock-egress-")
		if err != nil {
			return "", nil, fmt.Errorf("the egress proxies' directory: %w", err)
		}
		// Searchable, not listable: a server with a host user of its own
		// (server.sandbox.user) reaches its proxy's socket, which is
		// given to it alone (bwrap.Host.Command); others' sockets are
		// root's, and connecting takes write permission.
		if err := os.Chmod(p, 0o711); err != nil {
			_ = os.RemoveAll(p)
			return "", nil, fmt.Errorf("the egress proxies' directory: %w", err)
		}
		d.path = p
	}
	d.users++
	path := d.path
	var once sync.Once
	return path, func() {
		once.Do(func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.users--; d.users == 0 {
				_ = os.RemoveAll(d.path)
				d.path = ""
			}
		})
	}, nil
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
	user := "airlock's own unprivileged host user"
	if os.Geteuid() == 0 {
		user = fmt.Sprintf("host user %d where it can reach what the server needs, else root without capabilities (server.sandbox.user)", manifests.DefaultSandboxUser)
	}
	return fmt.Sprintf("stdio servers run in bubblewrap (%s; a sandbox starts in %s), as %s", s.host.Bwrap, s.host.Probe.Round(100_000), user)
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
		Hide:      slices.Clone(sb.hide),
		Network:   cfg.HostNetwork(),
		Memory:    int64(cfg.EffectiveMemory()),
		Processes: cfg.EffectiveProcesses(),
		OpenFiles: cfg.EffectiveOpenFiles(),
		Name:      u.name,
	}
	user, explicit := sandboxUser(cfg)
	if euid := os.Geteuid(); euid != 0 {
		if explicit && uint32(euid) != user.UID {
			u.warnOnce("user-not-root", u.log.Warn().Str("user", cfg.User).Int("airlock_uid", euid), "server.sandbox.user is not applied: airlock is not root, and only root starts a process as another host user; the server runs as airlock's own unprivileged host user, in its own user namespace")
		}
		user = nil
	}
	spec.User = user
	// write_paths are the server's own state: made when missing (path_roots
	// are the operator's and must exist), and given to the server's host
	// user when it has one.
	for _, d := range sandboxPaths(cfg, true) {
		if err := bwrap.MkdirOwned(d, spec.User); err != nil {
			return nil, nil, fmt.Errorf("server.sandbox.write_paths: %w", err)
		}
	}
	// A path the host user cannot reach is the operator's to grant:
	// airlock changes no owner or mode of a directory it did not make.
	// The default user gives way to airlock's own then; one the manifest
	// names does not.
	if spec.User != nil {
		problems := sb.host.UserProblems(spec)
		if err := sb.host.ProbeUser(*spec.User); err != nil {
			problems = append(problems, err.Error())
		}
		switch {
		case len(problems) == 0:
		case explicit:
			for _, p := range problems {
				u.warnOnce("user:"+p, u.log.Warn().Str("user", cfg.User), "server.sandbox.user: "+p+"; grant it to that user (chown, chmod or setfacl), or change server.sandbox.user; bwrap does not start when it cannot reach a path it binds, and the server's writes there fail")
			}
		default:
			u.warnOnce("user-default:"+strings.Join(problems, "\n"), u.log.Warn().Strs("problems", problems), fmt.Sprintf("the sandboxed server runs as airlock's own host user (root, without capabilities), not as host user %s: %s; grant what it needs to that user (chown, chmod or setfacl) for the server to have a user of its own, or set server.sandbox.user: airlock to keep root and silence this", spec.User, strings.Join(problems, "; ")))
			spec.User = nil
		}
	}
	sockets, doneSockets, err := sb.sockets.acquire()
	if err != nil {
		return nil, nil, err
	}
	spec.Hide = append(spec.Hide, sockets)
	allow := cfg.Egress()
	if allow == nil {
		cmd, release, err := sb.host.Command(spec)
		if err != nil {
			doneSockets()
			return nil, nil, err
		}
		return cmd, func() { release(); doneSockets() }, nil
	}
	proxy, err := u.egressProxy(allow)
	if err != nil {
		doneSockets()
		return nil, nil, err
	}
	closeProxy := func() { _ = proxy.Close(); doneSockets() }
	if spec.Egress, err = proxy.ListenUnix(sockets); err != nil {
		closeProxy()
		return nil, nil, err
	}
	// The socket is root's alone whatever the umask, in a directory that
	// is searchable (as the one above it): bwrap.Host.Command gives the
	// socket to the server's host user when it has one.
	if err := errors.Join(os.Chmod(spec.Egress, 0o600), os.Chmod(filepath.Dir(spec.Egress), 0o711)); err != nil {
		closeProxy()
		return nil, nil, fmt.Errorf("the egress proxy's socket: %w", err)
	}
	cmd, release, err := sb.host.Command(spec)
	if err != nil {
		closeProxy()
		return nil, nil, err
	}
	u.log.Debug().Strs("allow", allow).Msg("the server's network is its egress allowlist, through a proxy of its own")
	return cmd, func() { release(); closeProxy() }, nil
}

// egressProxy makes the proxy of one server process (one per start: it
// goes away with the process). Refusals are counted, logged and audited,
// the last two at most egressReportBurst at once and egressReportRate
// a second after that (per server, across its restarts), so that a
// server cannot flood either.
func (u *upstream) egressProxy(allow []string) (*egress.Proxy, error) {
	rules, err := egress.ParseAllowlist(allow)
	if err != nil {
		return nil, fmt.Errorf("server.sandbox.network.%w", err)
	}
	v, _ := u.pool.opts.Sandbox.reporters.LoadOrStore(u, newRefusalReporter(u, time.Now))
	rep := v.(*refusalReporter)
	return egress.New(egress.Config{Server: u.name, Allow: rules, OnRefusal: rep.report, Resolver: u.pool.opts.Sandbox.resolver}), nil
}

const (
	egressReportBurst = 20
	egressReportRate  = 5 // a second
)

// refusalReporter reports one server's egress refusals.
type refusalReporter struct {
	u          *upstream
	now        func() time.Time
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

func newRefusalReporter(u *upstream, now func() time.Time) *refusalReporter {
	return &refusalReporter{u: u, now: now, tokens: egressReportBurst, last: now()}
}

func (r *refusalReporter) report(x egress.Refusal) {
	metrics.EgressRefusals.WithLabelValues(x.Server, x.Kind).Inc()
	r.mu.Lock()
	now := r.now()
	r.tokens = min(egressReportBurst, r.tokens+now.Sub(r.last).Seconds()*egressReportRate)
	r.last = now
	if r.tokens < 1 {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	r.tokens--
	suppressed := r.suppressed
	r.suppressed = 0
	r.mu.Unlock()
	ev := r.u.log.Warn().Str("server", x.Server).Str("host", x.Host).Str("kind", x.Kind).Str("reason", x.Reason)
	if suppressed > 0 {
		ev = ev.Int("suppressed", suppressed)
	}
	ev.Msg("egress refused: the sandboxed server asked for a connection its allowlist (server.sandbox.network.allow) does not give")
	r.u.pool.opts.Audit.EgressRefused(auditstream.EgressRefusal{Server: x.Server, Host: x.Host, Kind: x.Kind, Reason: x.Reason, Suppressed: suppressed})
}

// sandboxUser is the host user the manifest gives the server (when
// airlock is root): its uid, the default one, or none ("airlock");
// explicit when the manifest names a uid.
func sandboxUser(s *manifests.Sandbox) (user *bwrap.User, explicit bool) {
	if s.AirlockUser() {
		return nil, false
	}
	if uid, gid, ok := s.HostUser(); ok {
		return &bwrap.User{UID: uid, GID: gid}, true
	}
	return &bwrap.User{UID: manifests.DefaultSandboxUser, GID: manifests.DefaultSandboxUser}, false
}

// warnOnce logs ev with msg once per server and key in this process: a
// server restarting does not repeat its start-up warnings.
func (u *upstream) warnOnce(key string, ev *zerolog.Event, msg string) {
	if _, dup := u.pool.opts.Sandbox.warned.LoadOrStore(u.name+"\x00"+key, true); dup {
		ev.Discard()
		return
	}
	ev.Msg(msg)
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
