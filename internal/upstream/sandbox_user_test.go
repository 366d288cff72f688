package upstream

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/manifests"
)

const testHostUser = 65534

// userLayout is newAttackLayout as an operator prepares it for a server
// with a host user of its own: the hostile server's program where that
// user can run it (a test binary sits in go's 0700 directory), the
// directories above its root searchable, its root given to it, and
// another root's 0600 file of root's that a read_paths entry shows.
func userLayout(t *testing.T) (attackLayout, string) {
	t.Helper()
	l := newAttackLayout(t)
	for _, d := range []string{l.base, l.data, l.other} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(l.root, testHostUser, testHostUser); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(l.base, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(bin, "hostile")
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(prog, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return l, prog
}

// hostUIDs are the host uids of this process's descendants running prog
// (argv[0]), read from /proc on the host's side.
func hostUIDs(t *testing.T, prog string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if argv0, _, _ := strings.Cut(string(cl), "\x00"); argv0 != prog {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				out = append(out, strings.Join(strings.Fields(v), " "))
			}
		}
	}
	return out
}

// TestSandboxHostUser is issue 32's "its own user where possible": with
// server.sandbox.user and airlock root, the server's processes are that
// host user (read from the host's /proc), a 0600 file of root's that its
// read_paths show is not readable (it is to the same server without a
// user: host uid 0 without capabilities still owns root's files), a
// write_paths directory airlock makes is given to it, one of root's that
// exists is not (and a start-up warning names it and the user), its root
// and private /tmp are writable, and the egress forwarder (the test
// binary, in go's 0700 directory) still carries its allowlisted requests.
// Run as another user, the setting is not applied and says so.
func TestSandboxHostUser(t *testing.T) {
	l, prog := userLayout(t)
	sb := requireSandbox(t, l.data, l.config)
	if os.Geteuid() != 0 {
		testSandboxUserNotRoot(t, l, sb)
		return
	}
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "the allowed host answers %s", r.URL.Path)
	}))
	defer tlsSrv.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}))

	made := filepath.Join(l.base, "state", "made")    // airlock makes it
	theirs := filepath.Join(l.base, "operator-state") // root's, 0700
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := zerolog.New(&logs)
	opts := testOptions()
	opts.Sandbox, opts.Logger = sb, &log
	memory := manifests.ByteSize(512 << 20)
	if raceDetector {
		memory = 256 << 30 // race_test.go
	}
	user := strconv.Itoa(testHostUser)
	withUser := hostileServer(t, l, &manifests.Sandbox{Memory: memory, Processes: 64, OpenFiles: 256, User: user,
		ReadPaths: []string{l.other}, WritePaths: []string{made, theirs},
		Network: manifests.SandboxNetwork{Allow: []string{strings.TrimPrefix(tlsSrv.URL, "https://")}}})
	withUser.Stdio.Command = prog
	asRoot := hostileServer(t, l, &manifests.Sandbox{Memory: memory, Processes: 64, OpenFiles: 256, ReadPaths: []string{l.other}, User: manifests.SandboxUserAirlock})
	asRoot.Name = "asroot"
	// No user in the manifest: the default, 65534, reaches everything
	// this one needs…
	byDefault := hostileServer(t, l, &manifests.Sandbox{Memory: memory, Processes: 64, OpenFiles: 256, ReadPaths: []string{l.other}})
	byDefault.Name, byDefault.Stdio.Command = "bydefault", prog
	// …and not this one's program (in go's 0700 directory): it keeps
	// airlock's user, saying why.
	fallback := hostileServer(t, l, &manifests.Sandbox{Memory: memory, Processes: 64, OpenFiles: 256, ReadPaths: []string{l.other}})
	fallback.Name = "fallback"
	p := startPool(t, []manifests.Server{withUser, asRoot, byDefault, fallback}, opts)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	})
	waitState(t, p, "hostile", StateConnected)
	waitState(t, p, "asroot", StateConnected)
	waitState(t, p, "bydefault", StateConnected)
	waitState(t, p, "fallback", StateConnected)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prog string
		n    int
		uid  int
	}{{prog, 2, testHostUser}, {exe, 2, 0}} {
		uids := hostUIDs(t, c.prog)
		if len(uids) < c.n {
			t.Errorf("%d processes run %s, want %d at least: %q", len(uids), c.prog, c.n, uids)
		}
		for _, u := range uids {
			if u != fmt.Sprintf("%d %d %d %d", c.uid, c.uid, c.uid, c.uid) {
				t.Errorf("a process running %s has host Uid %q, want %d throughout", c.prog, u, c.uid)
			}
		}
	}

	ok := func(s string) bool { return strings.HasPrefix(s, "ok: ") }
	for _, c := range []struct {
		name   string
		server string
		in     attackIn
		want   func(string) bool
	}{
		{"read root's 0600 file its read_paths show", "hostile", attackIn{Kind: "read", Target: l.secret}, func(s string) bool { return strings.Contains(s, "permission denied") }},
		{"the same file, the same server as host root (control)", "asroot", attackIn{Kind: "read", Target: l.secret}, func(s string) bool { return strings.HasPrefix(s, "ok: read 21 bytes") }},
		{"read airlock's signing key", "hostile", attackIn{Kind: "read", Target: l.key}, func(s string) bool { return strings.HasPrefix(s, "failed: ") }},
		{"write its own root", "hostile", attackIn{Kind: "write", Target: filepath.Join(l.root, "ok.txt")}, ok},
		{"write its private /tmp", "hostile", attackIn{Kind: "write", Target: "/tmp/ok.txt"}, ok},
		{"write the write path airlock made", "hostile", attackIn{Kind: "write", Target: filepath.Join(made, "ok.txt")}, ok},
		{"write the operator's write path of root's", "hostile", attackIn{Kind: "write", Target: filepath.Join(theirs, "x.txt")}, func(s string) bool { return strings.Contains(s, "permission denied") }},
		{"root's 0600 file, the default user", "bydefault", attackIn{Kind: "read", Target: l.secret}, func(s string) bool { return strings.Contains(s, "permission denied") }},
		{"root's 0600 file, the default given way", "fallback", attackIn{Kind: "read", Target: l.secret}, func(s string) bool { return strings.HasPrefix(s, "ok: read 21 bytes") }},
		{"the default user writes its root", "bydefault", attackIn{Kind: "write", Target: filepath.Join(l.root, "default.txt")}, ok},
		{"fork bomb, as the host user", "bydefault", attackIn{Kind: "forkbomb", N: 5000}, func(s string) bool {
			m := regexp.MustCompile(`^failed: started (\d+) processes, then: `).FindStringSubmatch(s)
			n := 0
			if m != nil {
				n, _ = strconv.Atoi(m[1])
			}
			return m != nil && n < 64
		}},
		{"start a few processes (control)", "bydefault", attackIn{Kind: "forkbomb", N: 5}, func(s string) bool { return s == "ok: started all 5 processes" }},
		{"reach the allowed host through the forwarder and proxy", "hostile", attackIn{Kind: "fetch", Target: tlsSrv.URL + "/hello", CA: ca}, func(s string) bool { return s == "ok: 200 OK the allowed host answers /hello" }},
	} {
		got := callAs(t, p, c.server, c.in)
		if !c.want(got) {
			t.Errorf("%s: the server reports %q", c.name, got)
		} else {
			t.Logf("%s: %s", c.name, firstLine(got))
		}
	}
	for _, c := range []struct {
		path     string
		uid, gid uint32
		mode     os.FileMode
	}{
		{made, testHostUser, testHostUser, 0o700},
		{filepath.Dir(made), 0, 0, 0o711},
		{theirs, 0, 0, 0o700},
	} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		uid, gid := statOwner(fi)
		if uid != c.uid || gid != c.gid || fi.Mode().Perm() != c.mode {
			t.Errorf("%s: owner %d:%d mode %04o, want %d:%d %04o", c.path, uid, gid, fi.Mode().Perm(), c.uid, c.gid, c.mode)
		}
	}
	if b, err := os.ReadFile(filepath.Join(made, "ok.txt")); err != nil || string(b) != "pwned" {
		t.Errorf("the write into the made write path did not reach the host: %q, %v", b, err)
	}
	want := fmt.Sprintf("server.sandbox.user: host user %d:%d cannot write %s", testHostUser, testHostUser, theirs)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("no start-up warning %q in the log:\n%s", want, logs.String())
	}
	want = fmt.Sprintf("not as host user %d:%d: host user %d:%d cannot run %s", testHostUser, testHostUser, testHostUser, testHostUser, exe)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("no start-up warning %q in the log:\n%s", want, logs.String())
	}
	if n := strings.Count(logs.String(), "runs as airlock's own host user"); n != 1 {
		t.Errorf("the fallback is told %d times, want once (fallback only, once):\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "cannot write "+made) {
		t.Errorf("a warning about the write path airlock made:\n%s", logs.String())
	}
}

