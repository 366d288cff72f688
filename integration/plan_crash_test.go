package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
)

// planCrashManifest serves testupstream as "counter". append is not
// idempotent and is undone by put "undo-<key>"; the undo of s1 is slow, so
// the process can be killed during the rollback. put honours idempotency
// keys (IDEMPOTENCY_KEYS), as an upstream must for airlock to re-run it.
const planCrashManifest = `server:
  name: counter
  stdio:
    command: %s
    env:
      SIDE_EFFECT_LOG: %s
      IDEMPOTENCY_KEYS: put
%stools:
  append:
    side_effects: [write]
    data_access_level: internal
    risk: medium
    idempotent: false
    timeout: 60s
    compensation:
      tool: put
      args:
        key: '"undo-" + args.key'
        sleep_ms: 'args.key == "s1" ? 8000 : 0'
  put:  {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, timeout: 60s}
  fail: {side_effects: [read], data_access_level: internal, risk: low, idempotent: true}
`

// planCrashPlan: s2 is slow, so the process can be killed during it; s4
// would fail and roll the plan back, but the crash decides first (see the
// test).
const planCrashPlan = `name: crash
steps:
  - id: s1
    tool: counter__append
    args: {key: s1}
  - id: s2
    tool: counter__append
    args: {key: s2, sleep_ms: 8000}
  - id: s3
    tool: counter__append
    args: {key: s3}
  - id: s4
    tool: counter__fail
    args: {text: boom}
`

