package bwrap

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// User is the host user a sandbox runs as (issue 32, "its own user where
// possible"). Without it, an airlock running as root starts bwrap as
// root, and the server's processes are host uid 0 without capabilities
// in their user namespace: the kernel still lets them open root's files
// by their owner bits (a 0600 file of root's that a bind shows is
// readable). With it, bwrap is started through util-linux's setpriv as
// UID and GID with no supplementary groups: bwrap is then unprivileged
// and makes its user namespace the way it does for any user, and every
// process of the server is UID on the host.
type User struct{ UID, GID uint32 }

// userProbe is one user's probe, run once.
type userProbe struct {
	once sync.Once
	err  error
}

func (u User) String() string { return fmt.Sprintf("%d:%d", u.UID, u.GID) }

// Access bits for User.may.
const (
	mayRead  = 4
	mayWrite = 2
	mayExec  = 1
)

// may reports (nil) whether u can search every directory above p and has
// the want bits on p itself, by the mode bits (owner, group or others;
// ACLs are not read, so a path granted by an ACL is reported too, which
// the message says).
func (u User) may(p string, want uint32) error {
	p = filepath.Clean(p)
	var dirs []string
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := u.bits(dirs[i], mayExec); err != nil {
			return err
		}
	}
	return u.bits(p, want)
}

// bits checks the want bits of p for u.
func (u User) bits(p string, want uint32) error {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	mode := st.Mode & 0o7777
	var have uint32
	switch {
	case st.Uid == u.UID:
		have = mode >> 6 & 7
	case st.Gid == u.GID:
		have = mode >> 3 & 7
	default:
		have = mode & 7
	}
	if have&want != want {
		return fmt.Errorf("%s is mode %04o, owner %d:%d", p, mode, st.Uid, st.Gid)
	}
	return nil
}

// asUser reports whether s is to run as its User: one is set and this
// process is root (only root can start a process as another user; an
// unprivileged airlock's servers have its own unprivileged user).
func (s Spec) asUser() bool { return s.User != nil && os.Geteuid() == 0 }

// UserProblems lists what s.User cannot reach of the sandbox's binds
// (empty when s does not run as a user): a write path it cannot write,
// a read path or the command it cannot read. bwrap runs as that user and
// does not start when it cannot reach a bind's source; a path it reaches
// but cannot write fails the server's writes. airlock changes no owner
// or mode of these paths itself, except of the write paths it makes.
func (h *Host) UserProblems(s Spec) []string {
	if !s.asUser() {
		return nil
	}
	u := *s.User
	var out []string
	seen := map[string]bool{}
	check := func(p string, rw bool) {
		p = filepath.Clean(p)
		if seen[p] {
			return
		}
		seen[p] = true
		fi, err := os.Stat(p)
		if err != nil {
			return // not bound (bwrap skips it)
		}
		want, verb := uint32(mayRead), "read"
		if rw {
			want, verb = mayRead|mayWrite, "write"
		}
		if fi.IsDir() {
			want |= mayExec
		}
		if err := u.may(p, want); err != nil {
			out = append(out, fmt.Sprintf("host user %s cannot %s %s (%v)", u, verb, p, err))
		}
	}
	if cmd, err := resolveCommand(s); err == nil {
		seen[filepath.Clean(cmd)] = true
		if err := u.may(cmd, mayRead|mayExec); err != nil {
			out = append(out, fmt.Sprintf("host user %s cannot run %s (%v)", u, cmd, err))
		}
	}
	for _, p := range s.Writable {
		check(p, true)
	}
	for _, p := range s.ReadOnly {
		check(p, false)
	}
	for _, p := range packagePaths(s) {
		if !under(p, s.Hide) && !systemPath(p) {
			check(p, false)
		}
	}
	// bwrap changes into the working directory as u, and does not start
	// when it cannot (a hidden one is an empty tmpfs of the sandbox's).
	if s.Dir != "" && h.visible(s, s.Dir) && !under(s.Dir, s.Hide) && !systemPath(s.Dir) {
		if err := u.may(s.Dir, mayExec); err != nil {
			out = append(out, fmt.Sprintf("host user %s cannot enter the working directory %s (%v)", u, s.Dir, err))
		}
	}
	return out
}

