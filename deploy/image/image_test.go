package main

// The image's contents and configuration, read back from what build
// wrote; refusals of inputs the image cannot use; agreement with
// deploy/Dockerfile. The image run by a real runtime is in run_test.go.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-run/airlock/internal/testenv"
)

var (
	smallOnce sync.Once
	smallBin  string
	smallErr  error
)

// smallStatic is a tiny static Go program standing in for airlock where
// only the image's layout is under test.
func smallStatic(t *testing.T) string {
	t.Helper()
	smallOnce.Do(func() {
		dir, err := os.MkdirTemp("", "image-test-")
		if err != nil {
			smallErr = err
			return
		}
		src := filepath.Join(dir, "main.go")
		if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"hello\") }\n"), 0o600); err != nil {
			smallErr = err
			return
		}
		smallBin = filepath.Join(dir, "hello")
		cmd := exec.Command("go", "build", "-o", smallBin, src)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			smallErr = errors.New(string(out))
		}
	})
	if smallErr != nil {
		t.Fatalf("building the stand-in binary: %v", smallErr)
	}
	return smallBin
}

func testOptions(t *testing.T) options {
	return options{repo: testenv.RepoRoot(t), binary: smallStatic(t), version: "v9.9.9-test", caFile: defaultCA,
		created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), arch: "amd64"}
}

// files reads every layer of img: path -> header and content.
type file struct {
	h    *tar.Header
	data []byte
}

func files(t *testing.T, img v1.Image) []map[string]file {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]file
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]file{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if _, dup := m[h.Name]; dup {
				t.Errorf("layer has %s twice", h.Name)
			}
			m[h.Name] = file{h, b}
		}
		rc.Close()
		out = append(out, m)
	}
	return out
}

