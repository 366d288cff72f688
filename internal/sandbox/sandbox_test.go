package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/internal/testenv"
)

// guestWasm is built from testdata/guest (see the comment there for the
// command) and committed, so the tests do not depend on the Go toolchain
// producing identical output. After rebuilding, update guestSHA256 with
// `sha256sum internal/sandbox/testdata/guest.wasm`.
//
// reactorWasm is the same guest built as a reactor of the snapshot ABI
// (reactor.go; the command is in testdata/guest/reactor.go). With
// AIRLOCK_SANDBOX_GUEST=reactor every test here runs on it instead
// (guestWasm and guestSHA256 name it), which TestReactorGuest does.
const (
	commandWasm   = "testdata/guest.wasm"
	commandSHA256 = "8b426da9783a6527c9cffe90ab396eb8f96f577d73977934364889dc5123605c"
	reactorWasm   = "testdata/reactor/guest.wasm"
	reactorSHA256 = "537634957ea26ffb44628a83e886cf58a730ee394c810e77c18ebc060f0a0142"
)

var guestWasm, guestSHA256 = commandWasm, commandSHA256

func TestGuestFixtureMatchesHash(t *testing.T) {
	for file, sum := range map[string]string{commandWasm: commandSHA256, reactorWasm: reactorSHA256} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != sum {
			t.Fatalf("%s has sha256 %s, the test says %s: rebuild it or update the constant", file, got, sum)
		}
	}
}

// TestReactorGuest runs every other test of the package again on the
// reactor build of the guest: the adversarial guests, limits, mounts,
// quotas, pools and state between calls, unchanged, against instances
// made from a snapshot.
func TestReactorGuest(t *testing.T) {
	if os.Getenv("AIRLOCK_SANDBOX_GUEST") == "reactor" {
		return // the run it started, asked for it by name
	}
	args := []string{"-test.run", "^Test", "-test.skip", "^TestReactorGuest$", "-test.count", "1"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_SANDBOX_GUEST=reactor")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("PASS")) {
		t.Fatalf("the tests on %s: %v\n%s", reactorWasm, err, out)
	}
	if testing.Verbose() {
		t.Logf("%s", out)
	}
}

// sharedCache is a compilation cache directory for the tests that need a
// Sandbox of their own but not a cold one: compiling the guest takes about
// a second, and much longer under -race or load. It is testenv.WazeroCache,
// kept between runs.
var sharedCache string

// shared is one Sandbox and guest Module for the tests that do not need
// their own.
var shared struct {
	once sync.Once
	s    *Sandbox
	m    *Module
	err  error
}

