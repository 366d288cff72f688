package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// requireSandbox probes the host's sandbox, skipping t (failing it under
// CI=true) when there is none.
func requireSandbox(t testing.TB, hide ...string) *Sandbox {
	t.Helper()
	sb := ProbeSandbox(hide)
	if err := sb.Err(); err != nil {
		testenv.Skipf(t, "%v", err)
	}
	return sb
}

// attackLayout is a host as an attacker finds it: airlock's data
// directory with a key and the hostile server's root inside it, airlock's
// configuration, and another upstream's files.
type attackLayout struct {
	base, data, key, root, config, other, secret string
}

func newAttackLayout(t *testing.T) attackLayout {
	// Outside /tmp where the host has a /var/tmp: the sandbox's /tmp is
	// its own, so paths under the host's /tmp would be private anyway.
	base := t.TempDir()
	if fi, err := os.Stat("/var/tmp"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/var/tmp", "airlock-sandbox-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		base = d
	}
	l := attackLayout{
		base:   base,
		data:   filepath.Join(base, "data"),
		config: filepath.Join(base, "config"),
		other:  filepath.Join(base, "other"),
	}
	l.key = filepath.Join(l.data, "signing.key")
	l.root = filepath.Join(l.data, "sandbox")
	l.secret = filepath.Join(l.other, "secret.txt")
	for _, d := range []string{l.root, l.config, l.other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, body := range map[string]string{l.key: "PRIVATE KEY", filepath.Join(l.config, "airlock.yaml"): "slack: {bot_token: xoxb-secret}", l.secret: "other upstream's data"} {
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func hostileServer(t testing.TB, l attackLayout, sb *manifests.Sandbox) manifests.Server {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return manifests.Server{
		Name:      "hostile",
		Stdio:     &manifests.StdioServer{Command: exe, Env: map[string]string{envHostile: "1"}, Dir: l.config},
		PathRoots: []string{l.root},
		Sandbox:   sb,
	}
}

func attackCall(t *testing.T, p *Pool, in attackIn) string {
	t.Helper()
	args, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := p.CallTool(ctx, "hostile", "attack", args)
	if err != nil {
		t.Fatalf("attack %s %s: %v", in.Kind, in.Target, err)
	}
	return resultText(res)
}

// TestSandboxAttacks is issue 32 §2: a hostile upstream tries to reach
// what a sandboxed server must not; each attempt fails, the controls
// (its own root, its /tmp, small forks and allocations) succeed, and
// airlock and another upstream keep serving.
func TestSandboxAttacks(t *testing.T) {
	l := newAttackLayout(t)
	sb := requireSandbox(t, l.data, l.config)
	t.Setenv("AIRLOCK_TEST_SECRET", "s3cret-in-airlock-env")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()

	f := stdioFiles{pid: filepath.Join(l.other, "pid"), counter: filepath.Join(l.other, "counter"), slow: filepath.Join(l.other, "slow")}
	other := stdioServer(t, "other", f, nil)
	other.PathRoots = []string{l.other}
	opts := testOptions()
	opts.Sandbox = sb
	memory := manifests.ByteSize(256 << 20)
	if raceDetector {
		memory = 256 << 30 // the race runtime's shadow memory counts (race_test.go)
	}
	p := startPool(t, []manifests.Server{
		hostileServer(t, l, &manifests.Sandbox{Memory: memory, Processes: 64, OpenFiles: 256}),
		other,
	}, opts)
	waitState(t, p, "hostile", StateConnected)
	waitState(t, p, "other", StateConnected)

	failed := func(got string) bool { return strings.HasPrefix(got, "failed: ") }
	ok := func(got string) bool { return strings.HasPrefix(got, "ok: ") }
	for _, c := range []struct {
		name string
		in   attackIn
		want func(string) bool
	}{
		{"read airlock's signing key", attackIn{Kind: "read", Target: l.key}, failed},
		{"read airlock's configuration", attackIn{Kind: "read", Target: filepath.Join(l.config, "airlock.yaml")}, failed},
		{"read /etc/shadow", attackIn{Kind: "read", Target: "/etc/shadow"}, failed},
		{"read another upstream's files", attackIn{Kind: "read", Target: l.secret}, failed},
		{"read airlock's environment through /proc", attackIn{Kind: "read", Target: "/proc/" + strconv.Itoa(os.Getpid()) + "/environ"}, failed},
		{"list airlock's data directory", attackIn{Kind: "list", Target: l.data}, func(s string) bool { return s == "ok: sandbox" }},
		{"write outside its roots", attackIn{Kind: "write", Target: filepath.Join(l.base, "escape.txt")}, failed},
		{"write into airlock's data directory", attackIn{Kind: "write", Target: filepath.Join(l.data, "planted.key")}, failed},
		{"write into the system", attackIn{Kind: "write", Target: "/usr/pwned"}, failed},
		{"write its own root (control)", attackIn{Kind: "write", Target: filepath.Join(l.root, "ok.txt")}, ok},
		{"write its private /tmp (control)", attackIn{Kind: "write", Target: "/tmp/ok.txt"}, ok},
		{"connect to a listener on the host's loopback", attackIn{Kind: "connect", Target: ln.Addr().String()}, failed},
		{"connect to an internet address", attackIn{Kind: "connect", Target: "1.1.1.1:443"}, failed},
		{"resolve a host name", attackIn{Kind: "resolve", Target: "example.com"}, failed},
		{"environment holds only what the manifest passes", attackIn{Kind: "env"}, func(s string) bool {
			// network: none: no proxy either.
			return ok(s) && !strings.Contains(s, "s3cret") && strings.Contains(s, envHostile+"=1") && !strings.Contains(strings.ToUpper(s), "PROXY")
		}},
		{"fork bomb", attackIn{Kind: "forkbomb", N: 5000}, func(s string) bool {
			m := regexp.MustCompile(`^failed: started (\d+) processes, then: `).FindStringSubmatch(s)
			n := 0
			if m != nil {
				n, _ = strconv.Atoi(m[1])
			}
			return m != nil && n < 64
		}},
		{"start a few processes (control)", attackIn{Kind: "forkbomb", N: 5}, func(s string) bool { return s == "ok: started all 5 processes" }},
		{"exhaust memory", attackIn{Kind: "eat", N: 2048}, func(s string) bool {
			m := regexp.MustCompile(`^failed: .*: allocated (\d+) MiB$`).FindStringSubmatch(s)
			n := 0
			if m != nil {
				n, _ = strconv.Atoi(m[1])
			}
			return m != nil && n <= 256
		}},
		{"allocate a little (control)", attackIn{Kind: "eat", N: 32}, func(s string) bool { return s == "ok: allocated all 32 MiB" }},
	} {
		if raceDetector && c.in.Kind == "eat" {
			continue // no memory bound under the race detector; the plain run checks it
		}
		got := attackCall(t, p, c.in)
		if !c.want(got) {
			t.Errorf("%s: the server reports %q", c.name, got)
		} else {
			t.Logf("%s: %s", c.name, firstLine(got))
		}
	}

	if n := accepted.Load(); n != 0 {
		t.Errorf("the host's listener accepted %d connections from the sandbox", n)
	}
	for _, f := range []string{filepath.Join(l.base, "escape.txt"), filepath.Join(l.data, "planted.key"), "/usr/pwned"} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists on the host after the attacks (stat: %v)", f, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(l.root, "ok.txt")); err != nil || string(b) != "pwned" {
		t.Errorf("the write into its root did not reach the host: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(l.key); string(b) != "PRIVATE KEY" {
		t.Errorf("airlock's key changed: %q", b)
	}
	// Both keep serving.
	checkCalls(t, p, "other")
	if got := attackCall(t, p, attackIn{Kind: "read", Target: filepath.Join(l.root, "ok.txt")}); !ok(got) {
		t.Errorf("the hostile server no longer serves: %q", got)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// TestSandboxOff: "sandbox: off" runs the same server unconfined, and the
// same attack then succeeds, so TestSandboxAttacks would notice a sandbox
// that did nothing.
func TestSandboxOff(t *testing.T) {
	l := newAttackLayout(t)
	sb := requireSandbox(t, l.data, l.config)
	opts := testOptions()
	opts.Sandbox = sb
	p := startPool(t, []manifests.Server{hostileServer(t, l, &manifests.Sandbox{Off: true})}, opts)
	waitState(t, p, "hostile", StateConnected)
	if got := attackCall(t, p, attackIn{Kind: "read", Target: l.key}); !strings.HasPrefix(got, "ok: read 11 bytes") {
		t.Errorf("unsandboxed, reading the key gave %q", got)
	}
}

// TestSandboxUnavailable: on a host without the sandbox a server whose
// manifest is silent runs unconfined (with a warning), and one whose
// manifest demands the sandbox does not start, saying why.
func TestSandboxUnavailable(t *testing.T) {
	l := newAttackLayout(t)
	opts := testOptions()
	opts.Sandbox = NoSandbox("the stdio sandbox is not available on this host: bwrap is not installed")
	demanded := hostileServer(t, l, &manifests.Sandbox{Required: true})
	demanded.Name = "demanded"
	p := startPool(t, []manifests.Server{hostileServer(t, l, nil), demanded}, opts)
	waitState(t, p, "hostile", StateConnected)
	st := waitState(t, p, "demanded", StateUnavailable)
	if !strings.Contains(st.Reason, "the manifest requires a sandbox") || !strings.Contains(st.Reason, "bwrap is not installed") {
		t.Errorf("reason = %q", st.Reason)
	}
}

// TestSandboxMasksAirlockDirs: a manifest that lets the server read a
// directory holding airlock's data and configuration (read_paths: the
// parent of both) still does not show them: they are covered, and the
// server's root inside the data directory is bound again on top.
func TestSandboxMasksAirlockDirs(t *testing.T) {
	l := newAttackLayout(t)
	sb := requireSandbox(t, l.data, l.config)
	opts := testOptions()
	opts.Sandbox = sb
	p := startPool(t, []manifests.Server{hostileServer(t, l, &manifests.Sandbox{ReadPaths: []string{l.base}})}, opts)
	waitState(t, p, "hostile", StateConnected)
	for _, c := range []struct {
		in   attackIn
		want string // prefix
	}{
		{attackIn{Kind: "read", Target: l.secret}, "ok: read 21 bytes"}, // declared readable
		{attackIn{Kind: "read", Target: l.key}, "failed: "},
		{attackIn{Kind: "read", Target: filepath.Join(l.config, "airlock.yaml")}, "failed: "},
		{attackIn{Kind: "list", Target: l.data}, "ok: sandbox"},
		{attackIn{Kind: "write", Target: l.secret}, "failed: "}, // read-only
		{attackIn{Kind: "write", Target: filepath.Join(l.data, "planted")}, "failed: "},
		{attackIn{Kind: "write", Target: filepath.Join(l.root, "ok.txt")}, "ok: "},
	} {
		if got := attackCall(t, p, c.in); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s %s: got %q, want %s…", c.in.Kind, c.in.Target, got, c.want)
		}
	}
	if b, _ := os.ReadFile(l.secret); string(b) != "other upstream's data" {
		t.Errorf("the read-only file changed: %q", b)
	}
}
