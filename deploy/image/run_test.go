package main

// The image built here, run by a real container runtime: podman from
// Debian's packages with runc (.ci/run installs both). These VMs lack
// CAP_SYS_RESOURCE, so podman's default rlimits (nofile 1048576, nproc
// above the host's) make the runtime's setrlimit fail with "operation not
// permitted" (crun and runc alike); a containers.conf of the test's own
// sets default_ulimits within the host's limits, and everything else is
// podman's defaults.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/testenv"
)

// podman is the runtime the tests drive, with the test's containers.conf.
type podman struct {
	bin string
	env []string
}

var (
	podmanOnce sync.Once
	podmanRT   *podman
	podmanErr  string
)

// containersConf keeps podman's defaults except the rlimits: within the
// host's hard limits, which an unprivileged-for-rlimits root cannot raise.
func containersConf(nofile uint64) string {
	return fmt.Sprintf(`[containers]
default_ulimits = ["nofile=%d:%d", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
`, nofile, nofile)
}

func requirePodman(t *testing.T) *podman {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the container runtime tests build airlock and run containers")
	}
	podmanOnce.Do(func() {
		bin, err := exec.LookPath("podman")
		if err != nil {
			podmanErr = "podman is not on PATH: apt-get install -y podman runc (.ci/run does)"
			return
		}
		if _, err := exec.LookPath("runc"); err != nil {
			podmanErr = "runc is not on PATH: apt-get install -y runc (.ci/run does); crun refuses to start containers on these machines"
			return
		}
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			podmanErr = err.Error()
			return
		}
		nofile := min(lim.Max, 65536)
		dir, err := os.MkdirTemp("", "airlock-podman-")
		if err != nil {
			podmanErr = err.Error()
			return
		}
		conf := filepath.Join(dir, "containers.conf")
		if err := os.WriteFile(conf, []byte(containersConf(nofile)), 0o644); err != nil {
			podmanErr = err.Error()
			return
		}
		podmanRT = &podman{bin: bin, env: append(os.Environ(), "CONTAINERS_CONF="+conf)}
	})
	if podmanRT == nil {
		testenv.Skip(t, podmanErr)
	}
	return podmanRT
}

// run runs podman with args and returns its stdout.
func (p *podman) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, p.bin, args...)
	cmd.Env = p.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func (p *podman) must(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := p.run(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	imageOnce sync.Once
	imageRef  string
	imageErr  error
	imageSize int64 // the docker archive's bytes
	// imageUnpacked is the image's size in podman's store.
	imageUnpacked int64
)

// loadedImage builds airlock statically, builds the image from it and
// loads it into podman, once per test binary (TestMain removes it).
func loadedImage(t *testing.T, p *podman) string {
	t.Helper()
	imageOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-image-")
		if err != nil {
			imageErr = err
			return
		}
		defer os.RemoveAll(dir)
		o := options{repo: testenv.RepoRoot(t), binary: filepath.Join(dir, "airlock"), version: "v0.0.0-imagetest", caFile: defaultCA, created: time.Unix(0, 0).UTC(), arch: "amd64"}
		start := time.Now()
		if imageErr = buildBinary(o.repo, o.binary, o.version, o.arch); imageErr != nil {
			return
		}
		t.Logf("static airlock built in %s", time.Since(start).Round(time.Millisecond))
		img, err := build(o)
		if err != nil {
			imageErr = err
			return
		}
		ref := fmt.Sprintf("localhost/airlock-imagetest:%d", os.Getpid())
		archive := filepath.Join(dir, "airlock.tar")
		if imageErr = writeArchive(img, ref, archive); imageErr != nil {
			return
		}
		if st, err := os.Stat(archive); err == nil {
			imageSize = st.Size()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, imageErr = p.run(ctx, "load", "-q", "-i", archive); imageErr != nil {
			return
		}
		imageRef = ref
		if sz, err := p.run(ctx, "image", "inspect", "-f", "{{.Size}}", ref); err == nil {
			if n, err := strconv.ParseInt(sz, 10, 64); err == nil {
				imageUnpacked = n
			}
		}
	})
	if imageErr != nil {
		t.Fatalf("the image: %v", imageErr)
	}
	return imageRef
}

func TestMain(m *testing.M) {
	code := m.Run()
	if imageRef != "" && podmanRT != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, _ = podmanRT.run(ctx, "rmi", "-f", imageRef)
		cancel()
	}
	os.Exit(code)
}

const testKey = "image-test-key"