// lookSetpriv finds setpriv once per process.
var lookSetpriv = sync.OnceValues(func() (string, error) { return exec.LookPath("setpriv") })

// userPrefix is the command that starts bwrap as u.
func (h *Host) userPrefix(u User) ([]string, error) {
	setpriv, err := lookSetpriv()
	if err != nil {
		return nil, fmt.Errorf("a sandbox with a host user of its own needs util-linux's setpriv, which is not in PATH; install util-linux, or set server.sandbox.user: airlock")
	}
	return []string{setpriv, "--reuid=" + strconv.FormatUint(uint64(u.UID), 10), "--regid=" + strconv.FormatUint(uint64(u.GID), 10), "--clear-groups", "--"}, nil
}

// ProbeUser starts one sandbox as u, once per user and Host: a kernel
// may allow user namespaces to root only.
func (h *Host) ProbeUser(u User) error {
	v, _ := h.users.LoadOrStore(u, &userProbe{})
	p := v.(*userProbe)
	p.once.Do(func() {
		prefix, err := h.userPrefix(u)
		if err != nil {
			p.err = err
			return
		}
		args := h.args(Spec{Command: "true", Memory: 64 << 20, Processes: 16, OpenFiles: 64}, "/tmp", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, prefix[0], append(append(prefix[1:], h.Bwrap), args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			msg := strings.TrimSpace(stderr.String())
			if msg == "" {
				msg = err.Error()
			}
			p.err = fmt.Errorf("%w: bwrap could not start a sandbox as host user %s (%s); the kernel may allow user namespaces to root only (sysctl kernel.unprivileged_userns_clone=1), or set server.sandbox.user: airlock", ErrUnsupported, u, msg)
		}
	})
	return p.err
}

// userRelay is the forwarder's program as u can run it: this executable
// when u reaches it, else a hard link to it (a copy across filesystems)
// in a directory of its own that u can search, for the sandbox's
// lifetime. A test binary sits in a 0700 directory of go's.
func userRelay(u User, exe string) (string, func(), error) {
	if u.may(exe, mayRead|mayExec) == nil {
		return exe, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "airlock-relay-")
	if err != nil {
		return "", nil, fmt.Errorf("the egress forwarder's directory: %w", err)
	}
	done := func() { _ = os.RemoveAll(dir) }
	if err := os.Chmod(dir, 0o711); err != nil {
		done()
		return "", nil, err
	}
	dst := filepath.Join(dir, "relay")
	if err := os.Link(exe, dst); err != nil || u.may(dst, mayRead|mayExec) != nil {
		_ = os.Remove(dst)
		if err := copyFile(exe, dst, 0o555); err != nil {
			done()
			return "", nil, fmt.Errorf("copying the egress forwarder (%s) where host user %s can run it: %w", exe, u, err)
		}
	}
	if err := u.may(dst, mayRead|mayExec); err != nil {
		done()
		return "", nil, fmt.Errorf("host user %s cannot run the egress forwarder (%v); set TMPDIR to a directory it can search", u, err)
	}
	return dst, done, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// MkdirOwned makes directory p and its missing parents (airlock's own
// write paths). Without a user (or when this process is not root) all are
// mode 0700, as before. With one, p itself, when made here, is mode 0700
// and given to u; parents made here stay root's, mode 0711, so that u
// can pass through them and no more. A directory that exists keeps its
// owner and mode (UserProblems reports one u cannot write).
func MkdirOwned(p string, u *User) error {
	p = filepath.Clean(p)
	own := u != nil && os.Geteuid() == 0
	var missing []string
	for d := p; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		mode := os.FileMode(0o700)
		if own && d != p {
			mode = 0o711
		}
		if err := os.Mkdir(d, mode); err != nil {
			if os.IsExist(err) {
				continue // made meanwhile by someone else: theirs
			}
			return err
		}
		if err := os.Chmod(d, mode); err != nil { // past the umask
			return err
		}
		if own && d == p {
			if err := os.Lchown(d, int(u.UID), int(u.GID)); err != nil {
				return err
			}
		}
	}
	return nil
}