func TestImageContents(t *testing.T) {
	o := testOptions(t)
	img, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || c.WorkingDir != "/var/lib/airlock" || strings.Join(c.Entrypoint, " ") != "/usr/local/bin/airlock" || strings.Join(c.Cmd, " ") != "help" {
		t.Errorf("config: user %q, workdir %q, entrypoint %q, cmd %q", c.User, c.WorkingDir, c.Entrypoint, c.Cmd)
	}
	for _, p := range []string{"7400/tcp", "7401/tcp", "7402/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, c.ExposedPorts)
		}
	}
	if !contains(c.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
		t.Errorf("env %q: no SSL_CERT_FILE", c.Env)
	}
	if c.Labels["org.opencontainers.image.version"] != "v9.9.9-test" || c.Labels["org.opencontainers.image.created"] != "2026-01-02T03:04:05Z" {
		t.Errorf("labels %v", c.Labels)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Time.Equal(o.created) {
		t.Errorf("config file: os %q arch %q created %v", cf.OS, cf.Architecture, cf.Created)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Annotations["org.opencontainers.image.title"] != "airlock" {
		t.Errorf("manifest: media type %q, annotations %v", m.MediaType, m.Annotations)
	}

	ls := files(t, img)
	if len(ls) != 2 {
		t.Fatalf("%d layers, want 2 (base, airlock)", len(ls))
	}
	base, app := ls[0], ls[1]
	if !strings.Contains(string(base["etc/passwd"].data), "nonroot:x:65532:65532:") || !strings.Contains(string(base["etc/group"].data), "nonroot:x:65532:") {
		t.Errorf("passwd/group have no nonroot 65532:\n%s%s", base["etc/passwd"].data, base["etc/group"].data)
	}
	host, _ := os.ReadFile(defaultCA)
	if !bytes.Equal(base["etc/ssl/certs/ca-certificates.crt"].data, host) {
		t.Error("the CA bundle is not the host's")
	}
	if d := base["var/lib/airlock/"].h; d == nil || d.Uid != 65532 || d.Gid != 65532 || d.Mode != 0o700 {
		t.Errorf("data dir: %+v", d)
	}
	if d := base["tmp/"].h; d == nil || d.Mode != 0o1777 {
		t.Errorf("/tmp: %+v", d)
	}
	want, _ := os.ReadFile(o.binary)
	if b := app["usr/local/bin/airlock"]; b.h == nil || !bytes.Equal(b.data, want) || b.h.Mode != 0o755 || b.h.Uid != 0 {
		t.Errorf("binary entry: %+v", b.h)
	}
	mods, _ := filepath.Glob(filepath.Join(o.repo, "wasm", "*.wasm"))
	for _, mod := range mods {
		if _, ok := app["etc/airlock/wasm/"+filepath.Base(mod)]; !ok {
			t.Errorf("module %s missing", filepath.Base(mod))
		}
	}
	if _, ok := app["etc/airlock/manifests/examples/native.yaml"]; !ok {
		t.Error("native.yaml missing")
	}
	for _, l := range ls {
		for n, f := range l {
			if f.h.Mode&0o6000 != 0 {
				t.Errorf("%s is setuid/setgid", n)
			}
			if !f.h.ModTime.Equal(o.created) {
				t.Errorf("%s: time %v, want the fixed %v", n, f.h.ModTime, o.created)
			}
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// The same inputs make the same digest; a different time or binary does not.
func TestImageReproducible(t *testing.T) {
	o := testOptions(t)
	digest := func(o options) v1.Hash {
		img, err := build(o)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := digest(o), digest(o)
	if a != b {
		t.Fatalf("two builds of the same inputs: %s and %s", a, b)
	}
	o2 := o
	o2.created = o.created.Add(time.Second)
	if digest(o2) == a {
		t.Error("a different -created gave the same digest")
	}
	// One byte of the binary changed: another image.
	bin, _ := os.ReadFile(o.binary)
	bin = append(bin, 0)
	o3 := o
	o3.binary = filepath.Join(t.TempDir(), "hello")
	if err := os.WriteFile(o3.binary, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if digest(o3) == a {
		t.Error("a changed binary gave the same digest")
	}
}

// Inputs the image cannot use are refused, naming the file and the fix.
func TestImageRefuses(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated")
	b, _ := os.ReadFile(smallStatic(t))
	if err := os.WriteFile(truncated, b[:200], 0o755); err != nil {
		t.Fatal(err)
	}
	noPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(noPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dynamic, err := exec.LookPath("sh") // Debian's dash: dynamically linked
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		change func(*options)
		want   string
		static bool // the error is errNotStatic
	}{
		{"dynamic binary", func(o *options) { o.binary = dynamic }, "dynamically linked", true},
		{"script", func(o *options) { o.binary = text }, "CGO_ENABLED=0", true},
		{"truncated ELF", func(o *options) { o.binary = truncated }, "-binary", true},
		{"missing binary", func(o *options) { o.binary = filepath.Join(dir, "nope") }, "nope", true},
		{"CA bundle without PEM", func(o *options) { o.caFile = noPEM }, "no PEM certificate", false},
		{"missing CA bundle", func(o *options) { o.caFile = filepath.Join(dir, "none.crt") }, "ca-certificates", false},
		{"not the repository", func(o *options) { o.repo = dir }, "-repo", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions(t)
			c.change(&o)
			_, err := build(o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one that says %q", err, c.want)
			}
			if errors.Is(err, errNotStatic) != c.static {
				t.Errorf("errors.Is(err, errNotStatic) = %v", !c.static)
			}
		})
	}
}

// The command writes both formats, and they read back as the same image.
func TestImageWritesArchiveAndLayout(t *testing.T) {
	dir := t.TempDir()
	archive, oci := filepath.Join(dir, "airlock.tar"), filepath.Join(dir, "oci")
	var out, errb bytes.Buffer
	if code := run([]string{"-repo", testenv.RepoRoot(t), "-binary", smallStatic(t), "-docker-archive", archive, "-oci-layout", oci, "-tag", "localhost/airlock:t1"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	fromTar, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(oci)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "t1" {
		t.Fatalf("layout index: %+v", im.Manifests)
	}
	fromLayout, err := p.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	// The archive keeps the config and layers; its manifest is rebuilt
	// from them, so compare what a runtime runs.
	c1, _ := fromTar.ConfigName()
	c2, _ := fromLayout.ConfigName()
	if c1 != c2 {
		t.Errorf("archive config %s, layout config %s", c1, c2)
	}
	d, _ := fromLayout.Digest()
	if !strings.Contains(out.String(), d.String()) {
		t.Errorf("output %q does not name the digest %s", out.String(), d)
	}

	for _, args := range [][]string{
		{},                                 // nothing to write
		{"-docker-archive", archive, "-x"}, // unknown flag
		{"-docker-archive", archive, "-created", "yesterday"},
		{"-docker-archive", archive, "-tag", "UPPER CASE:!"},
	} {
		errb.Reset()
		if code := run(append([]string{"-binary", smallStatic(t), "-repo", testenv.RepoRoot(t)}, args...), io.Discard, &errb); code == 0 {
			t.Errorf("%q: exit 0", args)
		} else if errb.Len() == 0 {
			t.Errorf("%q: no message", args)
		}
	}
}

// deploy/Dockerfile builds the same image: the same user, working
// directory, ports, entrypoint and paths.
func TestDockerfileAgrees(t *testing.T) {
	f, err := os.Open(filepath.Join(testenv.RepoRoot(t), "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string][]string{}
	sc := bufio.NewScanner(f)
	final := false
	for sc.Scan() {
		ln := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(ln, "FROM ") {
			final = !strings.Contains(ln, " AS ")
			continue
		}
		if !final || ln == "" || strings.HasPrefix(ln, "#") {
			continue
		}
		word, rest, _ := strings.Cut(ln, " ")
		got[word] = append(got[word], rest)
	}
	c := imageConfig(options{})
	want := map[string][]string{
		"USER":       {c.User},
		"WORKDIR":    {c.WorkingDir},
		"EXPOSE":     {"7400 7401 7402"},
		"ENTRYPOINT": {`["` + c.Entrypoint[0] + `"]`},
		"CMD":        {`["` + c.Cmd[0] + `"]`},
	}
	for k, v := range want {
		if strings.Join(got[k], "|") != strings.Join(v, "|") {
			t.Errorf("Dockerfile %s %q, the built image has %q", k, got[k], v)
		}
	}
	copies := strings.Join(got["COPY"], "\n")
	for _, p := range []string{"/" + binaryPath, "/etc/airlock", "--chown=65532:65532 /out/" + dataDir + " /" + dataDir} {
		if !strings.Contains(copies, p) {
			t.Errorf("Dockerfile COPY lines do not put %s where the built image has it:\n%s", p, copies)
		}
	}
}
