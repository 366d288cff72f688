package bwrap

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
)

// envClient makes this test binary, run inside the sandbox, a client:
// it says what it sees of its network and dials its proxy.
const envClient = "AIRLOCK_BWRAP_TEST_CLIENT"

func TestMain(m *testing.M) {
	if os.Getenv(envClient) != "" {
		os.Exit(egressClient())
	}
	os.Exit(m.Run())
}

// egressClient sends one line to the proxy named by HTTPS_PROXY and
// prints the answer; then tries a raw socket to the address in
// envClient (the host's listener), and prints whether
// AIRLOCK_BWRAP_RELAY leaked into its environment.
func egressClient() int {
	u, err := url.Parse(os.Getenv("HTTPS_PROXY"))
	if err != nil {
		fmt.Println("bad HTTPS_PROXY:", err)
		return 1
	}
	if n, _ := strconv.Atoi(os.Getenv("BURST")); n > 0 {
		// More connections at once than the forwarder takes
		// (relayConns): it must keep forwarding once they are closed.
		var held []net.Conn
		answered := 0
		for range n {
			c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
			if err != nil {
				break
			}
			held = append(held, c)
		}
		deadline := time.Now().Add(20 * time.Second)
		for _, c := range held {
			_ = c.SetDeadline(deadline)
			fmt.Fprintln(c, "burst")
		}
		for _, c := range held {
			if l, _ := bufio.NewReader(c).ReadString('\n'); l != "" {
				answered++
			}
		}
		for _, c := range held {
			c.Close()
		}
		fmt.Printf("burst: %d held, %d answered\n", len(held), answered)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		fmt.Println("proxy: failed:", err)
	} else {
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintln(c, "hello")
		l, err := bufio.NewReader(c).ReadString('\n')
		fmt.Printf("proxy: %q %v\n", l, err)
		c.Close()
	}
	if c, err := net.DialTimeout("tcp", os.Getenv(envClient), 2*time.Second); err != nil {
		fmt.Println("raw: failed:", err)
	} else {
		c.Close()
		fmt.Println("raw: connected")
	}
	_, leaked := os.LookupEnv(relayEnv)
	fmt.Println("relay env leaked:", leaked)
	return 3 // the forwarder passes the server's status on
}

// TestEgressCommandLine: an egress spec binds the socket and the
// forwarder, sets the proxy environment and starts the forwarder before
// the server; it is refused with the host's network.
func TestEgressCommandLine(t *testing.T) {
	s, dir := spec(t)
	ln, err := net.Listen("unix", filepath.Join(dir, "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s.Egress = filepath.Join(dir, "p.sock")
	cmd, release, err := testHost.Command(s)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	args := strings.Join(cmd.Args, " ")
	exe, _ := relayExecutable()
	for _, w := range []string{
		"--ro-bind " + s.Egress + " " + egressSocket,
		"--ro-bind " + exe + " " + relayProgram,
		"--setenv HTTPS_PROXY http://" + ProxyAddr,
		"--setenv http_proxy http://" + ProxyAddr,
		"--setenv NODE_USE_ENV_PROXY 1",
		"--setenv NO_PROXY localhost,127.0.0.1,::1",
		"--setenv " + relayEnv + " " + ProxyAddr + "," + egressSocket,
		"-- " + relayProgram + " /usr/bin/prlimit --nofile=64 ",
	} {
		if !strings.Contains(args, w) {
			t.Errorf("the command line lacks %q:\n%s", w, args)
		}
	}
	if slices.Contains(cmd.Args, "--share-net") {
		t.Error("an egress sandbox shares the host's network")
	}
	// Without egress nothing of it is there.
	s.Egress = ""
	plain, release2, err := testHost.Command(s)
	if err != nil {
		t.Fatal(err)
	}
	defer release2()
	if a := strings.Join(plain.Args, " "); strings.Contains(a, "PROXY") || strings.Contains(a, relayProgram) {
		t.Errorf("a sandbox without egress has proxy settings: %s", a)
	}
	for _, c := range []struct {
		mod  func(*Spec)
		want string
	}{
		{func(s *Spec) { s.Egress, s.Network = filepath.Join(dir, "p.sock"), true }, "not both"},
		{func(s *Spec) { s.Egress = filepath.Join(dir, "missing.sock") }, "is not there"},
	} {
		s2 := s
		c.mod(&s2)
		if _, _, err := testHost.Command(s2); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
}

// TestEgressForwarder runs a sandbox with a forwarder: the server
// reaches the unix socket outside through 127.0.0.1:3128, and nothing
// else (a listener on the host's loopback gets no connection); the
// forwarder's variable does not reach the server; its exit status does.
func TestEgressForwarder(t *testing.T) {
	h, err := Probe(context.Background())
	if err != nil {
		testenv.Skipf(t, "%v", err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				l, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "proxy saw %s", l)
				c.Close()
			}()
		}
	}()
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := host.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	exe, _ := os.Executable()
	memory := int64(256 << 20)
	if raceDetector {
		memory = 256 << 30
	}
	for _, burst := range []string{"0", "400"} {
		cmd, release, err := h.Command(Spec{
			Command: exe, Env: map[string]string{envClient: host.Addr().String(), "BURST": burst},
			Egress: sock, Memory: memory, Processes: 64, OpenFiles: 1024, Name: "relay-test",
		})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Run()
		release()
		got := out.String()
		t.Logf("burst %s: %s", burst, got)
		want := []string{`proxy: "proxy saw hello\n" <nil>`, "raw: failed:", "relay env leaked: false"}
		if burst != "0" {
			want = append(want, fmt.Sprintf("burst: 400 held, %d answered", relayConns))
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("burst %s: the client's output lacks %q:\n%s", burst, w, got)
			}
		}
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
			t.Errorf("burst %s: the sandbox exited with %v, want the server's status 3", burst, err)
		}
	}
	select {
	case <-accepted:
		t.Error("the host's listener accepted a connection from the sandbox")
	default:
	}
}

