package bwrap

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-run/airlock/internal/testenv"
)

func TestUserMay(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "needs root to make files of other owners (runs as uid %d)", os.Geteuid())
	}
	dir, err := os.MkdirTemp("", "airlock-bwrap-user-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	u := User{UID: 65534, GID: 65534}
	mk := func(name string, mode os.FileMode, uid, gid int) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	closed := mk("closed", 0o700, 0, 0)
	inside := filepath.Join(closed, "inside")
	if err := os.Mkdir(inside, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    string
		want uint32
		ok   bool
		why  string
	}{
		{mk("own", 0o700, 65534, 65534), mayRead | mayWrite | mayExec, true, ""},
		{mk("group", 0o070, 0, 65534), mayRead | mayWrite | mayExec, true, ""},
		{mk("others", 0o705, 0, 0), mayRead | mayExec, true, ""},
		{mk("others-ro", 0o755, 0, 0), mayWrite, false, "mode 0755, owner 0:0"},
		// owner bits decide for the owner, even when others' would allow.
		{mk("owner-denied", 0o077, 65534, 0), mayRead, false, "mode 0077, owner 65534:0"},
		{closed, mayRead, false, "mode 0700, owner 0:0"},
		{inside, mayRead, false, closed + " is mode 0700"}, // the parent blocks it
		{filepath.Join(dir, "missing"), mayRead, false, "no such file"},
	} {
		err := u.may(c.p, c.want)
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), c.why)) {
			t.Errorf("may(%s, %o) = %v, want ok %v (%s)", c.p, c.want, err, c.ok, c.why)
		}
	}
}

func TestMkdirOwned(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "a", "b", "state")
	if err := MkdirOwned(p, &User{UID: 65534, GID: 65533}); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(base, "a")
	want := map[string][3]uint32{p: {65534, 65533, 0o700}, filepath.Join(base, "a", "b"): {0, 0, 0o711}, existing: {0, 0, 0o711}}
	if os.Geteuid() != 0 {
		me := uint32(os.Geteuid())
		want = map[string][3]uint32{p: {me, uint32(os.Getegid()), 0o700}, existing: {me, uint32(os.Getegid()), 0o700}}
	}
	for d, w := range want {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != w[0] || st.Gid != w[1] || uint32(fi.Mode().Perm()) != w[2] {
			t.Errorf("%s: %d:%d %04o, want %d:%d %04o", d, st.Uid, st.Gid, fi.Mode().Perm(), w[0], w[1], w[2])
		}
	}
	// An existing directory keeps its owner and mode.
	if err := os.Chmod(p, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := MkdirOwned(p, &User{UID: 1, GID: 1}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o750 {
		t.Errorf("an existing directory's mode changed to %04o", fi.Mode().Perm())
	}
	// Without a user: 0700 throughout, as before.
	q := filepath.Join(base, "c", "d")
	if err := MkdirOwned(q, nil); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{q, filepath.Dir(q)} {
		if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %04o, want 0700", d, fi.Mode().Perm())
		}
	}
}

// TestUserCommandLine: with a user and root, bwrap is started by setpriv
// as that user with no groups; without root, or without a user, not.
func TestUserCommandLine(t *testing.T) {
	s, dir := spec(t)
	if os.Geteuid() != 0 {
		s.User = &User{UID: 65534, GID: 65534}
		cmd, release, err := testHost.Command(s)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		if slices.ContainsFunc(cmd.Args, func(a string) bool { return strings.HasPrefix(a, "--reuid") }) {
			t.Errorf("not root, yet setpriv: %q", cmd.Args)
		}
		return
	}
	h := &Host{Bwrap: testHost.Bwrap, Prlimit: testHost.Prlimit, Shell: testHost.Shell}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.User = &User{UID: 65534, GID: 65533}
	if probs := h.UserProblems(s); len(probs) == 0 {
		t.Error("no problems reported for a layout of root's 0755 directories and a root write path")
	} else {
		t.Logf("problems: %q", probs)
	}
	cmd, release, err := h.Command(s)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	i := slices.Index(cmd.Args, "--reuid=65534")
	if i < 1 || !strings.HasSuffix(cmd.Args[i-1], "setpriv") || cmd.Args[i+1] != "--regid=65533" || cmd.Args[i+2] != "--clear-groups" || cmd.Args[i+3] != "--" || cmd.Args[i+4] != h.Bwrap {
		t.Errorf("bwrap is not started by setpriv as 65534:65533: %q", cmd.Args)
	}
	s.User = nil
	if h.UserProblems(s) != nil {
		t.Error("problems without a user")
	}
}
