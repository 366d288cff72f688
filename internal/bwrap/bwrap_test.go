package bwrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/testenv"
)

// testHost is a Host that is never probed: these tests read command lines.
var testHost = &Host{Bwrap: "/usr/bin/bwrap", Prlimit: "/usr/bin/prlimit", Shell: "/bin/sh"}

func spec(t *testing.T) (Spec, string) {
	dir := t.TempDir()
	for _, d := range []string{"data/root", "config", "pkg/node_modules/srv/dist", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "pkg/node_modules/srv/dist/index.js")
	if err := os.WriteFile(script, []byte("//"), 0o644); err != nil {
		t.Fatal(err)
	}
	return Spec{
		Command: "/usr/bin/env", Args: []string{script, "--flag", filepath.Join(dir, "other")},
		Env:      map[string]string{"TOKEN": "x"},
		Dir:      filepath.Join(dir, "config"),
		Writable: []string{filepath.Join(dir, "data/root")},
		Hide:     []string{filepath.Join(dir, "data"), filepath.Join(dir, "config")},
		Memory:   64 << 20, Processes: 16, OpenFiles: 64, Name: "t",
	}, dir
}

// mounts returns bwrap's mount operations as "op src dst" lines.
func mounts(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--ro-bind", "--bind":
			out = append(out, args[i]+" "+args[i+1]+" "+args[i+2])
			i += 2
		case "--tmpfs", "--remount-ro":
			out = append(out, args[i]+" "+args[i+1])
			i++
		case "--":
			return out
		}
	}
	return out
}

func TestCommandLine(t *testing.T) {
	s, dir := spec(t)
	cmd, release, err := testHost.Command(s)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	args := cmd.Args[1:]
	ms := mounts(args)
	want := []string{
		"--ro-bind " + dir + "/pkg/node_modules " + dir + "/pkg/node_modules", // the script's package
		"--ro-bind " + dir + "/other " + dir + "/other",                       // a directory argument
		"--bind " + dir + "/data/root " + dir + "/data/root",                  // the root
		"--remount-ro /",
	}
	for _, w := range want {
		if !slices.Contains(ms, w) {
			t.Errorf("mounts lack %q:\n%s", w, strings.Join(ms, "\n"))
		}
	}
	for _, m := range ms {
		if strings.Contains(m, "/config") || strings.HasSuffix(m, dir+"/data") || strings.Contains(m, "/etc/shadow") || strings.Contains(m, "/home") {
			t.Errorf("mount %q shows what must stay hidden", m)
		}
	}
	joined := strings.Join(args, " ")
	for _, w := range []string{"--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--cap-drop ALL", "--setenv TOKEN x", "--chdir /tmp",
		"--nofile=64", "--nproc=16", "--data=67108864"} {
		if !strings.Contains(joined, w) {
			t.Errorf("command line lacks %q: %s", w, joined)
		}
	}
	if strings.Contains(joined, "--share-net") {
		t.Error("network shared without network: host")
	}
	// Only the manifest's variables (and PATH, HOME, TMPDIR) reach it.
	var env []string
	for i, a := range args {
		if a == "--setenv" {
			env = append(env, args[i+1])
		}
	}
	if diff := strings.Join(env, ","); diff != "HOME,PATH,TMPDIR,TOKEN" {
		t.Errorf("environment = %s", diff)
	}
}

// TestHiddenInsideABind: a read path holding airlock's directories gets
// them covered, and the root inside the data directory bound again.
func TestHiddenInsideABind(t *testing.T) {
	s, dir := spec(t)
	s.ReadOnly = []string{dir}
	ms := mounts(testHost.args(s, "/tmp", testHost.binds(s)))
	idx := func(m string) int {
		i := slices.Index(ms, m)
		if i < 0 {
			t.Fatalf("mounts lack %q:\n%s", m, strings.Join(ms, "\n"))
		}
		return i
	}
	ro := idx("--ro-bind " + dir + " " + dir)
	mask := idx("--tmpfs " + dir + "/data")
	idx("--tmpfs " + dir + "/config")
	// The root is bound after the mask (the last bind of it wins).
	last := -1
	for i, m := range ms {
		if m == "--bind "+dir+"/data/root "+dir+"/data/root" {
			last = i
		}
	}
	if !(ro < mask && mask < last) {
		t.Errorf("order ro=%d mask=%d root=%d:\n%s", ro, mask, last, strings.Join(ms, "\n"))
	}
}

// TestNestedBindsMerge: a root inside a write path is not bound apart
// (a rename between them would be EXDEV).
func TestNestedBindsMerge(t *testing.T) {
	s, dir := spec(t)
	s.Writable = []string{filepath.Join(dir, "data/root"), filepath.Join(dir, "data")}
	s.Hide = nil
	ms := mounts(testHost.args(s, "/tmp", testHost.binds(s)))
	if slices.Contains(ms, "--bind "+dir+"/data/root "+dir+"/data/root") || !slices.Contains(ms, "--bind "+dir+"/data "+dir+"/data") {
		t.Errorf("mounts:\n%s", strings.Join(ms, "\n"))
	}
}

func TestCommandRefused(t *testing.T) {
	s, dir := spec(t)
	for _, c := range []struct {
		name string
		mod  func(*Spec)
		want string
	}{
		{"relative root", func(s *Spec) { s.Writable = []string{"data/root"} }, `sandbox path "data/root" is not absolute`},
		{"relative hide", func(s *Spec) { s.Hide = []string{".airlock"} }, `sandbox path ".airlock" is not absolute`},
		{"command in the configuration", func(s *Spec) {
			f := filepath.Join(dir, "config", "server.sh")
			_ = os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755)
			s.Command = f
		}, "is inside airlock's own directories"},
		{"command not found", func(s *Spec) { s.Command = "no-such-server-x"; s.Env["PATH"] = dir }, `stdio command "no-such-server-x" is not in PATH`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := s
			s.Env = map[string]string{}
			c.mod(&s)
			_, _, err := testHost.Command(s)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
}

// TestProbeWithoutBwrap: a host without bubblewrap is told how to get it.
func TestProbeWithoutBwrap(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Probe(context.Background())
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "apt-get install bubblewrap") || !strings.Contains(err.Error(), "sandbox: off") {
		t.Errorf("Probe without bwrap: %v", err)
	}
}

// TestProbe runs one sandbox on this host (under CI=true bubblewrap must
// work: .ci/run installs it).
func TestProbe(t *testing.T) {
	h, err := Probe(context.Background())
	if err != nil {
		testenv.Skipf(t, "%v", err)
	}
	if h.Probe <= 0 {
		t.Errorf("probe took %v", h.Probe)
	}
	t.Logf("a sandbox starts and exits in %v (cgroups: %v)", h.Probe, h.cgroup == cgroupV1)
}

// TestProjectScript: a script outside node_modules (the project's own
// server) brings the nearest node_modules and package.json above it.
func TestProjectScript(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"proj/node_modules/dep", "proj/src"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "proj/src/server.mjs")
	for _, f := range []string{script, filepath.Join(dir, "proj/package.json")} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := packagePaths(Spec{Command: "/usr/bin/env", Args: []string{script}})
	for _, w := range []string{script, filepath.Join(dir, "proj/node_modules"), filepath.Join(dir, "proj/package.json")} {
		if !slices.Contains(got, w) {
			t.Errorf("package paths %v lack %s", got, w)
		}
	}
	if slices.Contains(got, filepath.Join(dir, "proj")) || slices.Contains(got, filepath.Join(dir, "proj/src")) {
		t.Errorf("package paths %v show the project's directories", got)
	}
}