func guest(t testing.TB) *Module {
	t.Helper()
	shared.once.Do(func() {
		ctx := context.Background()
		shared.s, shared.err = New(ctx, Options{CacheDir: sharedCache})
		if shared.err == nil {
			shared.m, shared.err = shared.s.Load(ctx, guestWasm, guestSHA256)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.m
}

func TestMain(m *testing.M) {
	dir, err := testenv.WazeroCache()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sharedCache = dir
	if os.Getenv("AIRLOCK_SANDBOX_GUEST") == "reactor" {
		guestWasm, guestSHA256 = reactorWasm, reactorSHA256
	}
	code := m.Run()
	if shared.s != nil {
		_ = shared.s.Close(context.Background())
	}
	os.Exit(code)
}

func TestRun(t *testing.T) {
	t.Setenv("AIRLOCK_HOST_SECRET", "must-not-leak")
	tests := []struct {
		name     string
		call     Call
		wantErr  error
		wantExit int
		check    func(t *testing.T, r Result)
	}{
		{
			name: "echo copies stdin to stdout",
			call: Call{Args: []string{"echo"}, Stdin: []byte("hello\n")},
			check: func(t *testing.T, r Result) {
				if string(r.Stdout) != "hello\n" {
					t.Errorf("stdout = %q", r.Stdout)
				}
			},
		},
		{
			name: "upper answers with MCP content",
			call: Call{Args: []string{"upper"}, Stdin: []byte(`{"text":"héllo"}`)},
			check: func(t *testing.T, r Result) {
				want := `{"content":[{"type":"text","text":"HÉLLO"}]}` + "\n"
				if diff := cmp.Diff(want, string(r.Stdout)); diff != "" {
					t.Errorf("stdout (-want +got):\n%s", diff)
				}
			},
		},
		{
			name:     "non-zero exit is a result, stderr kept",
			call:     Call{Args: []string{"exit3"}},
			wantExit: 3,
			check: func(t *testing.T, r Result) {
				if !strings.Contains(string(r.Stderr), "exit3: something went wrong") {
					t.Errorf("stderr = %q", r.Stderr)
				}
			},
		},
		{
			name: "environment is exactly the given variables",
			call: Call{Args: []string{"env"}, Env: map[string]string{"B": "two", "A": "1 = one"}},
			check: func(t *testing.T, r Result) {
				if diff := cmp.Diff("A=1 = one\nB=two\n", string(r.Stdout)); diff != "" {
					t.Errorf("stdout (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "no environment by default",
			call: Call{Args: []string{"env"}},
			check: func(t *testing.T, r Result) {
				if len(r.Stdout) != 0 {
					t.Errorf("stdout = %q, want nothing", r.Stdout)
				}
			},
		},
		{
			name:     "host /etc/passwd is not there",
			call:     Call{Args: []string{"passwd"}},
			wantExit: 1,
			check: func(t *testing.T, r Result) {
				if len(r.Stdout) != 0 || !strings.Contains(string(r.Stderr), "passwd: open /etc/passwd: No such file or directory") {
					t.Errorf("stdout = %q, stderr = %q", r.Stdout, r.Stderr)
				}
			},
		},
		{
			name:     "unknown mode exits 1",
			call:     Call{Args: []string{"nope"}},
			wantExit: 1,
		},
		{
			name:    "stdout over the cap",
			call:    Call{Args: []string{"echo"}, Stdin: bytes.Repeat([]byte("x"), 1000), Limits: Limits{OutputBytes: 999}},
			wantErr: ErrOutputLimit,
			check: func(t *testing.T, r Result) {
				if len(r.Stdout) != 999 {
					t.Errorf("kept %d bytes of stdout, want 999", len(r.Stdout))
				}
			},
		},
		{
			name: "stdout exactly at the cap",
			call: Call{Args: []string{"echo"}, Stdin: bytes.Repeat([]byte("x"), 1000), Limits: Limits{OutputBytes: 1000}},
			check: func(t *testing.T, r Result) {
				if len(r.Stdout) != 1000 {
					t.Errorf("stdout has %d bytes, want 1000", len(r.Stdout))
				}
			},
		},
	}
	m := guest(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := m.Run(context.Background(), tt.call)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("err = %v, want %v (stderr %q)", err, tt.wantErr, r.Stderr)
			}
			if r.ExitCode != tt.wantExit {
				t.Errorf("exit code = %d, want %d (stderr %q)", r.ExitCode, tt.wantExit, r.Stderr)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

// TestLimits runs guests that misbehave and checks each is stopped with the
// right error, and that the same Module works for the next call.
func TestLimits(t *testing.T) {
	t.Parallel() // its own calls; CPU-heavy, beside the compile of TestCacheDir
	if testing.Short() {
		t.Skip("runs guests until they hit their limits")
	}
	tests := []struct {
		name    string
		call    Call
		wantErr error
		// within bounds Result.Duration; the lower bound checks a timeout
		// was not cut short. The upper bound only has to tell the limit
		// apart from a run to the default timeout (the error says which
		// limit stopped the guest), so it is generous: a loaded machine
		// takes seconds where a quiet one takes milliseconds.
		min, max time.Duration
		check    func(t *testing.T, r Result, err error)
	}{
		{
			name:    "infinite loop stopped at the timeout",
			call:    Call{Args: []string{"loop"}, Limits: Limits{Timeout: 300 * time.Millisecond}},
			wantErr: ErrTimeout,
			min:     300 * time.Millisecond, max: DefaultTimeout / 2,
		},
		{
			name:    "sleeping guest stopped at the timeout",
			call:    Call{Args: []string{"sleep"}, Limits: Limits{Timeout: 300 * time.Millisecond}},
			wantErr: ErrTimeout,
			min:     300 * time.Millisecond, max: DefaultTimeout / 2,
		},
		{
			name:    "memory bomb stopped at 64 MiB",
			call:    Call{Args: []string{"bomb"}},
			wantErr: ErrMemoryLimit,
			max:     DefaultTimeout,
			check: func(t *testing.T, r Result, err error) {
				if !strings.Contains(err.Error(), "64 MiB") {
					t.Errorf("error %q does not name the limit", err)
				}
			},
		},
		{
			name:    "memory bomb stopped at 32 MiB",
			call:    Call{Args: []string{"bomb"}, Limits: Limits{MemoryBytes: 32 << 20}},
			wantErr: ErrMemoryLimit,
			max:     DefaultTimeout,
		},
		{
			name:    "flood stopped at the output cap, not at the timeout",
			call:    Call{Args: []string{"flood"}},
			wantErr: ErrOutputLimit,
			max:     DefaultTimeout,
			check: func(t *testing.T, r Result, err error) {
				if len(r.Stdout) != DefaultOutputBytes {
					t.Errorf("kept %d bytes of stdout, want %d", len(r.Stdout), DefaultOutputBytes)
				}
			},
		},
	}
	m := guest(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			call, upper := tt.call, tt.max*slowdown
			if call.Limits.Timeout == 0 {
				// Under the race detector a memory bomb could reach the
				// default timeout before its limit.
				call.Limits.Timeout = DefaultTimeout * slowdown
			}
			r, err := m.Run(context.Background(), call)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v (stderr %q)", err, tt.wantErr, r.Stderr)
			}
			t.Logf("%v after %v", err, r.Duration)
			if r.Duration < tt.min || r.Duration > upper {
				t.Errorf("duration %v, want within [%v, %v]", r.Duration, tt.min, upper)
			}
			if tt.check != nil {
				tt.check(t, r, err)
			}
			// The same limits but the timeout: a loaded machine may take
			// longer than a short one to start the guest.
			next := tt.call.Limits
			next.Timeout = DefaultTimeout * slowdown
			r, err = m.Run(context.Background(), Call{Args: []string{"echo"}, Stdin: []byte("again"), Limits: next})
			if err != nil || string(r.Stdout) != "again" {
				t.Errorf("next call: %q, %v", r.Stdout, err)
			}
		})
	}
}

// TestModuleOverMemoryLimit: a module whose declared memory does not fit
// the limit is refused before it runs (wazero will not compile it for that
// limit), as ErrMemoryLimit, and still runs under a limit it fits.
func TestModuleOverMemoryLimit(t *testing.T) {
	m := guest(t)
	// A Go guest declares more than one page of initial memory.
	_, err := m.Run(context.Background(), Call{Args: []string{"echo"}, Limits: Limits{MemoryBytes: 64 << 10}})
	if !errors.Is(err, ErrMemoryLimit) || !strings.Contains(err.Error(), "module needs more than 65536 bytes") {
		t.Fatalf("err = %v, want %v saying the module needs more than 65536 bytes", err, ErrMemoryLimit)
	}
	r, err := m.Run(context.Background(), Call{Args: []string{"echo"}, Stdin: []byte("fits")})
	if err != nil || string(r.Stdout) != "fits" {
		t.Fatalf("under the default limit: %q, %v", r.Stdout, err)
	}
}

func TestCallerCancellationIsNotATimeout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	r, err := guest(t).Run(ctx, Call{Args: []string{"loop"}})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if r.Duration > 5*time.Second*slowdown {
		t.Errorf("took %v to notice the cancellation", r.Duration)
	}
}

func TestNoNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)

	r, err := guest(t).Run(context.Background(), Call{Args: []string{"net", port}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(r.Stdout), "dial failed") {
		t.Errorf("guest reports %q, want a failed dial", r.Stdout)
	}
	select {
	case <-accepted:
		t.Error("the host listener accepted a connection from the guest")
	case <-time.After(200 * time.Millisecond):
	}
}

// mountTree builds, under a temp dir:
//
//	outside/secret.txt        "SECRET", never reachable
//	ro/, rw/                  each with hello.txt "hi" and symlinks:
//	  abs-link  -> <abs>/outside/secret.txt
//	  rel-link  -> ../outside/secret.txt
//	  dir-link  -> <abs>/outside
//	  in-link   -> hello.txt (stays inside, must work)
func mountTree(t *testing.T) (base string) {
	t.Helper()
	base = t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(base, "outside")
	must(os.Mkdir(outside, 0o755))
	must(os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("SECRET"), 0o644))
	for _, d := range []string{"ro", "rw"} {
		dir := filepath.Join(base, d)
		must(os.Mkdir(dir, 0o755))
		must(os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi"), 0o644))
		must(os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(dir, "abs-link")))
		must(os.Symlink("../outside/secret.txt", filepath.Join(dir, "rel-link")))
		must(os.Symlink(outside, filepath.Join(dir, "dir-link")))
		must(os.Symlink("hello.txt", filepath.Join(dir, "in-link")))
	}
	return base
}

func TestMounts(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		stdin    string
		readOnly bool
		wantExit int
		// stdout and stderr must contain these.
		stdout, stderr string
		// files on the host (relative to the tree) and their wanted
		// content; "" means it must not exist.
		files map[string]string
	}{
		{name: "read a file, ro", args: []string{"cat", "/data/hello.txt"}, readOnly: true, stdout: "hi"},
		{name: "read a file, rw", args: []string{"cat", "/data/hello.txt"}, stdout: "hi"},
		{name: "symlink inside the mount, ro", args: []string{"cat", "/data/in-link"}, readOnly: true, stdout: "hi"},
		{name: "symlink inside the mount, rw", args: []string{"cat", "/data/in-link"}, stdout: "hi"},
		{
			name: "dotdot and absolute symlink, ro", args: []string{"escape", "/data/abs-link"}, readOnly: true,
			stdout: "dotdot: denied: Operation not permitted\nsymlink: denied:",
		},
		{
			name: "dotdot and absolute symlink, rw", args: []string{"escape", "/data/abs-link"},
			stdout: "dotdot: denied: Operation not permitted\nsymlink: denied:",
		},
		{name: "relative symlink out, ro", args: []string{"escape", "/data/rel-link"}, readOnly: true, stdout: "symlink: denied:"},
		{name: "relative symlink out, rw", args: []string{"escape", "/data/rel-link"}, stdout: "symlink: denied:"},
		{name: "through a dir symlink, rw", args: []string{"cat", "/data/dir-link/secret.txt"}, wantExit: 1, stderr: "cat:"},
		{
			name: "write a rw mount", args: []string{"write", "/data/new.txt"}, stdin: "written",
			stdout: "wrote /data/new.txt", files: map[string]string{"rw/new.txt": "written"},
		},
		{
			name: "overwrite a rw file", args: []string{"write", "/data/hello.txt"}, stdin: "bye",
			files: map[string]string{"rw/hello.txt": "bye"},
		},
		{
			name: "write a ro mount", args: []string{"write", "/data/new.txt"}, stdin: "x", readOnly: true,
			wantExit: 1, stderr: "Read-only file system", files: map[string]string{"ro/new.txt": ""},
		},
		{
			name: "overwrite a ro file", args: []string{"write", "/data/hello.txt"}, stdin: "x", readOnly: true,
			wantExit: 1, stderr: "Read-only file system", files: map[string]string{"ro/hello.txt": "hi"},
		},
		{
			name: "write through a symlink out of a rw mount", args: []string{"write", "/data/abs-link"}, stdin: "pwned",
			wantExit: 1, files: map[string]string{"outside/secret.txt": "SECRET"},
		},
		{
			name: "write through a relative symlink out of a rw mount", args: []string{"write", "/data/rel-link"}, stdin: "pwned",
			wantExit: 1, files: map[string]string{"outside/secret.txt": "SECRET"},
		},
		{
			name: "create through a dir symlink out of a rw mount", args: []string{"write", "/data/dir-link/new.txt"}, stdin: "pwned",
			wantExit: 1, files: map[string]string{"outside/new.txt": ""},
		},
		{name: "outside the mount is not there", args: []string{"passwd"}, wantExit: 1, stderr: "open /etc/passwd: No such file or directory"},
		{name: "nothing can be created outside the mounts", args: []string{"write", "/new.txt"}, wantExit: 1, stderr: "Read-only file system"},
		{name: "list a mount", args: []string{"ls", "/data"}, stdout: "abs-link\ndir-link\nhello.txt\nin-link\nrel-link\n"},
		{name: "list the root", args: []string{"ls", "/"}},
	}
	m := guest(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := mountTree(t)
			dir := "rw"
			if tt.readOnly {
				dir = "ro"
			}
			r, err := m.Run(context.Background(), Call{
				Args:   tt.args,
				Stdin:  []byte(tt.stdin),
				Mounts: []Mount{{HostDir: filepath.Join(base, dir), GuestPath: "/data", ReadOnly: tt.readOnly}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if r.ExitCode != tt.wantExit {
				t.Errorf("exit code = %d, want %d (stdout %q, stderr %q)", r.ExitCode, tt.wantExit, r.Stdout, r.Stderr)
			}
			if !strings.Contains(string(r.Stdout), tt.stdout) {
				t.Errorf("stdout = %q, want it to contain %q", r.Stdout, tt.stdout)
			}
			if !strings.Contains(string(r.Stderr), tt.stderr) {
				t.Errorf("stderr = %q, want it to contain %q", r.Stderr, tt.stderr)
			}
			if bytes.Contains(r.Stdout, []byte("SECRET")) || bytes.Contains(r.Stdout, []byte("root:")) {
				t.Errorf("guest read outside its mount: %q", r.Stdout)
			}
			for name, want := range tt.files {
				got, err := os.ReadFile(filepath.Join(base, name))
				switch {
				case want == "" && !errors.Is(err, fs.ErrNotExist):
					t.Errorf("%s exists on the host (%q, %v)", name, got, err)
				case want != "" && string(got) != want:
					t.Errorf("%s = %q, %v; want %q", name, got, err, want)
				}
			}
		})
	}
}

// TestMountPathOperations checks every path operation a rw mount supports,
// and that renames and symlinks cannot be used to leave it.
func TestMountPathOperations(t *testing.T) {
	base := mountTree(t)
	r, err := guest(t).Run(context.Background(), Call{
		Args:   []string{"fsops", "/data"},
		Mounts: []Mount{{HostDir: filepath.Join(base, "rw"), GuestPath: "/data"}},
	})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("exit %d, %v, stderr %q", r.ExitCode, err, r.Stderr)
	}
	want := `mkdir: ok
mkdir again: File exists
write: ok
append: ok
truncate: ok
rename: ok
symlink: ok
readlink b: ok
read via link Appen: ok
chtimes: ok
symlink absolute: Operation not permitted
symlink out: ok
read via link out: Operation not permitted
rename out: Operation not permitted
remove link out: ok
rmdir non-empty: Directory not empty
unlink dir: Is a directory
remove: ok
remove: ok
rmdir: ok
stat gone: No such file or directory
`
	if diff := cmp.Diff(want, string(r.Stdout)); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	for name, want := range map[string]string{"rw/hello.txt": "hi", "outside/secret.txt": "SECRET", "outside/stolen.txt": "", "rw/sub": ""} {
		got, err := os.ReadFile(filepath.Join(base, name))
		if want == "" && !errors.Is(err, fs.ErrNotExist) || want != "" && string(got) != want {
			t.Errorf("host %s: %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestBadMounts(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name   string
		mounts []Mount
		want   string // the error must contain it
	}{
		{"missing host dir", []Mount{{HostDir: missing, GuestPath: "/data"}}, missing},
		{"host path is a file", []Mount{{HostDir: file, GuestPath: "/data"}}, file},
		{"relative guest path", []Mount{{HostDir: dir, GuestPath: "data"}}, `"data" is not absolute`},
		{"guest path twice", []Mount{{HostDir: dir, GuestPath: "/data"}, {HostDir: dir, GuestPath: "/data/"}}, "mounted twice"},
	}
	m := guest(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Run(context.Background(), Call{Args: []string{"echo"}, Mounts: tt.mounts})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	header := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	files := map[string][]byte{
		"garbage.wasm": []byte("not wasm"),
		"empty.wasm":   header,
		// type section: one func () -> (); import section: env.f of it.
		"imports.wasm": append(append([]byte{}, header...),
			1, 4, 1, 0x60, 0, 0,
			2, 9, 1, 3, 'e', 'n', 'v', 1, 'f', 0, 0),
	}
	sums := map[string]string{guestWasm: guestSHA256}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		sums[p] = hex.EncodeToString(sum[:])
	}
	at := func(name string) string { return filepath.Join(dir, name) }
	wrong := strings.Repeat("ab", 32)
	tests := []struct {
		name, path string
		sha        string   // "" means the file's own
		want       []string // the error must contain each; nil means success
		compiled   bool     // whether the module gets as far as compiling
	}{
		{name: "sha256 mismatch", path: guestWasm, sha: wrong, want: []string{guestWasm, "expected " + wrong, "actual " + guestSHA256}},
		{name: "upper-case hash is fine", path: guestWasm, sha: strings.ToUpper(guestSHA256)},
		{name: "hash not hex", path: guestWasm, sha: "xyz", want: []string{guestWasm, "not 64 hex digits"}},
		{name: "missing file", path: at("missing.wasm"), sha: guestSHA256, want: []string{"missing.wasm"}},
		{name: "not a wasm module", path: at("garbage.wasm"), want: []string{at("garbage.wasm"), "compile"}},
		{name: "imports beyond WASI", path: at("imports.wasm"), want: []string{"imports env.f"}, compiled: true},
		{name: "not a command", path: at("empty.wasm"), want: []string{"no _start"}, compiled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A cache directory of its own shows whether anything was
			// compiled; the guest may use the shared one.
			cache := t.TempDir()
			if tt.want == nil {
				cache = sharedCache
			}
			s, err := New(ctx, Options{CacheDir: cache})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			sha := tt.sha
			if sha == "" {
				sha = sums[tt.path]
			}
			_, err = s.Load(ctx, tt.path, sha)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if files := cacheFiles(t, cache); !tt.compiled && len(files) != 0 {
				t.Errorf("refused module left compiled code behind: %v", files)
			}
		})
	}
}

// cacheFiles lists the regular files under dir with their sizes.
func cacheFiles(t testing.TB, dir string) map[string]int64 {
	t.Helper()
	files := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files[p] = fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestCacheDir(t *testing.T) {
	t.Parallel() // its own cache directory; a cold compile, beside TestLimits
	if testing.Short() {
		t.Skip("compiles the guest twice")
	}
	ctx := context.Background()
	cache := t.TempDir()
	load := func() {
		// A new Sandbox stands in for a new process: nothing is shared but
		// the directory.
		s, err := New(ctx, Options{CacheDir: cache})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		m, err := s.Load(ctx, guestWasm, guestSHA256)
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Run(ctx, Call{Args: []string{"echo"}, Stdin: []byte("ok")})
		if err != nil || string(r.Stdout) != "ok" {
			t.Fatalf("run: %q, %v", r.Stdout, err)
		}
	}
	load()
	first := cacheFiles(t, cache)
	if len(first) == 0 {
		t.Fatal("the first Sandbox wrote nothing to the cache dir")
	}
	var size int64
	for _, n := range first {
		size += n
	}
	t.Logf("cache: %d files, %d bytes", len(first), size)
	load()
	if diff := cmp.Diff(first, cacheFiles(t, cache)); diff != "" {
		t.Errorf("the second Sandbox compiled again instead of reading the cache (-first +second):\n%s", diff)
	}
}

// TestConcurrentRuns runs two modules (the guest, and the guest with a
// custom section appended, which hashes differently) under two memory
// limits from many goroutines at once. Run it with -race.
func TestConcurrentRuns(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Options{CacheDir: sharedCache})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)

	b, err := os.ReadFile(guestWasm)
	if err != nil {
		t.Fatal(err)
	}
	// Custom section: id 0, size, name length, name, payload; ignored by
	// the engine.
	other := append(b, 0, 7, 5, 'o', 't', 'h', 'e', 'r', 1)
	otherPath := filepath.Join(t.TempDir(), "other.wasm")
	if err := os.WriteFile(otherPath, other, 0o644); err != nil {
		t.Fatal(err)
	}
	otherSum := sha256.Sum256(other)

	var mods [2]*Module
	var wg sync.WaitGroup
	for i, load := range []struct{ path, sha string }{{guestWasm, guestSHA256}, {otherPath, hex.EncodeToString(otherSum[:])}} {
		wg.Go(func() {
			var err error
			if mods[i], err = s.Load(ctx, load.path, load.sha); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if mods[0].Name() != "guest" || mods[1].Name() != "other" {
		t.Errorf("names %q, %q", mods[0].Name(), mods[1].Name())
	}

	const n = 16
	for i := range n {
		wg.Go(func() {
			m := mods[i%2]
			lim := Limits{MemoryBytes: int64(32+32*(i/2%2)) << 20}
			text := fmt.Sprintf("call %d", i)
			r, err := m.Run(ctx, Call{Args: []string{"upper"}, Stdin: fmt.Appendf(nil, `{"text":%q}`, text), Limits: lim})
			want := fmt.Sprintf(`{"content":[{"type":"text","text":%q}]}`+"\n", strings.ToUpper(text))
			if err != nil || string(r.Stdout) != want {
				t.Errorf("call %d: %q, %v; want %q", i, r.Stdout, err, want)
			}
		})
	}
	wg.Wait()
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Options{CacheDir: sharedCache})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Load(ctx, guestWasm, guestSHA256)
	if err != nil {
		t.Fatal(err)
	}
	cpu0, measured := testenv.ProcessCPU()
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(ctx, Call{Args: []string{"loop"}})
		done <- err
	}()
	// The guest tells nothing when it starts; spinning, it burns CPU, so
	// wait for this process's CPU time to grow by 200 ms (where it cannot
	// be read, proceed: Run then still has to answer ErrClosed).
	testenv.WaitFor(t, "the guest to spin (200 ms of CPU)", 30*time.Second, func() bool {
		cpu, _ := testenv.ProcessCPU()
		return !measured || cpu-cpu0 >= 200*time.Millisecond
	})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("running call: err = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop a running call")
	}
	if _, err := m.Run(ctx, Call{Args: []string{"echo"}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: err = %v, want ErrClosed", err)
	}
	if _, err := s.Load(ctx, guestWasm, guestSHA256); !errors.Is(err, ErrClosed) {
		t.Errorf("Load after Close: err = %v, want ErrClosed", err)
	}
}
