package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/timeline"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
)

// limitMeta reads a refusal's limit name, check and retry_after from its
// _meta.
func limitMeta(t *testing.T, res *mcp.CallToolResult) (name, check string, retry float64) {
	t.Helper()
	name, _ = res.Meta[gateway.MetaLimit].(string)
	check, _ = res.Meta[gateway.MetaLimitCheck].(string)
	retry, _ = res.Meta[gateway.MetaRetryAfter].(float64)
	return name, check, retry
}

// refusals reads airlock_limit_refusals_total{check,limit}.
func refusals(t *testing.T, check, limit string) float64 {
	t.Helper()
	var m dto.Metric
	if err := metrics.LimitRefusals.WithLabelValues(check, limit).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestRateLimitBurst: a task's window of 3 calls per 3s admits a burst of
// 3, refuses the 4th as an isError result (never a JSON-RPC error) whose
// text names the limit and its window and whose _meta carries the limit
// and retry_after; after retry_after the next call runs. The refusal is
// recorded as a decision with check rate_limit, shown by the audit
// timeline, and counted in airlock_limit_refusals_total.
func TestRateLimitBurst(t *testing.T) {
	// Not parallel: the burst of four calls must fit in the 3s window,
	// which the other tests' load can stretch past.
	m, effects := counterManifest(t, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m},
		taskRateLimits: []api.RateLimit{{Name: "burst", Scope: api.ScopeTask, Calls: 3, Window: 3 * time.Second}}})
	cs := s.connect(t, map[string]string{gateway.HeaderTask: "limited"})
	waitTools(t, cs, "counter__echo")
	before := refusals(t, api.CheckRateLimit, "burst")

	for i := range 3 {
		if res := call(t, cs, "counter__echo", map[string]any{"text": fmt.Sprint("b", i)}, ""); res.IsError {
			t.Fatalf("call %d of the burst: %s", i+1, text(res))
		}
	}
	res := call(t, cs, "counter__echo", map[string]any{"text": "over"}, "")
	name, check, retry := limitMeta(t, res)
	if !res.IsError || name != "burst" || check != api.CheckRateLimit || retry <= 0 || retry > 3 {
		t.Fatalf("4th call: isError=%v meta %v: %s", res.IsError, res.Meta, text(res))
	}
	if msg := text(res); !strings.Contains(msg, "rate limit burst (3 calls per 3s") || !strings.Contains(msg, "Call again after") {
		t.Errorf("refusal text: %s", msg)
	}
	if n := countEffects(t, effects, "echo", "over"); n != 0 {
		t.Errorf("the refused call ran %d times", n)
	}
	if got := refusals(t, api.CheckRateLimit, "burst") - before; got != 1 {
		t.Errorf("airlock_limit_refusals_total{check=rate_limit,limit=burst} rose by %v, want 1", got)
	}

	// The behaviour under test: the window frees a call after retry_after.
	time.Sleep(time.Duration(retry * float64(time.Second)))
	if res := call(t, cs, "counter__echo", map[string]any{"text": "later"}, ""); res.IsError {
		t.Fatalf("call after retry_after: %s", text(res))
	}

	// airlock audit show's timeline records the decision.
	hist := fetchHistory(t, s.client, "limited", "")
	tl, err := timeline.Build(hist, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range tl.Calls {
		if d := c.Decision; d != nil && d.Check == api.CheckRateLimit && d.Rule == "burst" && c.Result != nil && c.Result.Outcome == string(api.OutcomeLimit) {
			found = true
		}
	}
	if !found {
		b, _ := json.MarshalIndent(tl.Calls, "", " ")
		t.Errorf("no call in the timeline refused by rate_limit burst:\n%s", b)
	}
}

