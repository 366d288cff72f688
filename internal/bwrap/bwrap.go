// Package bwrap runs a stdio MCP server inside bubblewrap (Debian's
// bubblewrap package): new user, mount, PID, IPC, UTS, cgroup and network
// namespaces, a read-only view of the system and of the server's own
// package, write access to the directories it is given and a private
// /tmp, an environment of only what the manifest passes, and resource
// bounds (rlimits set by util-linux's prlimit inside the sandbox, and
// cgroup pids and memory limits where the process may create cgroups).
//
// It builds command lines and probes the host; it does not log and imports
// nothing of airlock's. internal/upstream decides when to use it.
package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Spec is one server to confine. Paths must be absolute.
type Spec struct {
	Command string
	Args    []string
	// Env is the server's whole environment inside the sandbox (PATH,
	// HOME and TMPDIR get defaults when missing).
	Env map[string]string
	// Dir is the working directory; used when it is visible inside the
	// sandbox (bound by one of the lists below), else the server starts
	// in /tmp.
	Dir string

	// Writable are bound read-write (path_roots and write_paths); ReadOnly
	// read-only. Paths that do not exist are skipped.
	Writable, ReadOnly []string
	// Hide are airlock's own directories and files (data dir, config,
	// keys): never bound from the command's resolution, and masked with an
	// empty tmpfs when one of the binds above contains them.
	Hide []string

	// Network shares the host's network; otherwise only loopback.
	Network bool
	// Egress is the path of a unix socket on the host where a forward
	// proxy listens (internal/egress): the server keeps loopback only,
	// and reaches the proxy at ProxyAddr through a forwarder started
	// before it (relay.go); its environment gets ProxyEnv. Not with
	// Network.
	Egress string
	// relay is the forwarder's program on the host (Command sets it).
	relay string

	// Memory (bytes), Processes and OpenFiles bound the server.
	Memory    int64
	Processes int
	OpenFiles int
	// Name names the cgroup (with a unique suffix).
	Name string
	// User, when set and this process is root, is the host user the
	// sandbox runs as (user.go); ignored otherwise.
	User *User
}

// Host is what a probe found: the programs the sandbox needs and whether
// cgroups can be used.
type Host struct {
	Bwrap, Prlimit, Shell string
	users                 sync.Map // User to *userProbe
	cgroup                cgroupKind
	cgroupRoot            string
	// Probe is how long the probe's sandbox took to start and exit.
	Probe time.Duration
}

// ErrUnsupported is wrapped by Probe's errors: the host cannot sandbox.
var ErrUnsupported = errors.New("the stdio sandbox is not available on this host")

// systemRO are the directories every server sees read-only, when they
// exist: the runtime and the libraries it loads.
var systemRO = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcRO are the files of /etc a runtime reads; etcNet are added when the
// server has the network.
var (
	etcRO  = []string{"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki", "/etc/mime.types"}
	etcNet = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf", "/etc/host.conf", "/etc/services", "/etc/protocols"}
)

// Probe finds bwrap and prlimit and starts one sandbox, so that a host
// whose kernel forbids unprivileged user namespaces (or a container
// without the capabilities for them) is found at start-up rather than at
// the first call. Its errors wrap ErrUnsupported and say what to do.
func Probe(ctx context.Context) (*Host, error) {
	h := &Host{}
	var err error
	if h.Bwrap, err = exec.LookPath("bwrap"); err != nil {
		return nil, fmt.Errorf("%w: bwrap is not installed (on Debian and Ubuntu: apt-get install bubblewrap), or set sandbox: off in the manifest", ErrUnsupported)
	}
	if h.Prlimit, err = exec.LookPath("prlimit"); err != nil {
		return nil, fmt.Errorf("%w: prlimit (util-linux) is not installed, which sets the sandbox's limits; install util-linux, or set sandbox: off", ErrUnsupported)
	}
	if h.Shell, err = exec.LookPath("sh"); err != nil {
		return nil, fmt.Errorf("%w: sh is not in PATH", ErrUnsupported)
	}
	h.cgroup, h.cgroupRoot = findCgroups()
	args := h.args(Spec{Command: "true", Memory: 64 << 20, Processes: 16, OpenFiles: 64}, "/tmp", nil)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, h.Bwrap, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("%w: bwrap could not start a sandbox (%s); user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1, or user.max_user_namespaces > 0; in a container, allow them), or set sandbox: off", ErrUnsupported, msg)
	}
	h.Probe = time.Since(start)
	return h, nil
}

