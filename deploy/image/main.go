// Command image builds airlock's release container image without a Docker
// daemon and without pulling a base: the image is two layers made here from
// files, written as a docker-archive tarball (podman load, docker load)
// and/or an OCI image layout directory (podman pull oci:DIR, skopeo, crane).
//
//	go run ./deploy/image -docker-archive airlock.tar -oci-layout airlock-oci
//
// Layer 1, the base: /etc/passwd and /etc/group with root, nobody and the
// non-root user nonroot (65532:65532, as distroless has it), the host's CA
// bundle at /etc/ssl/certs/ca-certificates.crt, an empty /tmp (1777) and
// /var/lib/airlock owned by 65532. Layer 2, airlock: the static binary at
// /usr/local/bin/airlock and the native tools (/etc/airlock/manifests/
// examples/native.yaml, /etc/airlock/wasm/*.wasm). The same paths, user,
// entrypoint and ports as deploy/Dockerfile.
//
// The binary is built here (CGO_ENABLED=0, -trimpath) unless -binary names
// one; a binary that is not a static ELF executable is refused, since the
// image has no libc or dynamic loader. File times and the image's creation
// time are fixed (-created, default the Unix epoch), so the same inputs give
// the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// The image's fixed facts; deploy/Dockerfile says the same.
const (
	uid, gid    = 65532, 65532
	binaryPath  = "usr/local/bin/airlock"
	dataDir     = "var/lib/airlock"
	caPath      = "etc/ssl/certs/ca-certificates.crt"
	defaultCA   = "/etc/ssl/certs/ca-certificates.crt"
	defaultTag  = "localhost/airlock:dev"
	sourceLabel = "https://github.com/airlock-run/airlock"
)

// ports are the roles' listeners: gateway, approver, worker metrics.
var ports = []string{"7400/tcp", "7401/tcp", "7402/tcp"}

// options are what one build takes.
type options struct {
	repo     string // repository root (native.yaml, wasm/, ./cmd/airlock)
	binary   string // a built airlock; "" builds one
	version  string
	revision string
	caFile   string
	created  time.Time
	arch     string
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var archive, ociDir, tag, created string
	fs.StringVar(&o.repo, "repo", ".", "the airlock repository root")
	fs.StringVar(&o.binary, "binary", "", "a static airlock binary to put in the image (default: build ./cmd/airlock with CGO_ENABLED=0)")
	fs.StringVar(&o.version, "version", "dev", "the version: airlock version prints it (-X main.version) and the image's labels carry it")
	fs.StringVar(&o.revision, "revision", "", "the source revision for the org.opencontainers.image.revision label")
	fs.StringVar(&o.caFile, "ca-certificates", defaultCA, "the PEM CA bundle to install at /"+caPath)
	fs.StringVar(&created, "created", "1970-01-01T00:00:00Z", "the image's creation time and every file's time (RFC 3339), fixed so that builds are reproducible")
	fs.StringVar(&archive, "docker-archive", "", "write a docker-archive tarball here (podman load -i FILE)")
	fs.StringVar(&ociDir, "oci-layout", "", "write an OCI image layout directory here (podman pull oci:DIR:TAG)")
	fs.StringVar(&tag, "tag", defaultTag, "the image's name in the docker archive and the OCI layout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if archive == "" && ociDir == "" {
		fmt.Fprintln(stderr, "image: nothing to write: give -docker-archive FILE and/or -oci-layout DIR")
		return 2
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		fmt.Fprintf(stderr, "image: -created %q: %v (use RFC 3339, e.g. 2026-01-02T15:04:05Z)\n", created, err)
		return 2
	}
	o.created = t.UTC()
	o.arch = runtime.GOARCH
	img, err := build(o)
	if err == nil && archive != "" {
		err = writeArchive(img, tag, archive)
	}
	if err == nil && ociDir != "" {
		err = writeLayout(img, tag, ociDir)
	}
	if err != nil {
		fmt.Fprintf(stderr, "image: %v\n", err)
		return 1
	}
	d, _ := img.Digest()
	fmt.Fprintf(stdout, "%s %s\n", tag, d)
	return 0
}

// build makes the image.
func build(o options) (v1.Image, error) {
	bin := o.binary
	if bin == "" {
		dir, err := os.MkdirTemp("", "airlock-image-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "airlock")
		if err := buildBinary(o.repo, bin, o.version, o.arch); err != nil {
			return nil, err
		}
	}
	if err := checkStatic(bin); err != nil {
		return nil, err
	}
	base, err := baseLayer(o)
	if err != nil {
		return nil, err
	}
	app, err := appLayer(o, bin)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: o.created}, CreatedBy: "deploy/image: base (passwd, group, CA certificates, /tmp, " + "/" + dataDir + ")", Comment: "made from files, not pulled"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: v1.Time{Time: o.created}, CreatedBy: "deploy/image: airlock " + o.version + " and the native tools"}},
	)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = o.arch, "linux"
	cf.Created = v1.Time{Time: o.created}
	cf.Config = imageConfig(o)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels(o)).(v1.Image), nil
}

// imageConfig is what a runtime starts: deploy/Dockerfile's USER, WORKDIR,
// EXPOSE, ENTRYPOINT and CMD.
func imageConfig(o options) v1.Config {
	exposed := map[string]struct{}{}
	for _, p := range ports {
		exposed[p] = struct{}{}
	}
	return v1.Config{
		User:         fmt.Sprintf("%d:%d", uid, gid),
		WorkingDir:   "/" + dataDir,
		Entrypoint:   []string{"/" + binaryPath},
		Cmd:          []string{"help"},
		ExposedPorts: exposed,
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"SSL_CERT_FILE=/" + caPath,
			"HOME=/home/nonroot",
		},
		Labels:     labels(o),
		StopSignal: "SIGTERM",
	}
}