// TestRateLimitSharedAcrossTasks: a per-principal window of a role holds
// across two tasks of one principal (its limiter workflow is the shared
// authority), while another principal with the same role has its own.
func TestRateLimitSharedAcrossTasks(t *testing.T) {
	t.Parallel()
	m, _ := counterManifest(t, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")
	cfg := &config.Config{
		Principals: []config.Principal{
			{Name: "alice", Roles: []string{"dev"}, APIKeySHA256: []string{identity.HashKey("alice-key")}},
			{Name: "bob", Roles: []string{"dev"}, APIKeySHA256: []string{identity.HashKey("bob-key")}},
		},
		Roles: map[string]*config.Role{"dev": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"},
			RateLimits: []config.RateLimit{{Name: "dev-calls", Calls: 2, Window: manifests.Duration(time.Hour)}}}},
	}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: identity.New(cfg)})
	as := func(key, task string) *mcp.ClientSession {
		return s.connect(t, map[string]string{"Authorization": "Bearer " + key, gateway.HeaderTask: task})
	}
	a1, a2, b1 := as("alice-key", "alice-1"), as("alice-key", "alice-2"), as("bob-key", "bob-1")
	waitTools(t, a1, "counter__echo")

	for i := range 2 {
		if res := call(t, a1, "counter__echo", map[string]any{"text": fmt.Sprint("a", i)}, ""); res.IsError {
			t.Fatalf("alice's call %d in her first task: %s", i+1, text(res))
		}
	}
	res := call(t, a2, "counter__echo", map[string]any{"text": "a2"}, "")
	name, check, retry := limitMeta(t, res)
	if !res.IsError || name != "dev-calls" || check != api.CheckRateLimit || retry < 60 {
		t.Fatalf("alice's call in her second task: isError=%v meta %v: %s", res.IsError, res.Meta, text(res))
	}
	if !strings.Contains(text(res), "principal alice, shared by all its tasks") {
		t.Errorf("refusal text: %s", text(res))
	}
	if res := call(t, b1, "counter__echo", map[string]any{"text": "b"}, ""); res.IsError {
		t.Fatalf("bob's call (his own window): %s", text(res))
	}
	// The window's authority is one workflow per principal and limit.
	d, err := s.client.DescribeWorkflowExecution(context.Background(), api.LimiterID("principal:alice:dev-calls"), "")
	if err != nil {
		t.Fatalf("alice's limiter: %v", err)
	}
	if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("alice's limiter is %s, want running", st)
	}
}