// Command returns the command that runs s in the sandbox, and a cleanup
// to call after the process has exited (it removes the server's cgroup).
func (h *Host) Command(s Spec) (*exec.Cmd, func(), error) {
	for _, p := range slices.Concat(s.Writable, s.ReadOnly, s.Hide) {
		if !filepath.IsAbs(p) {
			return nil, nil, fmt.Errorf("sandbox path %q is not absolute", p)
		}
	}
	cmdPath, err := resolveCommand(s)
	if err != nil {
		return nil, nil, err
	}
	s.Command = cmdPath
	if s.Egress != "" {
		if s.Network {
			return nil, nil, fmt.Errorf("the sandbox has either the host's network or an egress proxy, not both")
		}
		if fi, err := os.Stat(s.Egress); err != nil || fi.Mode()&os.ModeSocket == 0 {
			return nil, nil, fmt.Errorf("the egress proxy's socket %s is not there (%v)", s.Egress, err)
		}
		if s.relay, err = relayExecutable(); err != nil {
			return nil, nil, err
		}
	}
	if under(cmdPath, s.Hide) && !under(cmdPath, slices.Concat(s.Writable, s.ReadOnly)) {
		return nil, nil, fmt.Errorf("stdio command %s is inside airlock's own directories (data, configuration), which the sandbox hides; list it in server.sandbox.read_paths, install it elsewhere, or set sandbox: off", cmdPath)
	}
	var prefix []string
	cleanup := func() {}
	if s.asUser() {
		u := *s.User
		if err := h.ProbeUser(u); err != nil {
			return nil, nil, err
		}
		if prefix, err = h.userPrefix(u); err != nil {
			return nil, nil, err
		}
		if s.Egress != "" {
			// The proxy's socket is airlock's: connecting takes write
			// permission on it, given to u alone.
			if err := os.Chown(s.Egress, int(u.UID), int(u.GID)); err != nil {
				return nil, nil, fmt.Errorf("giving the egress proxy's socket to host user %s: %w", u, err)
			}
			if err := os.Chmod(s.Egress, 0o600); err != nil {
				return nil, nil, err
			}
			if s.relay, cleanup, err = userRelay(u, s.relay); err != nil {
				return nil, nil, err
			}
		}
	}
	chdir := "/tmp"
	if s.Dir != "" && h.visible(s, s.Dir) {
		chdir = s.Dir
	}
	cg, err := h.newCgroup(s)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	// setpriv (when the sandbox runs as a User), then bwrap.
	args := append(append(slices.Clone(prefix), h.Bwrap), h.args(s, chdir, h.binds(s))...)
	if cg == nil {
		return exec.Command(args[0], args[1:]...), cleanup, nil
	}
	// The shell moves itself into the cgroup (as root, before setpriv)
	// before it becomes bwrap, so that nothing the server starts escapes
	// the limit.
	script := `for f do shift; [ "$f" = -- ] && break; echo $$ > "$f" || exit 126; done; exec "$@"`
	shArgs := append([]string{"-c", script, "sh"}, cg.procs...)
	shArgs = append(append(shArgs, "--"), args...)
	return exec.Command(h.Shell, shArgs...), func() { cg.remove(); cleanup() }, nil
}

// bind is one bind mount, source to destination.
type bind struct {
	src, dst string
	rw       bool
}

