package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/worker"
)

// meteredTools are testupstream's tools as server "metered", a name no
// other test uses, so the per-tool series are this test's alone: echo
// runs at once; append needs ops' approval and is undone by fail (which
// fails); put needs an approval that expires after 2s.
const meteredTools = `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  append:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: false
    approval: {group: ops, timeout: 10m}
    compensation: {tool: fail, args: {text: '"undo " + args.key'}}
  put:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: true
    approval: {group: ops, timeout: 2s}
  fail: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
`

// TestMetricsAndAuditLog drives calls that are allowed, denied by a rule,
// approved, refused to their requester, left to expire, and rolled back by
// a compensation that fails, plus a caller with a bad key, through the
// real stack; then it checks the exact counts on /metrics, the approvals
// pending gauge while a request waits, the Temporal SDK's series, that the
// audit log has one line per decision point and no argument value, and
// that `airlock tasks list` filters by principal, tool, state and pending
// approval.
func TestMetricsAndAuditLog(t *testing.T) {
	s, auditPath := newMeteredStack(t)
	ns := s.srv.Namespace()
	local := approver.Local{Temporal: s.client, Namespace: ns, Audit: openAudit(t, auditPath)}
	pending := metrics.NewPending(func(ctx context.Context) (int64, error) { return approver.CountPending(ctx, s.client, ns) }, time.Nanosecond)
	if err := metrics.Registry.Register(pending); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { metrics.Registry.Unregister(pending) })
	before := scrapeMetrics(t)

	alice := connectURL(t, s.url, map[string]string{"Authorization": "Bearer alice-key", gateway.HeaderTask: "m-alice"})
	bob := connectURL(t, s.url, map[string]string{"Authorization": "Bearer bob-key", gateway.HeaderTask: "m-bob"})
	waitTools(t, alice, "metered__echo", "metered__append", "metered__put")
	waitTools(t, bob, "metered__echo")

	// Allowed (alice and bob), and denied by a rule.
	for _, cs := range []*mcpSession{{alice, "alice"}, {bob, "bob"}} {
		if res := call(t, cs.s, "metered__echo", map[string]any{"text": "hello SECRET-ECHO"}, ""); res.IsError {
			t.Fatalf("%s echo: %s", cs.who, text(res))
		}
	}
	if res := call(t, alice, "metered__echo", map[string]any{"text": "forbidden"}, ""); !res.IsError || !strings.Contains(text(res), "no-forbidden") {
		t.Fatalf("forbidden echo: isError=%v %s", res.IsError, text(res))
	}

	// Approved by bob after alice's own approval is refused; while it
	// waits, the gauge shows it and the task filters find it.
	appended := callAsync(alice, "metered__append", map[string]any{"key": "SECRET-APPEND"})
	req := waitPending(t, local, "SECRET-APPEND", nil)
	waitFor(t, "airlock_approvals_pending = 1", 30*time.Second, func() bool { return scrapeMetrics(t)["airlock_approvals_pending"] == 1 })
	checkTaskFilters(t, s, map[string][]string{
		"--principal alice":                  {"m-alice"},
		"--principal bob":                    {"m-bob"},
		"--pending-approval":                 {"m-alice"},
		"--tool metered__append":             {"m-alice"},
		"--tool metered__echo":               {"m-alice", "m-bob"},
		"--state running --principal bob":    {"m-bob"},
		"--pending-approval --principal bob": nil,
		"--status running --pending-approval --tool metered__append": {"m-alice"},
	})
	ctx := context.Background()
	var ref *approver.Refusal
	if _, err := local.Decide(ctx, approver.Decision{RequestID: req.ID, Approver: "alice", Approve: true, Via: "cli"}); !errors.As(err, &ref) {
		t.Fatalf("alice approving her own call: %v, want a refusal", err)
	}
	if res, err := local.Decide(ctx, approver.Decision{RequestID: req.ID, Approver: "bob", Approve: true, Via: "cli"}); err != nil || res.State != api.ApprovalApproved {
		t.Fatalf("bob approving: %+v %v", res, err)
	}
	if r := <-appended; r.err != nil || r.res.IsError {
		t.Fatalf("approved append: %v %+v", r.err, r.res)
	}

	// Expired: nobody decides within put's 2s.
	if res := call(t, alice, "metered__put", map[string]any{"key": "SECRET-PUT"}, ""); !res.IsError || !strings.Contains(text(res), "expired") {
		t.Fatalf("expiring put: isError=%v %s", res.IsError, text(res))
	}
	waitFor(t, "airlock_approvals_pending = 0", 30*time.Second, func() bool { return scrapeMetrics(t)["airlock_approvals_pending"] == 0 })

	// The rollback runs append's compensation, which fails.
	if res := call(t, alice, gateway.ToolRollback, map[string]any{}, ""); !res.IsError || !strings.Contains(text(res), "ROLLBACK FAILED") {
		t.Fatalf("rollback: isError=%v %s", res.IsError, text(res))
	}
	checkTaskFilters(t, s, map[string][]string{"--state rollback_failed --tool metered__echo": {"m-alice"}})

	// A caller with an unknown key.
	hreq, _ := http.NewRequest(http.MethodPost, s.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`))
	hreq.Header.Set("Authorization", "Bearer stolen-key")
	hreq.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(hreq); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad key: %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// The approval closes in the background (after the call's answer).
	var after map[string]float64
	waitFor(t, "both approval outcomes counted", 30*time.Second, func() bool {
		after = scrapeMetrics(t)
		return after[`airlock_approval_wait_seconds_count{outcome="expired"}`]-before[`airlock_approval_wait_seconds_count{outcome="expired"}`] == 1 &&
			after[`airlock_approval_wait_seconds_count{outcome="approved"}`]-before[`airlock_approval_wait_seconds_count{outcome="approved"}`] == 1
	})
	waitFor(t, "the failed rollback counted", 30*time.Second, func() bool {
		after = scrapeMetrics(t)
		return after["airlock_rollbacks_failed_total"]-before["airlock_rollbacks_failed_total"] == 1
	})

	want := map[string]float64{
		`airlock_tool_calls_total{outcome="ok",tool="metered__echo"}`:                       2,
		`airlock_tool_calls_total{outcome="denied",tool="metered__echo"}`:                   1,
		`airlock_tool_calls_total{outcome="ok",tool="metered__append"}`:                     1,
		`airlock_tool_calls_total{outcome="denied",tool="metered__put"}`:                    1,
		`airlock_tool_attempts_total{result="ok",tool="metered__echo"}`:                     2,
		`airlock_tool_attempts_total{result="ok",tool="metered__append"}`:                   1,
		`airlock_tool_attempts_total{result="tool_error",tool="metered__fail"}`:             1,
		`airlock_tool_attempts_total{result="ok",tool="metered__put"}`:                      0, // never ran
		`airlock_tool_call_duration_seconds_count{tool="metered__echo"}`:                    2,
		`airlock_tool_call_duration_seconds_count{tool="metered__append"}`:                  1,
		`airlock_tool_call_duration_seconds_count{tool="metered__fail"}`:                    1,
		`airlock_compensation_attempts_total{result="tool_error",tool="metered__fail"}`:     1,
		`airlock_rollbacks_failed_total`:                                                    1,
		`airlock_policy_decisions_total{check="default",effect="allow",rule=""}`:            2,
		`airlock_policy_decisions_total{check="rule",effect="deny",rule="no-forbidden"}`:    1,
		`airlock_policy_decisions_total{check="default",effect="require_approval",rule=""}`: 3, // append twice: judged again once approved
		`airlock_approval_wait_seconds_count{outcome="approved"}`:                           1,
		`airlock_approval_wait_seconds_count{outcome="expired"}`:                            1,
		`airlock_approval_wait_seconds_sum{outcome="expired"}`:                              2, // from request to expiry: put's timeout
		`airlock_auth_failures_total{status="401"}`:                                         1,
	}
	got := map[string]float64{}
	for k := range want {
		got[k] = after[k] - before[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metric deltas (-want +got):\n%s", diff)
	}
	if w := after[`airlock_approval_wait_seconds_sum{outcome="approved"}`] - before[`airlock_approval_wait_seconds_sum{outcome="approved"}`]; w <= 0 || w > 120 {
		t.Errorf("the approved request waited %vs by the histogram; want the seconds until bob decided", w)
	}
	// The Temporal SDK's own series, through the adapter.
	var sdkRequests, sdkActivities float64
	for k, v := range after {
		if strings.HasPrefix(k, "temporal_request{") && strings.Contains(k, `namespace="`+ns+`"`) {
			sdkRequests += v
		}
		// Tool calls run as CallTool activities, or, for auto-allowed
		// idempotent low-risk tools (echo here), inside the fast path's
		// DecideAndCall local activity.
		if (strings.HasPrefix(k, "temporal_activity_execution_latency_count{") && strings.Contains(k, `activity_type="CallTool"`) ||
			strings.HasPrefix(k, "temporal_local_activity_execution_latency_count{") && strings.Contains(k, `activity_type="DecideAndCall"`)) &&
			strings.Contains(k, `namespace="`+ns+`"`) {
			sdkActivities += v
		}
	}
	if sdkRequests == 0 || sdkActivities < 4 {
		t.Errorf("Temporal SDK metrics: %v requests, %v CallTool and DecideAndCall executions in namespace %s; want some, and at least 4", sdkRequests, sdkActivities, ns)
	}

	// One audit line per decision point; arguments only as hashes.
	var lines []string
	waitFor(t, "the audit lines", 30*time.Second, func() bool {
		lines = auditSummary(t, auditPath)
		return len(lines) >= 18
	})
	wantLines := []string{
		"policy_decision m-alice metered__echo allow",
		"policy_decision m-bob metered__echo allow",
		"call_executed m-alice metered__echo ok",
		"call_executed m-bob metered__echo ok",
		"policy_decision m-alice metered__echo deny no-forbidden",
		"policy_decision m-alice metered__append require_approval",
		"approval_requested m-alice metered__append ops",
		"approval_refused m-alice alice approve cli",
		"approval_decided m-alice bob approve cli approved",
		"approval_closed m-alice metered__append approved bob",
		"policy_decision m-alice metered__append require_approval", // judged again before it runs
		"call_executed m-alice metered__append ok",
		"policy_decision m-alice metered__put require_approval",
		"approval_requested m-alice metered__put ops",
		"approval_closed m-alice metered__put expired",
		"compensation_run m-alice metered__fail tool_error",
		"rollback_failed m-alice metered__append",
		"auth_failed 401",
	}
	slices.Sort(wantLines)
	if diff := cmp.Diff(wantLines, lines); diff != "" {
		t.Errorf("audit lines (-want +got):\n%s", diff)
	}
	raw, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("SECRET")) {
		t.Errorf("the audit log holds an argument value:\n%s", raw)
	}
}

type mcpSession struct {
	s   *mcp.ClientSession
	who string
}

// newMeteredStack is newStack's shape with the audit log wired into the
// worker, the gateway (which authenticates alice and bob; bob is ops) and
// the returned path, and the client reporting the SDK's metrics.
func newMeteredStack(t *testing.T) (*stack, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	bin := buildBinary(t, "./integration/testupstream")
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "metered.yaml"), []byte("server:\n  name: metered\n  stdio:\n    command: "+bin+
		"\n    env: {SIDE_EFFECT_LOG: "+filepath.Join(t.TempDir(), "effects.log")+"}\ntools:\n"+meteredTools))
	if err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	audit := openAudit(t, auditPath)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	ctx := context.Background()

	srv := sharedTemporal(t)
	c, err := client.Dial(client.Options{HostPort: srv.HostPort(), Namespace: srv.Namespace(), Logger: quiet{}, MetricsHandler: metrics.SDK})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s := &stack{srv: srv, client: c, log: log}
	var gwMu sync.Mutex

	servers := []manifests.Server{m.Server}
	ms := []*manifests.Manifest{m}
	s.pool = upstream.New(servers, upstream.Options{Logger: &log, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second,
		OnToolsChanged: func(string) {
			gwMu.Lock()
			defer gwMu.Unlock()
			if s.gw != nil {
				s.gw.Refresh()
			}
		}})
	pol, err := policy.Compile(policy.Config{Rules: []policy.Rule{{Name: "no-forbidden", When: `args.?text.orValue("") == "forbidden"`,
		Effect: api.Deny, Reason: "forbidden text"}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := allGrants(nil, "alice", "bob") // keys "alice-key" and "bob-key"
	gwMu.Lock()
	s.gw = gateway.New(gateway.Options{Temporal: c, Manifests: ms, Upstreams: s.pool, Directory: dir, Policy: pol,
		IdleTimeout: time.Hour, InlineWait: 2 * time.Minute, Logger: log, Audit: audit})
	gwMu.Unlock()
	s.pool.Start(ctx)
	t.Cleanup(func() { _ = s.pool.Close() })
	s.worker = worker.New(c, &activities.Activities{Tools: s.pool, Policy: pol, Groups: map[string][]string{"ops": {"alice", "bob"}},
		Catalog: activities.NewCatalog(ms, servers, s.pool, false), Audit: audit}, worker.Options{})
	if err := s.worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.worker.Stop)
	s.gw.Refresh()
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.gw.Handler())
	s.http = httptest.NewServer(mux)
	t.Cleanup(s.http.Close)
	s.url = s.http.URL + "/mcp"
	return s, auditPath
}

func openAudit(t *testing.T, path string) *auditstream.Log {
	t.Helper()
	l, c, err := auditstream.Open(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return l
}

// scrapeMetrics reads the process's /metrics as series -> value, each
// series as Prometheus writes it (labels sorted by name).
func scrapeMetrics(t *testing.T) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	metrics.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics: bad line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// auditSummary reads the audit log, checks that every line is an audit
// line with a time, and sums each up as "event task ..." with the fields
// that tell the events of this test apart, sorted.
func auditSummary(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e map[string]any
		if err := jsonUnmarshal(line, &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		str := func(k string) string { v, _ := e[k].(string); return v }
		if e["audit"] != true {
			t.Errorf("audit line without audit: true: %s", line)
		}
		if _, err := time.Parse(time.RFC3339Nano, str("ts")); err != nil {
			t.Errorf("audit line with a bad ts: %s", line)
		}
		f := []string{str("event"), str("task")}
		switch str("event") {
		case auditstream.EventDecision:
			f = append(f, str("tool"), str("effect"), str("rule"))
			if str("args_sha256") == "" || str("policy_version") == "" || str("principal") == "" {
				t.Errorf("decision line without hash, policy version or principal: %s", line)
			}
		case auditstream.EventCall, auditstream.EventCompensation:
			f = append(f, str("tool"), str("result"))
		case auditstream.EventApprovalRequested:
			f = append(f, str("tool"), str("group"))
		case auditstream.EventApprovalDecided:
			f = append(f, str("approver"), str("decision"), str("via"), str("state"))
		case auditstream.EventApprovalRefused:
			f = append(f, str("approver"), str("decision"), str("via"))
		case auditstream.EventApprovalClosed:
			var who []string
			for _, a := range e["approvers"].([]any) {
				who = append(who, a.(string))
			}
			f = append(f, str("tool"), str("outcome"), strings.Join(who, ","))
		case auditstream.EventRollbackFailed:
			for _, tool := range e["tools"].([]any) {
				f = append(f, tool.(string))
			}
		case auditstream.EventAuthFailed:
			f = []string{str("event"), strconv.Itoa(int(e["status"].(float64)))}
			if str("reason") == "" || str("path") != "/mcp" {
				t.Errorf("auth line without reason or path: %s", line)
			}
		}
		out = append(out, strings.Join(slices.DeleteFunc(f, func(s string) bool { return s == "" }), " "))
	}
	slices.Sort(out)
	return out
}

// checkTaskFilters runs `airlock tasks list` with each set of filters
// against the stack's Temporal until it lists exactly the wanted tasks
// (visibility lags a little).
func checkTaskFilters(t *testing.T, s *stack, cases map[string][]string) {
	t.Helper()
	bin := buildBinary(t, "./cmd/airlock")
	for filters, want := range cases {
		waitUntil(t, "airlock tasks list "+filters+" to list "+strings.Join(want, " "), 30*time.Second, func() error {
			args := append([]string{"tasks", "list", "--temporal-address", s.srv.HostPort(), "--namespace", s.srv.Namespace()}, strings.Fields(filters)...)
			out, err := exec.Command(bin, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("airlock tasks list %s: %v\n%s", filters, err, out)
			}
			var got []string
			for _, line := range strings.Split(string(out), "\n")[1:] {
				if f := strings.Fields(line); len(f) > 0 {
					got = append(got, f[0])
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("listed %v, want %v\n%s", got, want, out)
			}
			return nil
		})
	}
}