// TestBudgetExhaustedMidPlan: a plan whose steps each cost 2 under a
// budget of 5 runs two; the third is refused with check budget (it never
// reaches the upstream) and the plan rolls back as for a failed step. Its
// history is recorded (-record) as limits_v1_plan.
func TestBudgetExhaustedMidPlan(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, `  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, cost: 2,
        compensation: {tool: put, args: {key: '"undo-" + args.key'}}}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	waitTools(t, s.connect(t, nil), "counter__put")
	p, err := plans.Parse(filepath.Join(t.TempDir(), "plan.yaml"), []byte(`name: costly
steps:
  - {id: one, tool: counter__put, args: {key: p1}}
  - {id: two, tool: counter__put, args: {key: p2}}
  - {id: three, tool: counter__put, args: {key: p3}}
`))
	if err != nil {
		t.Fatal(err)
	}
	in := api.PlanInput{TaskID: "plan-budget", Principal: "tester", Plan: p,
		Identity: &api.Identity{Name: "tester", Permissions: []string{"*"}, DataLevel: string(manifests.DataRestricted), AllowTools: []string{"*"}},
		Limits:   api.Limits{MaxCalls: 50}, Quota: api.NewQuota(nil, 5)}
	run, err := s.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: in.TaskID, TaskQueue: api.DefaultTaskQueue}, api.PlanName, in)
	if err != nil {
		t.Fatal(err)
	}
	if res := planResult(t, run); res.State != api.StateRolledBack {
		t.Fatalf("plan ended %s, want rolled_back", res.State)
	}
	st := status(t, s, "plan-budget")
	if st.Budget != 5 || st.Spent != 4 {
		t.Errorf("status: spent %d of %d, want 4 of 5", st.Spent, st.Budget)
	}
	three := st.Plan.Steps[2]
	if three.Outcome != api.OutcomeLimit || !strings.Contains(three.Reason, "spent 4 of its budget of 5 cost units") {
		t.Errorf("step three = %+v", three)
	}
	var rec *api.CallRecord
	for i := range st.Recent {
		if st.Recent[i].CallID == "step-three" {
			rec = &st.Recent[i]
		}
	}
	if rec == nil || rec.Decision == nil || rec.Decision.Check != api.CheckBudget {
		t.Errorf("step three's record %+v: want a decision with check budget", rec)
	}
	for key, want := range map[string]int{"p1": 1, "p2": 1, "p3": 0, "undo-p2": 1, "undo-p1": 1} {
		if n := countEffects(t, effects, "put", key); n != want {
			t.Errorf("put %s ran %d times, want %d", key, n, want)
		}
	}
	// With -record: limits_v1_plan_run1.json.
	replayClientRuns(t, s.client, in.TaskID, run.GetRunID(), "limits_v1_plan")
}

// TestRecordLimitsHistory records an agent task under rate limits and a
// budget (changeLimits) on the real server: a per-task, per-tool window
// and the budget both carried across continue-as-new, a call refused by
// that window charging nothing, a shared per-principal window (the
// TakeLimits local activity and its limiter), and a budget refusal. With
// -record it writes limits_v1_run*.json.
func TestRecordLimitsHistory(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, cost: 3}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	waitTools(t, s.connect(t, nil), "counter__echo", "counter__put")

	ctx := context.Background()
	taskID := "record-limits"
	in := api.TaskInput{TaskID: taskID, Principal: "recorder",
		Identity: &api.Identity{Name: "recorder", Permissions: []string{"*"}, DataLevel: "restricted", AllowTools: []string{"counter__*"}},
		Limits:   api.Limits{MaxCalls: 20, IdleTimeout: time.Hour, ContinueAsNewAfter: 2},
		Quota: api.NewQuota([]api.RateLimit{
			{Name: "echo-per-task", Scope: api.ScopeTask, Tool: "counter__echo", Calls: 2, Window: time.Hour},
			{Name: "recorder-puts", Scope: api.ScopePrincipal, Subject: "recorder", Tool: "counter__put", Calls: 5, Window: time.Hour},
		}, 5)}
	run, err := s.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: taskID, TaskQueue: api.DefaultTaskQueue}, api.AgentTaskName, in)
	if err != nil {
		t.Fatal(err)
	}
	echoSpec := api.SpecFor(m.Tools["echo"])
	putSpec := api.SpecFor(m.Tools["put"])
	if putSpec.Cost != 3 || echoSpec.Cost != 0 {
		t.Fatalf("costs: put %d, echo %d; want 3 from the manifest and 0 (the default, 1) for echo", putSpec.Cost, echoSpec.Cost)
	}
	req := func(id, tool, key string, spec api.ToolSpec) api.CallRequest {
		return api.CallRequest{CallID: id, Tool: "counter__" + tool, Server: "counter", UpstreamTool: tool,
			Arguments: json.RawMessage(fmt.Sprintf(`{%q:%q}`, map[string]string{"echo": "text", "put": "key"}[tool], key)), Spec: spec}
	}
	steps := []struct {
		req   api.CallRequest
		want  api.Outcome
		check string
	}{
		{req("e1", "echo", "e1", echoSpec), api.OutcomeOK, ""},
		{req("e2", "echo", "e2", echoSpec), api.OutcomeOK, ""},
		// continue-as-new (after 2 calls): the window and the budget go on
		{req("e3", "echo", "e3", echoSpec), api.OutcomeLimit, api.CheckRateLimit},
		// 2 spent + 3 = 5: fits only because the refused e3 charged nothing
		{req("p1", "put", "p1", putSpec), api.OutcomeOK, ""},
		{req("p2", "put", "p2", putSpec), api.OutcomeLimit, api.CheckBudget},
	}
	for _, st := range steps {
		var res api.CallResult
		// Between runs the update may race the new run: send it again.
		waitUntil(t, "call "+st.req.CallID+" to be answered", 30*time.Second, func() error {
			h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: taskID, UpdateID: st.req.CallID,
				UpdateName: api.UpdateCallTool, Args: []any{st.req}, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err == nil {
				err = h.Get(ctx, &res)
			}
			return err
		})
		check := ""
		if res.Decision != nil && res.Outcome == api.OutcomeLimit {
			check = res.Decision.Check
		}
		if res.Outcome != st.want || check != st.check {
			t.Fatalf("call %s: outcome %q check %q (%s), want %q %q", st.req.CallID, res.Outcome, check, res.Reason, st.want, st.check)
		}
		if st.check == api.CheckRateLimit && (res.Limit == nil || res.Limit.Limit != "echo-per-task" || res.Limit.RetryAfter <= 0) {
			t.Errorf("call %s: limit %+v", st.req.CallID, res.Limit)
		}
	}
	if n := countEffects(t, effects, "put", "p2"); n != 0 {
		t.Errorf("the put refused by the budget ran %d times", n)
	}
	if err := s.client.SignalWorkflow(ctx, taskID, "", api.SignalFinish, nil); err != nil {
		t.Fatal(err)
	}
	var out api.TaskResult
	if err := s.client.GetWorkflow(ctx, taskID, "").Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if out.State != api.StateFinished || out.Calls != 3 {
		t.Fatalf("task result %+v, want finished with 3 calls", out)
	}
	replayClientRuns(t, s.client, taskID, run.GetRunID(), "limits_v1")
	// The limiter's own history replays too.
	lim := api.LimiterID("principal:recorder:recorder-puts:counter__put")
	d, err := s.client.DescribeWorkflowExecution(ctx, lim, "")
	if err != nil {
		t.Fatalf("the limiter of recorder-puts: %v", err)
	}
	replayClientRuns(t, s.client, lim, d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "limits_v1_limiter")
}

// BenchmarkLimitCost measures what a rate limit costs one call, through
// the gateway over MCP, back to back in one task per mode: none, a
// per-task window (decided in the task's own state) and a per-principal
// window (an Update-with-Start on its limiter workflow, from a local
// activity). The modes run in alternating rounds, so that the load of a
// shared machine falls on all three alike. It reports each mode's ms per
// call, the task's history events per call and the limiter's.
//
//	go test -run '^$' -bench LimitCost -benchtime 300x ./integration/
func BenchmarkLimitCost(b *testing.B) {
	m, _ := counterManifest(b, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")
	grant := func(rl ...config.RateLimit) *config.Role {
		return &config.Role{Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}, RateLimits: rl}
	}
	huge := func(per string) config.RateLimit {
		return config.RateLimit{Name: "bench-" + per, Per: per, Calls: 1 << 30, Window: manifests.Duration(time.Second)}
	}
	modes := []string{"none", "task", "principal"}
	cfg := &config.Config{Roles: map[string]*config.Role{"none": grant(), "task": grant(huge(api.ScopeTask)), "principal": grant(huge(api.ScopePrincipal))}}
	for _, who := range modes {
		cfg.Principals = append(cfg.Principals, config.Principal{Name: who, Roles: []string{who}, APIKeySHA256: []string{identity.HashKey(who + "-key")}})
	}
	s := newStack(b, stackOptions{manifests: []*manifests.Manifest{m}, directory: identity.New(cfg), maxCalls: 1 << 20, continueAsNewAfter: 1 << 20})
	sessions := map[string]*mcp.ClientSession{}
	watched := map[string]bool{}
	limiter := api.LimiterID("principal:principal:bench-principal")
	for _, who := range modes {
		task := fmt.Sprintf("bench-%s-%d", who, b.N)
		cs := s.connect(b, map[string]string{"Authorization": "Bearer " + who + "-key", gateway.HeaderTask: task})
		waitTools(b, cs, "counter__echo")
		for range 3 { // warm up: the task and (shared) its limiter exist
			if res := call(b, cs, "counter__echo", map[string]any{"text": "w"}, ""); res.IsError {
				b.Fatalf("warm-up: %s", text(res))
			}
		}
		sessions[who], watched[task] = cs, true
	}
	watched[limiter] = true
	before := historyLengths(b, s.client, watched)
	spent := map[string]time.Duration{}
	const rounds = 5
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r == rounds-1 {
			n = b.N - n*(rounds-1)
		}
		for _, who := range modes {
			start := time.Now()
			for range n {
				if res := call(b, sessions[who], "counter__echo", map[string]any{"text": "x"}, ""); res.IsError {
					b.Fatalf("call: %s", text(res))
				}
			}
			spent[who] += time.Since(start)
		}
	}
	b.StopTimer()
	after := historyLengths(b, s.client, watched)
	for _, who := range modes {
		b.ReportMetric(float64(spent[who].Microseconds())/1000/float64(b.N), who+"-ms/call")
	}
	for id := range watched {
		one := func(m map[string]historyLen) map[string]historyLen { return map[string]historyLen{id: m[id]} }
		if n, ok := eventsAdded(one(before), one(after)); ok {
			unit := strings.TrimSuffix(strings.TrimPrefix(id, "bench-"), fmt.Sprintf("-%d", b.N)) + "-task-events/call"
			if id == limiter {
				unit = "limiter-events/call"
			}
			b.ReportMetric(float64(n)/float64(b.N), unit)
		}
	}
}

// TestLimitsDevBinary runs limits end to end in the real airlock dev from
// its configuration: a role's per-principal window on one tool refuses the
// third echo with retry_after, the task budget refuses a put that costs
// more than is left, `airlock audit show` lists both refusals with their
// checks, and `airlock tasks show` the budget spent.
func TestLimitsDevBinary(t *testing.T) {
	t.Parallel()
	d := newCounterDev(t, `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, cost: 2}