func callAs(t *testing.T, p *Pool, server string, in attackIn) string {
	t.Helper()
	args, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := p.CallTool(ctx, server, "attack", args)
	if err != nil {
		t.Fatalf("%s: attack %s %s: %v", server, in.Kind, in.Target, err)
	}
	return resultText(res)
}

func statOwner(fi os.FileInfo) (uid, gid uint32) {
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// testSandboxUserNotRoot: an unprivileged airlock cannot start a process
// as another user; the server starts as before, with a warning.
func testSandboxUserNotRoot(t *testing.T, l attackLayout, sb *Sandbox) {
	var logs syncBuffer
	log := zerolog.New(&logs)
	opts := testOptions()
	opts.Sandbox, opts.Logger = sb, &log
	srv := hostileServer(t, l, &manifests.Sandbox{User: strconv.Itoa(testHostUser)})
	p := startPool(t, []manifests.Server{srv}, opts)
	waitState(t, p, "hostile", StateConnected)
	if got := callAs(t, p, "hostile", attackIn{Kind: "write", Target: filepath.Join(l.root, "ok.txt")}); !strings.HasPrefix(got, "ok: ") {
		t.Errorf("the server does not write its root: %q", got)
	}
	if !strings.Contains(logs.String(), "server.sandbox.user is not applied: airlock is not root") {
		t.Errorf("no warning in the log:\n%s", logs.String())
	}
}