// binds lists the server's own mounts: what it reads (its package), what
// it writes, and masks over airlock's directories, in mount order.
func (h *Host) binds(s Spec) []string {
	var bs []bind
	add := func(p string, rw bool) {
		if _, err := os.Stat(p); err != nil {
			return
		}
		bs = append(bs, bind{src: p, dst: p, rw: rw})
	}
	for _, p := range packagePaths(s) {
		if !under(p, s.Hide) && !systemPath(p) {
			add(p, false)
		}
	}
	for _, p := range s.ReadOnly {
		add(filepath.Clean(p), false)
	}
	for _, p := range s.Writable {
		add(filepath.Clean(p), true)
	}
	// A bind inside another with at least its rights is the same view;
	// leaving it out keeps both in one mount, so that a rename between
	// them (a rollback moving a file into the trash) is not EXDEV.
	all := slices.Clone(bs)
	bs = slices.DeleteFunc(bs, func(b bind) bool {
		for _, c := range all {
			if c.dst != b.dst && within(b.dst, c.dst) && (c.rw || !b.rw) {
				return true
			}
		}
		return false
	})
	var out []string
	emit := func(b bind) {
		op := "--ro-bind"
		if b.rw {
			op = "--bind"
		}
		out = append(out, op, b.src, b.dst)
	}
	for _, b := range bs {
		emit(b)
	}
	// A bind that contains one of airlock's directories would show it:
	// cover it with an empty tmpfs, then bind again what was declared
	// inside it.
	for _, hide := range s.Hide {
		hide = filepath.Clean(hide)
		shown := false
		for _, b := range bs {
			if within(hide, b.dst) {
				shown = true
			}
		}
		if !shown {
			continue
		}
		if fi, err := os.Stat(hide); err == nil && !fi.IsDir() {
			out = append(out, "--ro-bind", "/dev/null", hide)
			continue
		}
		out = append(out, "--size", "65536", "--tmpfs", hide)
		for _, b := range bs {
			if within(b.dst, hide) && b.dst != hide {
				emit(b)
			}
		}
		out = append(out, "--remount-ro", hide)
	}
	return out
}

// args is bwrap's command line for s with the given binds.
func (h *Host) args(s Spec, chdir string, binds []string) []string {
	a := []string{
		"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		// The server's own user: nobody inside its user namespace.
		"--unshare-user", "--uid", "65534", "--gid", "65534",
		"--clearenv",
		"--proc", "/proc", "--dev", "/dev",
		// Private and bounded: a full /tmp cannot exhaust the host's memory.
		"--size", strconv.FormatInt(tmpSize(s.Memory), 10), "--tmpfs", "/tmp",
		"--dir", "/etc",
	}
	if s.Network {
		a = append(a, "--share-net")
	}
	for _, d := range systemRO {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", t, d)
			}
		default:
			a = append(a, "--ro-bind", d, d)
		}
	}
	etc := etcRO
	if s.Network {
		etc = slices.Concat(etcRO, etcNet)
	}
	for _, f := range etc {
		if _, err := os.Stat(f); err == nil {
			a = append(a, "--ro-bind", f, f)
		}
	}
	a = append(a, binds...)
	env := map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp"}
	for k, v := range s.Env {
		env[k] = v
	}
	if s.Egress != "" {
		// After the server's own binds, so that none covers them.
		a = append(a, "--ro-bind", s.Egress, egressSocket, "--ro-bind", s.relay, relayProgram)
		maps.Copy(env, ProxyEnv())
		env[relayEnv] = ProxyAddr + "," + egressSocket
	}
	// The root is bwrap's own tmpfs, unbounded: the directories it made
	// for the mounts above must not take files.
	a = append(a, "--remount-ro", "/")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		a = append(a, "--setenv", k, env[k])
	}
	a = append(a, "--chdir", chdir, "--")
	// The forwarder goes before prlimit: the server's bounds are the
	// server's (a Go binary of airlock's size does not start under a
	// small RLIMIT_DATA), and the forwarder bounds itself (relay.go).
	if s.Egress != "" {
		a = append(a, relayProgram)
	}
	a = append(a, h.Prlimit,
		"--nofile="+strconv.Itoa(s.OpenFiles),
		"--nproc="+strconv.Itoa(s.Processes),
		"--data="+strconv.FormatInt(s.Memory, 10),
		"--core=0",
		"--")
	return append(append(a, s.Command), s.Args...)
}

// tmpSize is the private /tmp's size: a quarter of the memory bound.
func tmpSize(mem int64) int64 { return max(mem/4, 16<<20) }

// visible reports whether directory p exists in the sandbox: it is in a
// mount, or a mount lies inside it (bwrap makes its parents). A hidden
// directory shows then only what was declared inside it.
func (h *Host) visible(s Spec, p string) bool {
	if systemPath(p) {
		return true
	}
	pkg := slices.DeleteFunc(packagePaths(s), func(q string) bool { return under(q, s.Hide) })
	for _, b := range slices.Concat(s.Writable, s.ReadOnly, pkg) {
		if within(p, b) || within(b, p) {
			return true
		}
	}
	return false
}