// labels are the OCI annotations, as labels of the config and annotations
// of the manifest.
func labels(o options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "airlock",
		"org.opencontainers.image.description": "A governed, durable runtime between AI agents and MCP tools (gateway, worker, approver and CLI in one static binary).",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.source":      sourceLabel,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
		"org.opencontainers.image.base.name":   "scratch",
	}
	if o.revision != "" {
		l["org.opencontainers.image.revision"] = o.revision
	}
	return l
}

// buildBinary builds ./cmd/airlock statically.
func buildBinary(repo, out, version, arch string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", out, "./cmd/airlock")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errb, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building ./cmd/airlock in %s (CGO_ENABLED=0): %v\n%s", repo, err, errb.String())
	}
	return nil
}

// errNotStatic is returned for a binary the image cannot run.
var errNotStatic = errors.New("not a static executable")

// checkStatic refuses what a scratch image cannot run: anything but an ELF
// executable for Linux with no program interpreter (dynamic loader).
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("-binary %s: %w: %v (build it with CGO_ENABLED=0 go build ./cmd/airlock)", path, errNotStatic, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("-binary %s: %w: ELF type %s", path, errNotStatic, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("-binary %s: %w: it is dynamically linked (needs a loader the image does not have): build it with CGO_ENABLED=0", path, errNotStatic)
		}
	}
	return nil
}

// entry is one file or directory of a layer.
type entry struct {
	path     string // without a leading slash
	mode     int64
	uid, gid int
	dir      bool
	data     []byte
}

func baseLayer(o options) (v1.Layer, error) {
	ca, err := os.ReadFile(o.caFile)
	if err != nil {
		return nil, fmt.Errorf("-ca-certificates: %v (install Debian's ca-certificates package, or name a PEM bundle)", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("-ca-certificates %s: no PEM certificate in it", o.caFile)
	}
	return layer(o.created, []entry{
		{path: "etc", mode: 0o755, dir: true},
		{path: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "etc/group", mode: 0o644, data: []byte(group)},
		{path: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{path: "etc/ssl", mode: 0o755, dir: true},
		{path: "etc/ssl/certs", mode: 0o755, dir: true},
		{path: caPath, mode: 0o644, data: ca},
		{path: "home", mode: 0o755, dir: true},
		{path: "home/nonroot", mode: 0o700, uid: uid, gid: gid, dir: true},
		{path: "tmp", mode: 0o1777, dir: true},
		{path: "var", mode: 0o755, dir: true},
		{path: "var/lib", mode: 0o755, dir: true},
		{path: dataDir, mode: 0o700, uid: uid, gid: gid, dir: true},
	})
}

// passwd and group: distroless's users, so a runtime's runAsUser 65532 and
// the Dockerfile's image agree.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
)

func appLayer(o options, bin string) (v1.Layer, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("-binary: %v", err)
	}
	native, err := os.ReadFile(filepath.Join(o.repo, "manifests", "examples", "native.yaml"))
	if err != nil {
		return nil, fmt.Errorf("-repo %s: %v (run from the repository root or give -repo)", o.repo, err)
	}
	mods, err := filepath.Glob(filepath.Join(o.repo, "wasm", "*.wasm"))
	if err != nil || len(mods) == 0 {
		return nil, fmt.Errorf("-repo %s: no wasm/*.wasm modules (the native tools): run from the repository root or give -repo", o.repo)
	}
	sort.Strings(mods)
	es := []entry{
		{path: "usr", mode: 0o755, dir: true},
		{path: "usr/local", mode: 0o755, dir: true},
		{path: "usr/local/bin", mode: 0o755, dir: true},
		{path: binaryPath, mode: 0o755, data: b},
		{path: "etc", mode: 0o755, dir: true},
		{path: "etc/airlock", mode: 0o755, dir: true},
		{path: "etc/airlock/manifests", mode: 0o755, dir: true},
		{path: "etc/airlock/manifests/examples", mode: 0o755, dir: true},
		{path: "etc/airlock/manifests/examples/native.yaml", mode: 0o644, data: native},
		{path: "etc/airlock/wasm", mode: 0o755, dir: true},
	}
	for _, m := range mods {
		d, err := os.ReadFile(m)
		if err != nil {
			return nil, err
		}
		es = append(es, entry{path: "etc/airlock/wasm/" + filepath.Base(m), mode: 0o644, data: d})
	}
	return layer(o.created, es)
}

// layer writes es as one gzip-compressed OCI layer, with fixed times and
// numeric owners only.
func layer(t time.Time, es []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.path, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: t, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, e.path+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if strings.HasPrefix(e.path, "/") || strings.Contains(e.path, "..") {
			return nil, fmt.Errorf("layer path %q: must be relative and not climb", e.path)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

func writeArchive(img v1.Image, tag, path string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %v", tag, err)
	}
	if err := tarball.WriteToFile(path, ref, img); err != nil {
		return fmt.Errorf("-docker-archive %s: %v", path, err)
	}
	return nil
}

func writeLayout(img v1.Image, tag, dir string) error {
	if _, err := name.NewTag(tag); err != nil {
		return fmt.Errorf("-tag %q: %v", tag, err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("-oci-layout %s: %v", dir, err)
	}
	// The short tag is what `podman pull oci:DIR:TAG` and skopeo look up.
	short := tag[strings.LastIndex(tag, ":")+1:]
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": short,
		"io.containerd.image.name":          tag,
	})); err != nil {
		return fmt.Errorf("-oci-layout %s: %v", dir, err)
	}
	return nil
}