// devConfig is an airlock.yaml for `airlock dev` in the image: the
// image's native tools, one principal allowed everything.
func devConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(cfg, []byte(`manifests: [manifests/examples/native.yaml]
principals:
  - {name: alice, roles: [all], api_key_sha256: [`+identity.HashKey(testKey)+`]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// container is one started container.
type container struct {
	p    *podman
	name string
}

func (c *container) logs() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.p.bin, "logs", c.name)
	cmd.Env = c.p.env
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// startContainer runs the image detached with args (after the image) and
// removes it when the test ends, logging its output if the test failed.
func startContainer(t *testing.T, p *podman, runArgs []string, image string, args ...string) *container {
	t.Helper()
	c := &container{p: p, name: fmt.Sprintf("airlock-imagetest-%d-%d", os.Getpid(), time.Now().UnixNano())}
	all := append([]string{"run", "-d", "--name", c.name}, runArgs...)
	all = append(append(all, image), args...)
	p.must(t, all...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("container %s output:\n%s", c.name, c.logs())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = p.run(ctx, "rm", "-f", "-v", "-t", "0", c.name)
	})
	return c
}

// hostPID is the container's first process, as the host sees it.
func (c *container) hostPID(t *testing.T) int {
	t.Helper()
	pid, err := strconv.Atoi(c.p.must(t, "inspect", "-f", "{{.State.Pid}}", c.name))
	if err != nil || pid <= 0 {
		t.Fatalf("container %s: pid %v %v", c.name, pid, err)
	}
	return pid
}

// get fetches url on a fresh connection.
func get(url string) (int, string, error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), nil
}

type bearer string

func (k bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}

// TestImageRunsDev runs `airlock dev` from the image on a read-only root
// as the image's user, calls a tool over MCP, and stops it with SIGTERM.
func TestImageRunsDev(t *testing.T) {
	p := requirePodman(t)
	image := loadedImage(t, p)
	if imageSize > 0 {
		t.Logf("image: %s, docker archive %.1f MiB, %.1f MiB unpacked", image, float64(imageSize)/(1<<20), float64(imageUnpacked)/(1<<20))
	}
	port := testenv.FreePort(t)
	started := time.Now()
	c := startContainer(t, p, []string{
		"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"-p", fmt.Sprintf("127.0.0.1:%d:7400", port),
		"-v", devConfig(t) + ":/etc/airlock/airlock.yaml:ro",
		// An anonymous volume: podman copies the image's directory up,
		// owner 65532 and mode 0700 included (podman 4.3's --tmpfs takes
		// no uid=).
		"-v", "/var/lib/airlock",
	}, image, "dev", "--config", "/etc/airlock/airlock.yaml", "--data-dir", "/var/lib/airlock", "--listen", ":7400", "--no-ui")
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	var healthy time.Duration
	testenv.WaitFor(t, "/healthz and /readyz of the container", 120*time.Second, func() bool {
		if healthy == 0 {
			if code, _, _ := get(base + "/healthz"); code == 200 {
				healthy = time.Since(started)
			}
		}
		code, body, _ := get(base + "/readyz")
		return code == 200 && strings.HasPrefix(body, "ready")
	})
	t.Logf("start: podman run to /healthz 200 in %s, to /readyz ready in %s", healthy.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))

	// The process runs as the image's user on a read-only root: seen by
	// the host's /proc, not by asking the container.
	pid := c.hostPID(t)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range strings.Split(string(status), "\n") {
		if f := strings.Fields(ln); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") {
			for _, id := range f[1:] {
				if id != "65532" {
					t.Errorf("container process %s %v: want 65532 everywhere (not root)", f[0], f[1:])
					break
				}
			}
		}
		if f := strings.Fields(ln); len(f) == 2 && f[0] == "CapEff:" && f[1] != "0000000000000000" {
			t.Errorf("container process has capabilities %s", f[1])
		}
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	rootRO := false
	for _, ln := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(ln); len(f) > 5 && f[4] == "/" {
			rootRO = strings.HasPrefix(f[5], "ro")
		}
	}
	if !rootRO {
		t.Errorf("the container's root is not mounted read-only:\n%s", mounts)
	}

	// A real MCP session through the published port.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "image-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer(testKey)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	callStart := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "native__json_query", Arguments: map[string]any{"json": `{"a":{"b":[1,2,42]}}`, "path": "a.b[2]"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("json_query in the container: %s", text(res))
	}
	if got := structured(t, res)["result"]; got != float64(42) {
		t.Errorf("json_query result %v (%s), want 42", got, text(res))
	}
	t.Logf("first tool call (json_query, wasm compiled in the container) in %s", time.Since(callStart).Round(time.Millisecond))
	// The data dir is writable and the notes module keeps what it wrote.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "native__note_write", Arguments: map[string]any{"name": "from-image", "content": "written inside the container"}})
	if err != nil || res.IsError {
		t.Fatalf("note_write: %v %s", err, text(res))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "native__note_read", Arguments: map[string]any{"name": "from-image"}})
	if err != nil || res.IsError {
		t.Fatalf("note_read: %v %s", err, text(res))
	}
	if got := structured(t, res)["content"]; got != "written inside the container" {
		t.Errorf("note_read content %q", got)
	}
	_ = cs.Close()

	// SIGTERM drains: exit 0, in bounded time.
	stopStart := time.Now()
	p.must(t, "kill", "--signal", "TERM", c.name)
	wctx, wcancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer wcancel()
	code, err := p.run(wctx, "wait", c.name)
	if err != nil {
		t.Fatalf("the container did not exit within 45 s of SIGTERM: %v", err)
	}
	took := time.Since(stopStart)
	if code != "0" {
		t.Errorf("exit code after SIGTERM %s, want 0", code)
	}
	if took > 35*time.Second {
		t.Errorf("drain took %s, more than the 30 s drain timeout", took)
	}
	t.Logf("SIGTERM to exit %s in %s", code, took.Round(time.Millisecond))
	if logs := c.logs(); !strings.Contains(logs, "drain") && !strings.Contains(logs, "stopp") {
		t.Logf("output after SIGTERM (no drain message):\n%s", logs)
	}
}

func text(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return m
}