// resolveCommand finds the command the way exec would, with the
// manifest's PATH when it sets one.
func resolveCommand(s Spec) (string, error) {
	c := s.Command
	if strings.Contains(c, "/") {
		if !filepath.IsAbs(c) {
			c = filepath.Join(s.Dir, c)
		}
		return c, nil
	}
	path := os.Getenv("PATH")
	if p, ok := s.Env["PATH"]; ok {
		path = p
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		f := filepath.Join(dir, c)
		if fi, err := os.Stat(f); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return f, nil
		}
	}
	return "", fmt.Errorf("stdio command %q is not in PATH (%s); install it or give its absolute path", c, path)
}

// packagePaths are what the server needs of its own package: the
// command, and any argument naming an existing file (a script) or
// directory (a project's script brings the project's node_modules), each
// followed through symlinks. A path inside node_modules brings the whole
// outermost node_modules directory (Node resolves imports upwards from
// the script), and a command in a directory named bin brings that
// installation's prefix (nvm's node with its lib/node_modules).
func packagePaths(s Spec) []string {
	var out []string
	addPath := func(p string) {
		for _, q := range append(symlinkChain(p), realpath(p)) {
			if q == "" {
				continue
			}
			if nm := nodeModulesRoot(q); nm != "" {
				out = append(out, nm, realpath(nm))
				continue
			}
			out = append(out, q)
			// A script of the project itself imports from the project's
			// node_modules, found upwards as Node looks for it, with the
			// package.json that says whether .js is a module.
			if isScript(q) {
				if nm, pkg := projectOf(q); nm != "" {
					out = append(out, nm, realpath(nm))
					if pkg != "" {
						out = append(out, pkg)
					}
				}
			}
		}
	}
	if cmd, err := resolveCommand(s); err == nil && !systemPath(cmd) {
		if real := realpath(cmd); filepath.Base(filepath.Dir(real)) == "bin" && nodeModulesRoot(real) == "" {
			out = append(out, filepath.Dir(filepath.Dir(real)))
		}
		addPath(cmd)
	}
	for _, a := range s.Args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		p := a
		if !filepath.IsAbs(p) {
			if s.Dir == "" {
				continue
			}
			p = filepath.Join(s.Dir, p)
		}
		// A directory argument is one the server is told to use (the
		// filesystem server's allowed directories): visible, read-only
		// unless it is also a path root or write path.
		if _, err := os.Stat(p); err == nil {
			addPath(filepath.Clean(p))
		}
	}
	slices.Sort(out)
	return slices.Compact(slices.DeleteFunc(out, func(p string) bool { return p == "" || p == "/" }))
}

// isScript reports whether p is a JavaScript or TypeScript file.
func isScript(p string) bool {
	switch filepath.Ext(p) {
	case ".js", ".mjs", ".cjs", ".ts", ".mts", ".cts":
		return true
	}
	return false
}

// projectOf finds, upwards from script's directory, the nearest
// node_modules directory and the nearest package.json ("" when none).
func projectOf(script string) (nodeModules, packageJSON string) {
	for d := filepath.Dir(script); ; d = filepath.Dir(d) {
		if packageJSON == "" {
			if fi, err := os.Stat(filepath.Join(d, "package.json")); err == nil && !fi.IsDir() {
				packageJSON = filepath.Join(d, "package.json")
			}
		}
		if fi, err := os.Stat(filepath.Join(d, "node_modules")); err == nil && fi.IsDir() {
			return filepath.Join(d, "node_modules"), packageJSON
		}
		if d == filepath.Dir(d) {
			return "", ""
		}
	}
}

// symlinkChain is p and each path its symlinks lead to, in order (a
// link to a path that is itself reached through a symlinked directory
// needs both places visible).
func symlinkChain(p string) []string {
	out := []string{p}
	for range 40 {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			break
		}
		t, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(p), t)
		}
		p = filepath.Clean(t)
		out = append(out, p)
	}
	return out
}

func realpath(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return r
}

// nodeModulesRoot is the outermost node_modules directory p is in, or "".
func nodeModulesRoot(p string) string {
	parts := strings.Split(filepath.ToSlash(p), "/")
	for i, part := range parts {
		if part == "node_modules" {
			return filepath.FromSlash(strings.Join(parts[:i+1], "/"))
		}
	}
	return ""
}

func systemPath(p string) bool { return under(p, systemRO) }

// under reports whether p is one of roots or inside one.
func under(p string, roots []string) bool {
	for _, r := range roots {
		if within(p, r) {
			return true
		}
	}
	return false
}

// within reports whether p is root or inside it.
func within(p, root string) bool {
	p, root = filepath.Clean(p), filepath.Clean(root)
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}
