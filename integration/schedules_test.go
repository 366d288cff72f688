package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/identity"
)

// TestSchedules: on `airlock dev`, a plan scheduled `--every 2s` runs twice
// as normal plan tasks (policy, audit, the same pipeline) that tasks list
// attributes to the schedule; a paused schedule does not fire until
// resumed or triggered; create refuses a principal without
// schedules.create, a bad plan and a bad spec before anything is made; the
// scheduled runs' histories replay (recorded as plan_scheduled_v1).
func TestSchedules(t *testing.T) {
	t.Parallel()
	d := newCounterDev(t, `  append:
    side_effects: [write]
    data_access_level: internal
    risk: low
`)
	bin, dir, effects := d.bin, d.dir, d.effects
	cfg := filepath.Join(dir, "airlock.yaml")
	writeFile(t, cfg, `manifests: [counter.yaml]
principals:
  - {name: ops-bot, roles: [scheduler], api_key_sha256: [`+identity.HashKey("ops-bot-key")+`]}
  - {name: intern, roles: [worker], api_key_sha256: [`+identity.HashKey("intern-key")+`]}
roles:
  scheduler: {permissions: ["counter.write", "schedules.create"], data_access_level: internal, tools: ["counter__*"]}
  worker: {permissions: ["counter.write"], data_access_level: internal, tools: ["counter__*"]}
`)
	writeFile(t, filepath.Join(dir, "tick.yaml"), `name: tick
vars: {key: tick}
steps:
  - id: count
    tool: counter__append
    args: {key: "${{ vars.key }}"}
`)
	writeFile(t, filepath.Join(dir, "bad.yaml"), `name: bad
steps:
  - id: nope
    tool: counter__nonexistent
    args: {}
`)
	// Scheduled work may be code: a plan whose step is a program.
	writeFile(t, filepath.Join(dir, "prog.yaml"), `name: prog
steps:
  - id: sync
    program: |
      for i in range(2):
          counter.append(key="sched-prog-%d" % i)
`)
	// A program step whose program_file leads out of the plan's directory.
	writeFile(t, filepath.Join(dir, "escape.yaml"), `name: escape
steps:
  - id: sync
    program_file: ../outside.star
`)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tport := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startDev(t, bin, "--config", cfg, "--data-dir", filepath.Join(dir, "data"), "--listen", listen,
		"--temporal-port", strings.TrimPrefix(tport, "127.0.0.1:"), "--log-format", "json", "--no-ui")
	p.waitHealthy(t, "http://"+listen)

	cli := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	create := func(extra ...string) (string, int) {
		return cli(append([]string{"schedules", "create", "--config", cfg, "--temporal-address", tport}, extra...)...)
	}

	// Refused at creation, nothing made.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"by-intern", "--every", "2s", "--as", "intern", "tick.yaml"}, `principal intern may not create schedules: give one of its roles the permission "schedules.create"`},
		{[]string{"bad-plan", "--every", "2s", "--as", "ops-bot", "bad.yaml"}, "counter__nonexistent"},
		{[]string{"escape", "--every", "2s", "--as", "ops-bot", "escape.yaml"}, `escape.yaml:4: steps[0].program_file: "../outside.star" is not inside the plan's directory`},
		{[]string{"both", "--every", "2s", "--cron", "* * * * *", "--as", "ops-bot", "tick.yaml"}, "exactly one of --cron"},
		{[]string{"Bad_Name", "--every", "2s", "--as", "ops-bot", "tick.yaml"}, "schedule name"},
		{[]string{"bad-cron", "--cron", "every tuesday", "--as", "ops-bot", "tick.yaml"}, "five fields"},
	} {
		out, code := create(c.args...)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("create %v: exit %d, want 2 and %q:\n%s", c.args, code, c.want, out)
		}
	}

	if out, code := create("ticker", "--every", "2s", "--as", "ops-bot", "--var", "key=ticker", "tick.yaml"); code != 0 {
		t.Fatalf("create ticker: %d\n%s", code, out)
	}
	if out, code := create("ticker", "--every", "2s", "--as", "ops-bot", "tick.yaml"); code != 2 || !strings.Contains(out, "already exists") {
		t.Errorf("create ticker again: %d\n%s", code, out)
	}
	if out, code := create("sleeper", "--every", "2s", "--as", "ops-bot", "--paused", "--var", "key=sleeper", "tick.yaml"); code != 0 {
		t.Fatalf("create sleeper: %d\n%s", code, out)
	}

	if out, code := create("progger", "--every", "2s", "--as", "ops-bot", "prog.yaml"); code != 0 {
		t.Fatalf("create progger: %d\n%s", code, out)
	}

	c := dialTest(t, tport, "default")
	ctx := context.Background()
	runs := func(schedule string, closed bool) []*workflowservice.ListWorkflowExecutionsResponse {
		q := fmt.Sprintf("TemporalScheduledById = '%s'", schedule)
		if closed {
			q += " AND ExecutionStatus = 'Completed'"
		}
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", Query: q})
		if err != nil {
			t.Fatal(err)
		}
		return []*workflowservice.ListWorkflowExecutionsResponse{resp}
	}
	count := func(schedule string, closed bool) int { return len(runs(schedule, closed)[0].GetExecutions()) }
	waitFor(t, "two completed runs of ticker", 90*time.Second, func() bool { return count("ticker", true) >= 2 })
	if n := sideEffects(t, effects, "append", "ticker"); n < 2 {
		t.Errorf("ticker's plan ran its step %d times, want at least 2", n)
	}
	if n := count("sleeper", false); n != 0 {
		t.Errorf("the paused schedule fired %d times", n)
	}
	// The scheduled program ran its calls, each through the pipeline.
	waitFor(t, "a completed run of progger", 90*time.Second, func() bool { return count("progger", true) >= 1 })
	if out, code := cli("schedules", "delete", "--temporal-address", tport, "progger"); code != 0 {
		t.Errorf("delete progger: %s", out)
	}
	for i := range 2 {
		if n := sideEffects(t, effects, "append", fmt.Sprintf("sched-prog-%d", i)); n < 1 {
			t.Errorf("progger's program ran append sched-prog-%d %d times, want at least once", i, n)
		}
	}

	out, code := cli("tasks", "list", "--temporal-address", tport)
	if code != 0 || !strings.Contains(out, "SCHEDULE") || !strings.Contains(out, "plan-ticker-") || !strings.Contains(out, "ticker\n") {
		t.Errorf("tasks list:\n%s", out)
	}
	out, code = cli("schedules", "list", "--temporal-address", tport)
	if code != 0 || !strings.Contains(out, "ticker") || !strings.Contains(out, "every 2s") || !strings.Contains(out, "sleeper") || !strings.Contains(out, "paused") {
		t.Errorf("schedules list:\n%s", out)
	}
	out, code = cli("schedules", "show", "--temporal-address", tport, "ticker")
	if code != 0 || !strings.Contains(out, "plan:") || !strings.Contains(out, "tick") || !strings.Contains(out, "ops-bot") || !strings.Contains(out, "ran ") {
		t.Errorf("schedules show:\n%s", out)
	}

	// Pause ticker; trigger sleeper once by hand; then resume sleeper.
	if out, code := cli("schedules", "pause", "--temporal-address", tport, "ticker"); code != 0 {
		t.Fatalf("pause: %s", out)
	}
	if out, code := cli("schedules", "trigger", "--temporal-address", tport, "sleeper"); code != 0 {
		t.Fatalf("trigger: %s", out)
	}
	waitFor(t, "the triggered run of sleeper", 60*time.Second, func() bool { return count("sleeper", true) >= 1 })
	paused := count("ticker", false)
	// Not a wait for a condition: the check that nothing happens lets
	// ticker's 2s interval pass twice.
	time.Sleep(5 * time.Second)
	if n := count("ticker", false); n != paused {
		t.Errorf("ticker fired while paused: %d runs, then %d", paused, n)
	}
	if out, code := cli("schedules", "show", "--temporal-address", tport, "nosuch"); code != 1 || !strings.Contains(out, "no such schedule") {
		t.Errorf("show nosuch: %d %s", code, out)
	}

	// A scheduled run is a normal plan task of its principal, and replays.
	ex := runs("ticker", true)[0].GetExecutions()[0]
	id, runID := ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId()
	v, err := c.QueryWorkflow(ctx, id, "", api.QueryStatus)
	if err != nil {
		t.Fatal(err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	if st.Principal != "ops-bot" || st.Plan == nil || st.Plan.Name != "tick" || st.TaskID != id {
		t.Errorf("scheduled run's status: %+v", st)
	}
	replayClientRuns(t, c, id, runID, "plan_scheduled_v1")

	if out, code := cli("schedules", "delete", "--temporal-address", tport, "ticker"); code != 0 {
		t.Errorf("delete: %s", out)
	}
	if out, _ := cli("schedules", "list", "--temporal-address", tport); strings.Contains(out, "ticker") {
		t.Errorf("deleted schedule still listed:\n%s", out)
	}
}
