package config_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
)

// TestRateLimitsAndBudgets loads roles' and the task's rate limits and
// budgets and resolves them for a principal: windows per principal by
// default, per role when asked, the largest role budget.
func TestRateLimitsAndBudgets(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("fs"))
	cfg := write(t, filepath.Join(dir, "airlock.yaml"), `manifests: [m.yaml]
task:
  budget: 50
  rate_limits:
    - {calls: 100, window: 1m}
principals:
  - {name: alice, roles: [dev, ops]}
roles:
  dev:
    budget: 20
    rate_limits:
      - {name: dev-calls, calls: 10, window: 1m, burst: 3}
      - {per: role, tool: "fs__write_*", calls: 5, window: 1h}
  ops:
    budget: 30
`)
	snap, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]api.RateLimit{{Name: "task.rate_limits[0]", Scope: api.ScopeTask, Calls: 100, Window: time.Minute}}, snap.Config.TaskRateLimits()); diff != "" {
		t.Errorf("task rate limits (-want +got):\n%s", diff)
	}
	pr, ok := identity.New(snap.Config).Lookup("alice")
	if !ok {
		t.Fatal("alice not found")
	}
	want := []api.RateLimit{
		{Name: "dev-calls", Scope: api.ScopePrincipal, Subject: "alice", Calls: 10, Window: time.Minute, Burst: 3},
		{Name: "roles.dev.rate_limits[1]", Scope: api.ScopeRole, Subject: "dev", Tool: "fs__write_*", Calls: 5, Window: time.Hour},
	}
	if diff := cmp.Diff(want, pr.RateLimits); diff != "" {
		t.Errorf("alice's rate limits (-want +got):\n%s", diff)
	}
	if pr.Budget != 30 || snap.Config.Task.Budget != 50 {
		t.Errorf("budgets: alice %d (want 30, the largest of her roles'), task %d (want 50)", pr.Budget, snap.Config.Task.Budget)
	}
}

// TestRateLimitProblems: every wrong limit field is reported at its line
// with the fix.
func TestRateLimitProblems(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("fs"))
	cfg := write(t, filepath.Join(dir, "airlock.yaml"), `manifests: [m.yaml]
task:
  budget: -1
  rate_limits:
    - per: principal
      calls: 0
      window: 0s
principals:
  - {name: alice, roles: [dev]}
roles:
  dev:
    budget: -5
    rate_limits:
      - name: "bad name!"
        per: team
        tool: "fs__[write"
        calls: 3
        window: 1000h
        burst: 0
      - {name: same, calls: 1, window: 1s}
      - {name: same, calls: 1, window: 1ns}
`)
	_, err := config.Load(cfg)
	if err == nil {
		t.Fatal("Load accepted wrong limits")
	}
	want := []string{
		cfg + `:3: task.budget: must not be negative, got -1; write the cost units one task may spend, or omit it for no budget`,
		cfg + `:5: task.rate_limits[0].per: "principal": task.rate_limits are per task; put a per-principal limit under roles.NAME.rate_limits`,
		cfg + `:6: task.rate_limits[0].calls: must be at least 1, got 0; write how many calls the window admits`,
		cfg + `:7: task.rate_limits[0].window: must be positive, got 0s; write the window's length, e.g. "1m"`,
		cfg + `:12: roles.dev.budget: must not be negative, got -5; omit it for task.budget`,
		cfg + `:14: roles.dev.rate_limits[0].name: "bad name!" is not a limit name: use letters, digits and . _ - (at most 100)`,
		cfg + `:15: roles.dev.rate_limits[0].per: "team" is not a scope; use principal (each principal's calls), role (all the role's principals together) or task (each task)`,
		cfg + `:16: roles.dev.rate_limits[0].tool: "fs__[write" is not a valid glob; write e.g. "filesystem__write_*", or omit it to count every call`,
		cfg + `:18: roles.dev.rate_limits[0].window: 1000h0m0s is longer than 744h0m0s; use a shorter window (or a task budget for long spans)`,
		cfg + `:19: roles.dev.rate_limits[0].burst: must be at least 1, got 0; omit it to admit up to calls at once`,
		cfg + `:21: roles.dev.rate_limits[2].name: "same" is also the name of roles.dev.rate_limits[1]; limit names must be unique (they name the limit in refusals and metrics)`,
		cfg + `:21: roles.dev.rate_limits[2].window: 1ns for 1 calls is less than a microsecond per call; lengthen the window or lower calls`,
	}
	if diff := cmp.Diff(want, problems(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
