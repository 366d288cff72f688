package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/loadgen"
)

// TestBenchCLI runs the airlock binary's `bench` for a few seconds with 4
// sessions against a running `airlock dev` whose upstream is testupstream
// over HTTP, and against that upstream directly, and checks that its JSON
// report parses and its counts add up: calls were made on both sides, every
// one answered without error (with idempotency keys through airlock), and
// the text report shows the same tables.
func TestBenchCLI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	dir := t.TempDir()
	up := startHTTPUpstream(t, filepath.Join(dir, "effects.log"))
	writeFile(t, filepath.Join(dir, "counter.yaml"), `server:
  name: counter
  http: {url: "`+up+`"}
tools:
  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
`)
	writeFile(t, filepath.Join(dir, "airlock.yaml"), "manifests: [counter.yaml]\n"+identityYAML)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	base := "http://" + listen
	dev := startDev(t, bin, "--config", filepath.Join(dir, "airlock.yaml"), "--data-dir", filepath.Join(dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(freePort(t)), "--no-ui", "--log-format", "json")
	dev.waitHealthy(t, base)
	waitTools(t, connectURL(t, base+"/mcp", nil), "counter__echo")

	bench := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"bench", "--url", base + "/mcp", "--tool", "counter__echo",
			"--args", `{"text":"bench"}`, "--direct", up}, args...)...)
		cmd.Env = append(os.Environ(), "AIRLOCK_API_KEY="+testKey)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}

	stdout, stderr, err := bench("--sessions", "4", "--duration", "2s", "--rounds", "2", "--idempotency-keys", "--json")
	if err != nil {
		t.Fatalf("airlock bench: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	var rep struct {
		Sessions        int             `json:"sessions"`
		IdempotencyKeys bool            `json:"idempotency_keys"`
		Airlock         *loadgen.Result `json:"airlock"`
		Direct          *loadgen.Result `json:"direct"`
		Ratio           *loadgen.Ratio  `json:"ratio"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("the --json report does not parse: %v\n%s", err, stdout)
	}
	if rep.Airlock == nil || rep.Direct == nil || rep.Ratio == nil || rep.Sessions != 4 || !rep.IdempotencyKeys {
		t.Fatalf("report incomplete:\n%s", stdout)
	}
	for _, r := range []*loadgen.Result{rep.Airlock, rep.Direct} {
		if r.Calls == 0 || r.OK != r.Calls || r.Calls != r.OK+r.ToolErrors+r.TransportErrors || r.Errs() != 0 ||
			r.Sessions != 4 || r.SessionsLost != 0 || r.Seconds < 2 || r.CallsPerSecond <= 0 {
			t.Errorf("%s: counts do not add up, or errors:\n%s", r.Target, stdout)
		}
		if l := r.Latency; !(0 < l.P50 && l.P50 <= l.P95 && l.P95 <= l.P99 && l.P99 <= l.Max) {
			t.Errorf("%s: latencies out of order: %+v", r.Target, l)
		}
	}
	t.Logf("4 sessions, 2s each: direct %d calls (%.0f/s, p50 %s), airlock %d calls (%.0f/s, p50 %s)",
		rep.Direct.Calls, rep.Direct.CallsPerSecond, rep.Direct.Latency.P50, rep.Airlock.Calls, rep.Airlock.CallsPerSecond, rep.Airlock.Latency.P50)

	// --floor: the bare Temporal floor (bench's own embedded server) in the
	// same rounds, and airlock's share over it.
	stdout, stderr, err = bench("--sessions", "2", "--calls", "30", "--rounds", "3", "--floor", "--json")
	if err != nil {
		t.Fatalf("airlock bench --floor: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	var frep struct {
		Rounds  int             `json:"rounds"`
		Airlock *loadgen.Result `json:"airlock"`
		Direct  *loadgen.Result `json:"direct"`
		Floor   *loadgen.Result `json:"floor"`
		Share   *loadgen.Share  `json:"share"`
	}
	if err := json.Unmarshal([]byte(stdout), &frep); err != nil {
		t.Fatalf("the --floor --json report does not parse: %v\n%s", err, stdout)
	}
	if frep.Floor == nil || frep.Share == nil || frep.Airlock == nil || frep.Direct == nil || frep.Rounds != 3 {
		t.Fatalf("--floor report incomplete:\n%s", stdout)
	}
	for _, r := range []*loadgen.Result{frep.Airlock, frep.Direct, frep.Floor} {
		if r.Calls != 30 || r.OK != 30 || r.Errs() != 0 || r.Sessions != 2 || r.CallsPerSecond <= 0 {
			t.Errorf("%s with --floor: %d calls, %d ok, %d errors, %.1f/s:\n%s", r.Target, r.Calls, r.OK, r.Errs(), r.CallsPerSecond, stdout)
		}
		if l := r.Latency; !(0 < l.P50 && l.P50 <= l.P95 && l.P95 <= l.P99 && l.P99 <= l.Max) {
			t.Errorf("%s: latencies out of order: %+v", r.Target, l)
		}
	}
	sh := frep.Share
	// The JSON is to the microsecond: a difference of rounded figures may
	// be 1 µs off the rounded difference.
	near := func(a, b time.Duration) bool { return a-b <= 2*time.Microsecond && b-a <= 2*time.Microsecond }
	if want := frep.Airlock.Latency.P50 - frep.Floor.Latency.P50; !near(sh.OverFloor.P50, want) {
		t.Errorf("share over the floor at p50 %s, want airlock's p50 less the floor's, %s", sh.OverFloor.P50, want)
	}
	if sh.OwnP50 == nil || !near(*sh.OwnP50, sh.OverFloor.P50-frep.Direct.Latency.P50) {
		t.Errorf("own share at p50 %v, want the share less direct's p50", sh.OwnP50)
	}
	if sh.OfFloor <= 0 {
		t.Errorf("airlock's calls per second of the floor's: %v", sh.OfFloor)
	}
	if !strings.Contains(stderr, "starting the floor's embedded Temporal") {
		t.Errorf("stderr does not say the floor starts:\n%s", stderr)
	}
	t.Logf("2 sessions, 30 calls each: floor p50 %s (%.0f/s), airlock p50 %s (%.0f/s): airlock's share %s over the floor, %.2f of its calls/s",
		frep.Floor.Latency.P50, frep.Floor.CallsPerSecond, frep.Airlock.Latency.P50, frep.Airlock.CallsPerSecond, sh.OverFloor.P50, sh.OfFloor)
	stdout, stderr, err = bench("--sessions", "1", "--calls", "5", "--floor")
	if err != nil {
		t.Fatalf("airlock bench --floor (text): %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"floor", "airlock over floor", "airlock's own share", "without the upstream's own", "of the floor's calls per second"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("%q missing from the --floor text report:\n%s", want, stdout)
		}
	}

	stdout, stderr, err = bench("--sessions", "4", "--calls", "8")
	if err != nil {
		t.Fatalf("airlock bench (text): %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"direct", "airlock", "calls/s", "ratio", "p99"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("%q missing from the text report:\n%s", want, stdout)
		}
	}
}