`)
	cfg := filepath.Join(d.dir, "airlock.yaml")
	writeFile(t, cfg, `manifests: [counter.yaml]
task:
  budget: 3
principals:
  - {name: alice, roles: [dev], api_key_sha256: [`+identity.HashKey("alice-key")+`]}
roles:
  dev:
    permissions: ["*"]
    data_access_level: restricted
    tools: ["*"]
    rate_limits:
      - {name: echoes, tool: "counter__echo", calls: 2, window: 1h}
`)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	temporalPort := freePort(t)
	p := startDev(t, d.bin, "--config", cfg, "--data-dir", filepath.Join(d.dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(temporalPort), "--log-format", "json", "--no-ui")
	p.waitHealthy(t, "http://"+listen)
	alice := connectURL(t, "http://"+listen+"/mcp", map[string]string{"Authorization": "Bearer alice-key", gateway.HeaderTask: "alice-limits"})
	waitTools(t, alice, "counter__echo", "counter__put")

	for i := range 2 {
		if res := call(t, alice, "counter__echo", map[string]any{"text": fmt.Sprint(i)}, ""); res.IsError {
			t.Fatalf("echo %d: %s", i+1, text(res))
		}
	}
	res := call(t, alice, "counter__echo", map[string]any{"text": "third"}, "")
	if name, check, retry := limitMeta(t, res); !res.IsError || name != "echoes" || check != api.CheckRateLimit || retry <= 0 {
		t.Fatalf("third echo: isError=%v meta %v: %s", res.IsError, res.Meta, text(res))
	}
	res = call(t, alice, "counter__put", map[string]any{"key": "k"}, "")
	if name, check, _ := limitMeta(t, res); !res.IsError || name != "budget" || check != api.CheckBudget || !strings.Contains(text(res), "spent 2 of its budget of 3") {
		t.Fatalf("put over the budget: isError=%v meta %v: %s", res.IsError, res.Meta, text(res))
	}
	if n := countEffects(t, d.effects, "put", "k"); n != 0 {
		t.Errorf("the refused put ran %d times", n)
	}

	cli := func(args ...string) string {
		t.Helper()
		flags := []string{"--temporal-address", fmt.Sprintf("127.0.0.1:%d", temporalPort)}
		if args[0] == "audit" {
			flags = append(flags, "--config", cfg)
		}
		cmd := exec.Command(d.bin, append(args[:2:2], append(flags, args[2:]...)...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("airlock %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := cli("audit", "show", "alice-limits"); !strings.Contains(out, "deny (rate_limit echoes)") || !strings.Contains(out, "deny (budget): counter__put refused") {
		t.Errorf("audit show lists no rate_limit/budget refusal:\n%s", out)
	}
	if out := cli("tasks", "show", "alice-limits"); !strings.Contains(out, "budget:    2 of 3 cost units spent") {
		t.Errorf("tasks show:\n%s", out)
	}

	// A plan's step refused by the budget is counted too, by the worker,
	// once: with the gateway's refusal above, two budget refusals. A state
	// call is counted by op and result.
	if res := call(t, alice, "airlock_state_set", map[string]any{"key": "done", "value": 1}, ""); res.IsError {
		t.Fatalf("state set: %s", text(res))
	}
	planFile := filepath.Join(d.dir, "costly.yaml")
	writeFile(t, planFile, "name: costly\nsteps:\n  - {id: one, tool: counter__put, args: {key: p1}}\n  - {id: two, tool: counter__put, args: {key: p2}}\n")
	out, _ := runAirlock(t, d.bin, "run", "--config", cfg, "--temporal-address", fmt.Sprintf("127.0.0.1:%d", temporalPort), "--as", "alice", planFile)
	if n := countEffects(t, d.effects, "put", "p2"); n != 0 {
		t.Fatalf("the plan's second step ran over the budget:\n%s", out)
	}
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`airlock_limit_refusals_total{check="budget",limit="budget"} 2`,
		`airlock_limit_refusals_total{check="rate_limit",limit="echoes"} 1`,
		`airlock_task_state_calls_total{op="set",result="ok"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s\nairlock run:\n%s", want, grepLines(string(body), "airlock_limit_refusals")+"\n"+grepLines(string(body), "airlock_task_state"), out)
		}
	}
}