// TestPlanSurvivesCrashes starts a plan with the real `airlock run
// --detach`, kills `airlock dev` with SIGKILL during a non-idempotent step
// and again during the rollback's compensation, restarting it each time on
// the same data dir, and checks what the upstream saw and how the plan
// ended.
//
// The step killed mid-flight (s2, append, not idempotent) cannot be
// re-run, so its outcome is unknown: the step fails, and by its default
// on_failure the plan rolls back at once (s3 and s4 never run). Because it
// may have taken effect, its compensation is on the stack all the same, so
// the rollback undoes s2, then s1. The process dies again during s1's
// compensation (put, idempotent): after the restart it is re-run under the
// same idempotency key, which the upstream recognizes, and the compensation
// of s2, finished before the crash, is not run again.
func TestPlanSurvivesCrashes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess crash test; skipped with -short")
	}
	testStart := time.Now()
	bin := buildBinary(t, "./cmd/airlock")
	upstreamBin := buildBinary(t, "./integration/testupstream")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	effects := newEffectsLog(t)
	cfg := filepath.Join(dir, "airlock.yaml")
	writeFile(t, filepath.Join(dir, "counter.yaml"), fmt.Sprintf(planCrashManifest, upstreamBin, effects, effectsSandbox(effects)))
	writeFile(t, cfg, "manifests: [counter.yaml]\n"+identityYAML)
	planFile := filepath.Join(dir, "plan.yaml")
	writeFile(t, planFile, planCrashPlan)

	// A bad plan is refused before anything starts: exit 2, naming the file,
	// line and field.
	badPlan := filepath.Join(dir, "bad.yaml")
	writeFile(t, badPlan, "name: bad\nsteps:\n  - id: s1\n    tool: counter__nosuch\n    args: {key: s1}\n")
	out, code := runAirlock(t, bin, "run", "--config", cfg, badPlan)
	if code != 2 || !strings.Contains(out, badPlan+":4") || !strings.Contains(out, "steps[0] (s1).tool") {
		t.Errorf("airlock run on a bad plan: exit %d, want 2 naming %s:4 and steps[0] (s1).tool:\n%s", code, badPlan, out)
	}

	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	temporalAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	_, tport, _ := strings.Cut(temporalAddr, ":")
	args := []string{"--config", cfg, "--data-dir", data,
		"--listen", listen, "--temporal-port", tport, "--log-format", "json"}
	base := "http://" + listen

	p := startDev(t, bin, args...)
	p.waitHealthy(t, base)

	const id = "plan-crash"
	if out, code := runAirlock(t, bin, "run", "--config", cfg, "--temporal-address", temporalAddr, "--detach", "--id", id, planFile); code != 0 {
		t.Fatalf("airlock run --detach: exit %d\n%s", code, out)
	}
	started := time.Now()

	// Crash 1: during step s2.
	waitFor(t, "step s2 to reach the upstream", 30*time.Second, func() bool {
		return sideEffects(t, effects, "append", "s2") == 1
	})
	crash1 := time.Now()
	p = restartDev(t, p, bin, base, args)
	t.Logf("crash 1 (step s2) at %s, healthy again after %s", crash1.Sub(started).Round(time.Millisecond), time.Since(crash1).Round(time.Millisecond))

	// Crash 2: during the compensation of s1, the rollback's second.
	waitFor(t, "the compensation of s1 to reach the upstream", 40*time.Second, func() bool {
		return sideEffects(t, effects, "put", "undo-s1") == 1
	})
	crash2 := time.Now()
	restartDev(t, p, bin, base, args)
	t.Logf("crash 2 (undo of s1) at %s, healthy again after %s", crash2.Sub(started).Round(time.Millisecond), time.Since(crash2).Round(time.Millisecond))

	c, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: quietSDKLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var res api.TaskResult
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, &res); err != nil {
		t.Fatalf("plan %s: %v", id, err)
	}
	t.Logf("plan ended %s, %s after it started", res.State, time.Since(started).Round(time.Millisecond))

	if res.State != api.StateRolledBack || len(res.Undone) != 0 {
		t.Errorf("plan ended %+v, want rolled_back with nothing left undone", res)
	}

	// Every step and every compensation ran on the upstream exactly once;
	// the steps after the unknown one never ran.
	for _, e := range []struct {
		tool, key string
		want      int
	}{
		{"append", "s1", 1}, {"append", "s2", 1}, {"append", "s3", 0},
		{"put", "undo-s2", 1}, {"put", "undo-s1", 1}, {"put", "undo-s3", 0},
	} {
		if got := sideEffects(t, effects, e.tool, e.key); got != e.want {
			t.Errorf("%s %s ran %d times on the upstream, want %d", e.tool, e.key, got, e.want)
		}
	}

	// The record: s2's outcome is unknown, its compensation and s1's ran
	// (newest first), each once; s1's needed a second attempt.
	out, code = runAirlock(t, bin, "tasks", "show", "--json", "--temporal-address", temporalAddr, id)
	if code != 0 {
		t.Fatalf("airlock tasks show --json: exit %d\n%s", code, out)
	}
	var st api.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("airlock tasks show --json: %v\n%s", err, out)
	}
	var steps []string
	for _, s := range st.Plan.Steps {
		steps = append(steps, s.ID+":"+s.State+":"+string(s.Outcome))
	}
	if want := []string{"s1:ok:ok", "s2:failed:unknown", "s3:pending:", "s4:pending:"}; !slices.Equal(steps, want) {
		t.Errorf("plan steps %q, want %q", steps, want)
	}
	var undone []string
	for _, e := range st.Undone {
		undone = append(undone, fmt.Sprintf("%s>%s:%s:%d", e.CallID, e.Compensation.Tool, e.State, e.Tries))
	}
	if want := []string{"step-s2>counter__put:done:1", "step-s1>counter__put:done:1"}; !slices.Equal(undone, want) {
		t.Errorf("compensations %q, want %q", undone, want)
	}
	if len(st.Compensations) != 0 || st.Rollbacks != 1 {
		t.Errorf("%d compensations still pending, %d rollbacks; want 0 and 1", len(st.Compensations), st.Rollbacks)
	}
	attempts := map[string]int{}
	for _, r := range st.Recent {
		attempts[r.CallID] = r.Attempts
	}
	if attempts["step-s2"] != 1 {
		t.Errorf("step s2 ran %d attempts, want 1 (not idempotent: never re-run)", attempts["step-s2"])
	}

	// In the history: s2 was sent once; s1's compensation twice (the
	// second attempt, under the same key, was not applied again upstream).
	sent := scheduledCalls(t, c, id)
	if sent["step-s2"] != 1 || sent["undo-step-s2"] != 1 || sent["undo-step-s1"] != 2 {
		t.Errorf("CallTool activities scheduled per call: %v; want step-s2 1, undo-step-s2 1, undo-step-s1 2", sent)
	}

	out, code = runAirlock(t, bin, "tasks", "show", "--temporal-address", temporalAddr, id)
	for _, want := range []string{"state:     rolled_back", "undone:", "step-s2", "step-s1", "counter__put", "unknown"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("airlock tasks show: exit %d, no %q in:\n%s", code, want, out)
			break
		}
	}
	t.Logf("total %s", time.Since(testStart).Round(time.Millisecond))
}

// scheduledCalls counts the CallTool activities scheduled in a workflow's
// history, by call ID.
func scheduledCalls(t *testing.T, c client.Client, id string) map[string]int {
	t.Helper()
	n := map[string]int{}
	it := c.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		a := ev.GetActivityTaskScheduledEventAttributes()
		if a == nil || a.GetActivityType().GetName() != api.CallToolName {
			continue
		}
		for _, p := range a.GetInput().GetPayloads() {
			var in api.CallToolInput
			if err := json.Unmarshal(p.GetData(), &in); err == nil && in.CallID != "" {
				n[in.CallID]++
			}
		}
	}
	return n
}

// restartDev kills p with SIGKILL, starts `airlock dev` again with args and
// waits until it is healthy.
func restartDev(t *testing.T, p *devProcess, bin, base string, args []string) *devProcess {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	p = startDev(t, bin, args...)
	p.waitHealthy(t, base)
	return p
}

// runAirlock runs the airlock binary and returns its combined output and
// exit code.
func runAirlock(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("airlock %s: %v", strings.Join(args, " "), err)
	return "", -1
}

// quietSDKLogger drops the Temporal client's logs.
type quietSDKLogger struct{}

func (quietSDKLogger) Debug(string, ...any) {}
func (quietSDKLogger) Info(string, ...any)  {}
func (quietSDKLogger) Warn(string, ...any)  {}
func (quietSDKLogger) Error(string, ...any) {}