// TestEgressForwarderBounds: the server keeps its own bounds (prlimit
// runs after the forwarder), even one too small for a Go program, and
// the forwarder bounds itself.
func TestEgressForwarderBounds(t *testing.T) {
	h, err := Probe(context.Background())
	if err != nil {
		testenv.Skipf(t, "%v", err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	script := `grep -E '^Max (data size|open files|core file size)' /proc/self/limits; echo parent; grep -E '^Max (data size|open files|core file size)' /proc/$PPID/limits; tr '\0' ' ' < /proc/$PPID/cmdline`
	cmd, release, err := h.Command(Spec{Command: "/bin/sh", Args: []string{"-c", script}, Egress: sock, Memory: 32 << 20, Processes: 16, OpenFiles: 64, Name: "bounds"})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	server, parent, _ := strings.Cut(string(out), "parent\n")
	fields := func(s, name string) []string {
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, name) {
				return strings.Fields(strings.TrimPrefix(l, name))
			}
		}
		return nil
	}
	if f := fields(server, "Max data size"); len(f) < 2 || f[0] != "33554432" || f[1] != "33554432" {
		t.Errorf("the server's data bound is %v, want 33554432:\n%s", f, out)
	}
	if f := fields(server, "Max open files"); len(f) < 2 || f[0] != "64" {
		t.Errorf("the server's open files bound is %v, want 64:\n%s", f, out)
	}
	if !strings.Contains(parent, relayProgram) {
		t.Fatalf("the server's parent is not the forwarder:\n%s", out)
	}
	if f := fields(parent, "Max open files"); len(f) < 2 || f[0] != strconv.Itoa(relayFiles) || f[1] != f[0] {
		t.Errorf("the forwarder's open files bound is %v, want %d:\n%s", f, relayFiles, out)
	}
	if f := fields(parent, "Max data size"); len(f) < 2 || f[0] == "unlimited" || f[1] == "unlimited" {
		t.Errorf("the forwarder's data bound is %v, want a bound:\n%s", f, out)
	}
	if f := fields(parent, "Max core file size"); len(f) < 2 || f[0] != "0" || f[1] != "0" {
		t.Errorf("the forwarder's core bound is %v, want 0:\n%s", f, out)
	}
}

// BenchmarkSandboxStart measures a sandbox's start and exit (`true`
// inside) without and with the egress forwarder in front of it.
func BenchmarkSandboxStart(b *testing.B) {
	h, err := Probe(context.Background())
	if err != nil {
		testenv.Skipf(b, "%v", err)
	}
	dir := b.TempDir()
	sock := filepath.Join(dir, "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cases := []struct {
		name   string
		egress string
		user   *User
	}{{"plain", "", nil}, {"forwarder", sock, nil}}
	if os.Geteuid() == 0 {
		// As host user 65534 (setpriv before bwrap); its socket in a
		// directory it can search, and the forwarder (this test binary,
		// in go's 0700 directory) linked where it can run it.
		udir, err := os.MkdirTemp("", "airlock-bench-user-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(udir)
		if err := os.Chmod(udir, 0o711); err != nil {
			b.Fatal(err)
		}
		usock := filepath.Join(udir, "p.sock")
		uln, err := net.Listen("unix", usock)
		if err != nil {
			b.Fatal(err)
		}
		defer uln.Close()
		nobody := &User{UID: 65534, GID: 65534}
		cases = append(cases, struct {
			name   string
			egress string
			user   *User
		}{"user", "", nobody}, struct {
			name   string
			egress string
			user   *User
		}{"user-forwarder", usock, nobody})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				cmd, release, err := h.Command(Spec{Command: "true", Egress: c.egress, User: c.user, Memory: 256 << 20, Processes: 64, OpenFiles: 64, Name: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				cmd.Stderr = io.Discard
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
				release()
			}
		})
	}
}
