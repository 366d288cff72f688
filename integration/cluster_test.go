package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/worker"
	"github.com/airlock-run/airlock/workflows"
)

// The cluster tests run airlock the way deploy/README.md deploys it: a
// Temporal server v1.32.1 (built from the module in go.mod) on PostgreSQL
// 15, its namespace and search attributes created by the README's own
// `temporal operator` commands, and airlock's roles as separate processes
// (2 gateways behind a round-robin proxy, 2 workers, 1 approver).

// sessionAffinity, when true, makes the test's load balancer keep each MCP
// session on the gateway that created it (what deploy/README.md asked for
// before session IDs were signed). It is false: every request is spread
// round-robin, session or not, and the test fails unless some session's
// requests were answered by a gateway that did not create it.
const sessionAffinity = false

// clusterSessionKey is the session key the gateways share
// (gateway.session_key_env's default variable, AIRLOCK_SESSION_KEY).
const clusterSessionKey = "cluster-test-session-key-0123456789abcdef"

// clusterNamespace is the namespace deploy/README.md creates.
const clusterNamespace = "airlock"

// TestClusterKillBattery brings up the cluster, then runs 16 agent sessions
// making non-idempotent side-effecting calls (each with an idempotency key)
// through two gateways and two workers while a gateway, a worker and the
// approver are killed with SIGKILL at random moments and restarted; one
// call waits for approval meanwhile and is approved with a Slack click on
// the restarted approver. Every call must be answered, none lost, none run
// twice (a call in flight on the killed worker may end `unknown`: counted),
// and every task's history must replay against the current workflow code.
// A program (code mode) waits for approval through every kill, then runs
// its other calls: its retry by key gets its result, each call ran once.
func TestClusterKillBattery(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("PostgreSQL + Temporal cluster test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	upstreamBin := buildBinary(t, "./integration/testupstream")
	bins := testenv.BuildTemporal(t)

	t0 := time.Now()
	pg := testenv.StartPostgres(t)
	tPG := time.Since(t0)
	srv := testenv.StartTemporal(t, pg, bins, readmeSchemaCommands(t))
	tTemporal := time.Since(t0)
	ops := runREADMEOperatorCommands(t, srv.HostPort, "")
	tc := dialTest(t, srv.HostPort, clusterNamespace)
	waitSearchAttributes(t, tc)
	bringUp := time.Since(t0)
	t.Logf("cluster bring-up: %s (PostgreSQL %s, Temporal %s serving, README's %d temporal operator commands run, search attributes usable)",
		bringUp.Round(time.Millisecond), tPG.Round(time.Millisecond), tTemporal.Round(time.Millisecond), len(ops))

	c := newClusterRoles(t, bin, upstreamBin, srv.HostPort)
	t1 := time.Now()
	c.startAll(t)
	probe := c.newAgent("battery-probe", clusterSessionProtocol)
	if err := probe.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitTools(t, probe.cs, "counter__append", "counter__put")
	if out := probe.mustAppend(t, "probe"); out != outcomeOK {
		t.Fatalf("first call through the cluster: %s", out)
	}
	t.Logf("roles up (2 gateways, 2 workers, 1 approver) and the first call answered: %s", time.Since(t1).Round(time.Millisecond))
	// The README's task-queue check: both workers poll.
	runREADMEOperatorCommands(t, srv.HostPort, "task-queue")

	// The call that waits for approval, made before the load.
	appr := c.newAgent("battery-approval", clusterSessionProtocol)
	if err := appr.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	pend, err := appr.call(context.Background(), "counter__put", map[string]any{"key": "approved-1"}, "approved-1")
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := pend.StructuredContent.(map[string]any)
	reqID, _ := sc["approval_request"].(string)
	if pend.IsError || reqID == "" {
		t.Fatalf("call needing approval: isError=%v %q, want a pending result", pend.IsError, text(pend))
	}
	post := c.slack.waitPost(t, 1)
	button := buttonsOf(t, post)
	if button.request != reqID {
		t.Fatalf("Slack post for %q, want %q", button.request, reqID)
	}

	// A program (code mode) whose first call waits for approval through
	// the kills; its other calls run once it is approved, after them.
	prog := c.newAgent("battery-program", clusterSessionProtocol)
	if err := prog.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	const progSrc = `counter.put(key="prog-approved")
for i in range(3):
    counter.append(key="prog-%d" % i)
result = "done"
`
	runProg := func() *mcp.CallToolResult {
		res, err := prog.call(context.Background(), gateway.ToolRunProgram, map[string]any{"source": progSrc, "key": "battery-prog"}, "")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := runProg(); res.IsError || !strings.Contains(text(res), "waits for approval") {
		t.Fatalf("the program before approval: isError=%v %q, want it waiting for approval", res.IsError, text(res))
	}
	progButton := buttonsOf(t, c.slack.waitPost(t, 2))

	// The load, and the kills: 16 agents, 8 of them on MCP sessions.
	const sessions = 16
	const loadFor = 26 * time.Second
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("kill schedule seed %d", seed)
	loadStart := time.Now()
	stop := make(chan struct{})
	results := make(chan agentReport, sessions)
	for i := range sessions {
		// Half the agents hold MCP sessions, half are stateless.
		proto := ""
		if i%2 == 0 {
			proto = clusterSessionProtocol
		}
		a := c.newAgent(fmt.Sprintf("battery-agent-%02d", i), proto)
		go func() { results <- a.run(stop, int64(i)) }()
	}
	type kill struct {
		role     *roleProc
		at, back time.Duration
		when     time.Time
	}
	// One kill at a time, each at a random moment of its window, the
	// worker's last: a call in flight on it waits for its heartbeat timeout
	// (10 s).
	window := func(from, width time.Duration) time.Duration {
		return from + time.Duration(rng.Int64N(int64(width)))
	}
	kills := []kill{
		{c.approver, window(2*time.Second, 3*time.Second), 0, time.Time{}},
		{c.gateways[rng.IntN(2)], window(7*time.Second, 4*time.Second), 0, time.Time{}},
		{c.workers[rng.IntN(2)], window(14*time.Second, 4*time.Second), 0, time.Time{}},
	}
	for i := range kills {
		k := &kills[i]
		k.back = 500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))
		time.Sleep(time.Until(loadStart.Add(k.at))) // the kill's time in the load, not a wait for a condition
		k.when = time.Now()
		c.killAndRestart(t, k.role, k.back)
	}

	// Approve through the restarted approver (a signed Slack click).
	clickAt(t, c.approver.base, "U_BOB", "approve", button)
	waitFor(t, "the approval to be recorded", 30*time.Second, func() bool {
		ar, err := approver.Lookup(context.Background(), tc, reqID)
		return err == nil && ar.State == api.ApprovalApproved
	})
	// And the program's call, after the kills.
	clickAt(t, c.approver.base, "U_BOB", "approve", progButton)

	time.Sleep(time.Until(loadStart.Add(loadFor))) // the load runs for loadFor
	close(stop)
	var total agentReport
	for range sessions {
		r := <-results
		total.add(r)
	}
	loadTime := time.Since(loadStart)

	// The approved call's result, collected with airlock_await.
	var approved *mcp.CallToolResult
	waitFor(t, "the approved call's result", 60*time.Second, func() bool {
		res, err := appr.call(context.Background(), gateway.ToolAwait, map[string]any{"call": "k-approved-1"}, "")
		if err != nil || res.IsError || strings.Contains(text(res), "still running") || strings.Contains(text(res), "waiting") {
			return false
		}
		approved = res
		return true
	})
	if !strings.Contains(mustJSON(t, approved.StructuredContent), `"count":1`) {
		t.Errorf("approved call's result: %s", text(approved))
	}
	// The program's result: the agent's retry with the same key.
	waitFor(t, "the program's result", 60*time.Second, func() bool {
		res := runProg()
		sc, _ := res.StructuredContent.(map[string]any)
		return sc["outcome"] == "ok" && strings.Contains(text(res), "done")
	})

	// Every call answered; none lost; none run twice.
	for _, f := range total.failures {
		t.Errorf("call not answered properly: %s", f)
	}
	effects := effectCounts(t, c.effects)
	dups := 0
	for line, n := range effects {
		if n > 1 {
			dups++
			t.Errorf("side effect %q happened %d times", line, n)
		}
	}
	for _, k := range total.ok {
		if effects["append "+k] != 1 {
			t.Errorf("call %s answered ok but its side effect happened %d times", k, effects["append "+k])
		}
	}
	for _, k := range total.unknown {
		if effects["append "+k] > 1 {
			t.Errorf("call %s answered unknown and its side effect happened %d times", k, effects["append "+k])
		}
	}
	answered := map[string]bool{"append probe": true, "put approved-1": true, "put prog-approved": true,
		"append prog-0": true, "append prog-1": true, "append prog-2": true}
	for _, line := range []string{"put prog-approved", "append prog-0", "append prog-1", "append prog-2"} {
		if n := effects[line]; n != 1 {
			t.Errorf("the program's %q ran %d times, want once", line, n)
		}
	}
	for _, k := range append(append([]string{}, total.ok...), total.unknown...) {
		answered["append "+k] = true
	}
	for line := range effects {
		if !answered[line] {
			t.Errorf("side effect %q of a call that was never answered", line)
		}
	}
	if n := effects["put approved-1"]; n != 1 {
		t.Errorf("the approved call ran %d times, want 1", n)
	}

	// Every task's history replays against the current code.
	replayed := replayNamespace(t, tc)

	calls := len(total.ok) + len(total.unknown)
	t.Logf("kill battery: %d sessions, %d calls answered in %s (%.1f calls/s through 2 gateways + 2 workers on PostgreSQL), %d unknown (in flight on the killed worker), %d failed, %d duplicate side effects",
		sessions, calls, loadTime.Round(time.Millisecond), float64(calls)/loadTime.Seconds(), len(total.unknown), len(total.failures), dups)
	c.proxy.mu.Lock()
	served, crossed := append([]int{}, c.proxy.served...), c.proxy.crossed
	c.proxy.mu.Unlock()
	t.Logf("load balancer: requests answered per gateway %v; %d requests of a session answered by the gateway that did not create it; %d calls failed in transport and were sent again (%d new sessions), answered at most %s after the failure",
		served, crossed, total.transportErrors, total.reconnects, total.afterErr.Round(time.Millisecond))
	if !sessionAffinity && crossed == 0 {
		t.Errorf("no session was served by a second gateway: the round-robin did not spread sessions")
	}
	// Throughput before the gateway kill (the approver's does not touch calls).
	steady := 0
	for _, sp := range total.spans {
		if sp[1].Before(kills[1].when) {
			steady++
		}
	}
	t.Logf("before the gateway kill: %d calls in %s, %.1f calls/s", steady, kills[1].when.Sub(loadStart).Round(time.Millisecond),
		float64(steady)/kills[1].when.Sub(loadStart).Seconds())
	for _, k := range kills {
		rec, n := total.recovery(k.when)
		t.Logf("kill -9 %s at +%s, restarted after %s: the %d calls in flight then were all answered %s after the kill",
			k.role.name, k.at.Round(time.Millisecond), k.back.Round(time.Millisecond), n, rec.Round(time.Millisecond))
	}
	t.Logf("time to recover: longest a call waited for its answer %s (median call %s); longest gap between a session's answers %s",
		total.slowest.Round(time.Millisecond), total.median().Round(time.Millisecond), total.longestGap.Round(time.Millisecond))
	t.Logf("histories replayed: %d runs", replayed)
	// What each role used, for deploy/kubernetes' resource requests: the
	// peak resident memory and the CPU per second of load of the processes
	// running now (a restarted one has lived part of the battery).
	for _, r := range append(append(append([]*roleProc{}, c.gateways...), c.workers...), c.approver) {
		r.mu.Lock()
		p := r.p
		r.mu.Unlock()
		if use, err := procUsage(p.cmd.Process.Pid); err == nil {
			t.Logf("resources: %s peak RSS %d MiB, CPU %.2f s (%.0f millicores over the %s of load)", r.name, use.peakRSS>>20,
				use.cpu.Seconds(), 1000*use.cpu.Seconds()/loadTime.Seconds(), loadTime.Round(time.Second))
		}
	}
	if calls < sessions {
		t.Errorf("only %d calls answered: the load did not run", calls)
	}

	t.Run("deploy README commands", func(t *testing.T) {
		runREADMEAirlockCommands(t, c, "battery-agent-01")
	})
}

// runREADMEAirlockCommands runs deploy/README.md's remaining commands (the
// roles and the temporal commands ran at bring-up) against the cluster:
// every `airlock` command, on task for TASK_ID, in the README's order,
// from a directory holding the configuration and a plans/nightly.yaml,
// with the environment of the README's airlock.env lines; each must exit
// 0. The host installation commands (install, systemctl, journalctl) need
// a systemd host, and docker, kubectl and helm are not installed here:
// those are not run, and listed in the log.
func runREADMEAirlockCommands(t *testing.T, c *clusterRoles, task string) {
	if err := os.MkdirAll(filepath.Join(c.dir, "plans"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(c.dir, "plans", "nightly.yaml"), `name: nightly
principal: tester
steps:
  - id: count
    tool: counter__append
    args: {key: nightly}
`)
	env := os.Environ()
	var run, notRun []string
	for _, line := range readmeCommands(t, "") {
		word, _, _ := strings.Cut(line, " ")
		switch {
		case envLine.MatchString(line): // airlock.env
			env = append(env, c.onThisHost(line))
		case word == "temporal" || word == "temporal-sql-tool" || strings.HasPrefix(line, "export SQL_"),
			strings.HasPrefix(line, "airlock worker "), strings.HasPrefix(line, "airlock gateway "), strings.HasPrefix(line, "airlock approver "):
			// ran at bring-up
		case word == "install" || word == "systemctl" || word == "journalctl":
			notRun = append(notRun, line) // a systemd host
		case word == "docker" || word == "kubectl" || word == "helm",
			word == "cd" && (strings.Contains(line, "docker ") || strings.Contains(line, "kubectl ")):
			notRun = append(notRun, line) // not installed here; deploy/'s own tests parse those files
		case word == "podman" || strings.HasPrefix(line, "go run ./deploy/image "):
			notRun = append(notRun, line) // the image: deploy/image's tests build it and run it with podman
		case word == "curl":
			// A probe of a role's endpoint: asked of the first gateway.
			u := strings.Fields(line)[len(strings.Fields(line))-1]
			path := u[strings.Index(u, "//")+2:]
			path = path[strings.Index(path, "/"):]
			resp, err := http.Get(c.gateways[0].base + path)
			if err != nil {
				t.Errorf("deploy/README.md: %q: %v", line, err)
			} else {
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("deploy/README.md: %q: HTTP %d from %s", line, resp.StatusCode, c.gateways[0].base+path)
				}
			}
			run = append(run, line)
		case word == "openssl":
			if out, err := exec.Command("sh", "-c", line).CombinedOutput(); err != nil {
				t.Errorf("deploy/README.md: %q: %v\n%s", line, err, out)
			}
			run = append(run, line)
		case word == "airlock":
			args := strings.Fields(strings.ReplaceAll(c.onThisHost(line), "TASK_ID", task))[1:]
			cmd := exec.Command(c.bin, args...)
			cmd.Dir, cmd.Env = c.dir, env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("deploy/README.md: %q: %v\n%s", line, err, out)
			}
			run = append(run, line)
		default:
			t.Errorf("deploy/README.md: %q: this test does not know how to run %q: teach runREADMEAirlockCommands", line, word)
		}
	}
	t.Logf("deploy/README.md: %d commands run against the cluster; not run (a systemd host, docker/kubectl/helm, or the image, which deploy/image tests): %q", len(run), notRun)
}

// clusterRoles are airlock's roles as processes, and what they share.
type clusterRoles struct {
	bin, cfg, dir, effects string
	hostPort               string
	slack                  *fakeSlackAPI
	gateways, workers      []*roleProc
	approver               *roleProc
	proxy                  *clusterLB
	url                    string // the proxy's /mcp
}

// roleProc is one role process, restartable with the same arguments.
type roleProc struct {
	name string
	args []string
	base string // http://listen, for roles with a listener
	mu   sync.Mutex
	p    *devProcess
}

func newClusterRoles(t *testing.T, bin, upstreamBin, hostPort string) *clusterRoles {
	dir := t.TempDir()
	c := &clusterRoles{bin: bin, dir: dir, hostPort: hostPort, effects: newEffectsLog(t), slack: newFakeSlackAPI(t)}
	writeFile(t, filepath.Join(dir, "counter.yaml"), fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env: {SIDE_EFFECT_LOG: %s}
%stools:
  append: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false, timeout: 60s, heartbeat_timeout: 10s}
  put:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: true
    approval: {group: ops, timeout: 30m}
`, upstreamBin, c.effects, effectsSandbox(c.effects)))
	c.cfg = filepath.Join(dir, "airlock.yaml")
	writeFile(t, c.cfg, `manifests: [counter.yaml]
temporal: {namespace: `+clusterNamespace+`}
approvals: {inline_wait: 2s}
principals:
  - {name: tester, roles: [all], api_key_sha256: [`+identity.HashKey(testKey)+`]}
  - {name: bob, roles: [all], api_key_sha256: [`+identity.HashKey("bob-key")+`], slack_user_id: U_BOB}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
approver_groups:
  ops: {members: [bob], slack_channel: C_OPS}
slack:
  api_url: `+c.slack.srv.URL+`/
`)
	// The roles run deploy/README.md's commands, on this host's paths.
	common := func(role, data string) []string {
		args := []string{role, "--temporal-address", hostPort, "--namespace", clusterNamespace, "--config", c.cfg, "--log-format", "json"}
		if lines := readmeCommands(t, "airlock "+role+" "); len(lines) > 0 {
			args = strings.Fields(c.onThisHost(lines[0]))[1:]
		} else {
			t.Logf("deploy/README.md has no `airlock %s` command; running %s with %v", role, role, args)
		}
		// Each replica gets its own data dir and listener here.
		var out []string
		for i := 0; i < len(args); i++ {
			if (args[i] == "--data-dir" || args[i] == "--listen") && i+1 < len(args) {
				i++
				continue
			}
			out = append(out, args[i])
		}
		return append(out, "--data-dir", filepath.Join(dir, data))
	}
	var backends []string
	for i := 1; i <= 2; i++ {
		listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		c.gateways = append(c.gateways, &roleProc{name: fmt.Sprintf("gateway-%d", i), base: "http://" + listen,
			args: append(common("gateway", fmt.Sprintf("gateway-%d", i)), "--listen", listen)})
		backends = append(backends, "http://"+listen)
		c.workers = append(c.workers, &roleProc{name: fmt.Sprintf("worker-%d", i),
			args: append(common("worker", fmt.Sprintf("worker-%d", i)), "--metrics-listen", "off")})
	}
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.approver = &roleProc{name: "approver", base: "http://" + listen,
		args: append(common("approver", "approver"), "--listen", listen)}
	c.proxy = newClusterLB(backends)
	c.url = httpServer(t, c.proxy) + "/mcp"
	return c
}

// onThisHost rewrites a deploy/README.md command for this test's cluster
// and files.
func (c *clusterRoles) onThisHost(line string) string {
	return strings.NewReplacer("temporal-frontend.internal:7233", c.hostPort, "/etc/airlock/airlock.yaml", c.cfg).Replace(line)
}

func (c *clusterRoles) start(t *testing.T, r *roleProc) {
	t.Helper()
	cmd := exec.Command(c.bin, r.args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS=", "SLACK_BOT_TOKEN=xoxb-cluster-test", "SLACK_SIGNING_SECRET="+slackSecret,
		// Every gateway replica signs and checks session IDs with the same key.
		"AIRLOCK_SESSION_KEY="+clusterSessionKey)
	out := &lockedWriter{w: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = time.Second
	p := startProc(t, cmd, out)
	r.mu.Lock()
	r.p = p
	r.mu.Unlock()
	if r.base != "" {
		p.waitHealthy(t, r.base)
	}
}

func (c *clusterRoles) startAll(t *testing.T) {
	for _, r := range append(append([]*roleProc{c.approver}, c.workers...), c.gateways...) {
		c.start(t, r)
	}
}

// killAndRestart kills r with SIGKILL and starts it again after pause.
func (c *clusterRoles) killAndRestart(t *testing.T, r *roleProc, pause time.Duration) {
	t.Helper()
	r.mu.Lock()
	p := r.p
	r.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	time.Sleep(pause) // the killed role's downtime, which the test is about
	c.start(t, r)
}

// clusterAgent is an MCP client on its own task, reconnecting through the
// load balancer (with the Airlock-Task header, to reattach) whenever its
// session fails, and retrying the call with the same idempotency key.
type clusterAgent struct {
	c        *clusterRoles
	task     string
	protocol string // "": the client's latest (2026-07-28, stateless); else a session-based revision
	cs       *mcp.ClientSession
	recs     int // sessions replaced
	errs     int // calls that failed in transport (then sent again)
	// afterErr is the longest a call took to be answered after its first
	// transport failure.
	afterErr time.Duration
}

// clusterSessionProtocol is the MCP revision of the agents that open sessions
// (Mcp-Session-Id); the others speak 2026-07-28, which has none.
const clusterSessionProtocol = "2025-11-25"

func (c *clusterRoles) newAgent(task, protocol string) *clusterAgent {
	return &clusterAgent{c: c, task: task, protocol: protocol}
}

func (a *clusterAgent) connect(ctx context.Context) error {
	hc := newHeaderClient(map[string]string{"Authorization": "Bearer " + testKey, gateway.HeaderTask: a.task})
	cl := mcp.NewClient(&mcp.Implementation{Name: "cluster-agent", Version: "1"}, nil)
	var err error
	// An agent's own retries (not the test's waiting), with a backoff.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		var opts *mcp.ClientSessionOptions
		if a.protocol != "" {
			opts = &mcp.ClientSessionOptions{ProtocolVersion: a.protocol}
		}
		a.cs, err = cl.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: a.c.url, HTTPClient: hc, MaxRetries: -1}, opts)
		cancel()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("connecting %s for 60s: %w", a.task, err)
}

// call calls tool until it is answered: a failed session is replaced and
// the call sent again under the same idempotency key; a "still running"
// answer is collected by calling again.
func (a *clusterAgent) call(ctx context.Context, tool string, args map[string]any, key string) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if key != "" {
		p.Meta = mcp.Meta{gateway.MetaIdempotencyKey: key}
	}
	var lastErr error
	var firstErr time.Time
	defer func() {
		if !firstErr.IsZero() {
			a.afterErr = max(a.afterErr, time.Since(firstErr))
		}
	}()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
		if a.cs == nil {
			if err := a.connect(ctx); err != nil {
				return nil, err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		res, err := a.cs.CallTool(cctx, p)
		cancel()
		if err == nil && key != "" && !res.IsError && strings.Contains(text(res), "is still running in task") {
			continue
		}
		if err == nil {
			return res, nil
		}
		lastErr = err
		if firstErr.IsZero() {
			firstErr = time.Now()
		}
		a.errs++
		if !sessionAffinity && a.errs%2 == 1 {
			// Any replica serves the session: send the call again on it.
			time.Sleep(50 * time.Millisecond) // backoff before a re-send
			continue
		}
		_ = a.cs.Close()
		a.cs = nil
		a.recs++
		time.Sleep(50 * time.Millisecond) // backoff before a reconnect
	}
	return nil, fmt.Errorf("%s %s not answered in 3 minutes: %w", tool, key, lastErr)
}

type outcome string

const (
	outcomeOK      outcome = "ok"
	outcomeUnknown outcome = "unknown"
)

// classify reads an append result: ok (ran once), unknown (in flight on a
// worker that died; not re-run), or what else it said.
func classify(res *mcp.CallToolResult) outcome {
	switch {
	case appendCount(res) == 1 || alreadyRan(res):
		return outcomeOK
	case res.IsError && strings.Contains(text(res), "not idempotent"):
		return outcomeUnknown
	}
	return outcome(fmt.Sprintf("isError=%v %q", res.IsError, text(res)))
}

func (a *clusterAgent) mustAppend(t *testing.T, key string) outcome {
	t.Helper()
	res, err := a.call(context.Background(), "counter__append", map[string]any{"key": key}, key)
	if err != nil {
		t.Fatal(err)
	}
	return classify(res)
}

type agentReport struct {
	ok, unknown, failures []string
	reconnects            int
	transportErrors       int
	afterErr              time.Duration
	durations             []time.Duration
	spans                 [][2]time.Time // each call's start and answer
	slowest, longestGap   time.Duration
}

// recovery is how long after at the last call in flight at that moment was
// answered, and how many were in flight.
func (r *agentReport) recovery(at time.Time) (time.Duration, int) {
	var d time.Duration
	n := 0
	for _, sp := range r.spans {
		if !sp[0].After(at) && sp[1].After(at) {
			n++
			d = max(d, sp[1].Sub(at))
		}
	}
	return d, n
}

func (r *agentReport) add(o agentReport) {
	r.ok = append(r.ok, o.ok...)
	r.unknown = append(r.unknown, o.unknown...)
	r.failures = append(r.failures, o.failures...)
	r.reconnects += o.reconnects
	r.transportErrors += o.transportErrors
	r.afterErr = max(r.afterErr, o.afterErr)
	r.durations = append(r.durations, o.durations...)
	r.spans = append(r.spans, o.spans...)
	r.slowest = max(r.slowest, o.slowest)
	r.longestGap = max(r.longestGap, o.longestGap)
}

func (r *agentReport) median() time.Duration {
	if len(r.durations) == 0 {
		return 0
	}
	d := append([]time.Duration{}, r.durations...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// run makes append calls, each with its own key and idempotency key and a
// random duration on the upstream (0–300 ms), until stop.
func (a *clusterAgent) run(stop <-chan struct{}, seed int64) agentReport {
	var r agentReport
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	last := time.Now()
	for i := 0; ; i++ {
		select {
		case <-stop:
			if a.cs != nil {
				_ = a.cs.Close()
			}
			r.reconnects, r.transportErrors, r.afterErr = a.recs, a.errs, a.afterErr
			return r
		default:
		}
		key := fmt.Sprintf("%s-%03d", a.task, i)
		start := time.Now()
		res, err := a.call(context.Background(), "counter__append", map[string]any{"key": key, "sleep_ms": rng.IntN(300)}, key)
		now := time.Now()
		r.durations = append(r.durations, now.Sub(start))
		r.spans = append(r.spans, [2]time.Time{start, now})
		r.slowest = max(r.slowest, now.Sub(start))
		r.longestGap = max(r.longestGap, now.Sub(last))
		last = now
		if err != nil {
			r.failures = append(r.failures, err.Error())
			continue
		}
		switch o := classify(res); o {
		case outcomeOK:
			r.ok = append(r.ok, key)
		case outcomeUnknown:
			r.unknown = append(r.unknown, key)
		default:
			r.failures = append(r.failures, key+": "+string(o))
		}
	}
}

// clusterLB is the load balancer: new sessions round-robin over the
// gateways; with sessionAffinity, a session's later requests go to the
// gateway that created it. A gateway that refuses the connection is
// skipped (the request never reached it).
type clusterLB struct {
	backends []string
	mu       sync.Mutex
	next     int
	sticky   map[string]int // session ID -> the gateway that created it
	served   []int          // requests answered per gateway
	crossed  int            // requests of a session answered by a gateway that did not create it
}

func newClusterLB(backends []string) *clusterLB {
	return &clusterLB{backends: backends, sticky: map[string]int{}, served: make([]int, len(backends))}
}

func (p *clusterLB) order(session string) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.sticky[session]; ok && sessionAffinity && session != "" {
		return []int{i}
	}
	first := p.next
	p.next = (p.next + 1) % len(p.backends)
	var out []int
	for k := range p.backends {
		out = append(out, (first+k)%len(p.backends))
	}
	return out
}

func (p *clusterLB) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, i := range p.order(r.Header.Get("Mcp-Session-Id")) {
		out, err := http.NewRequestWithContext(r.Context(), r.Method, p.backends[i]+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(out)
		if errors.Is(err, syscall.ECONNREFUSED) {
			continue
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		p.mu.Lock()
		p.served[i]++
		if s := resp.Header.Get("Mcp-Session-Id"); s != "" && r.Header.Get("Mcp-Session-Id") == "" {
			p.sticky[s] = i
		}
		if at, ok := p.sticky[r.Header.Get("Mcp-Session-Id")]; ok && at != i && resp.StatusCode < 300 {
			p.crossed++
		}
		p.mu.Unlock()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		f, _ := w.(http.Flusher)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					break
				}
				if f != nil {
					f.Flush()
				}
			}
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		return
	}
	http.Error(w, "no gateway accepts connections", http.StatusBadGateway)
}

// readmeCommands returns the shell commands of deploy/README.md's sh
// blocks that start with prefix (continuation lines joined, comments
// dropped).
func readmeCommands(t *testing.T, prefix string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(), "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	in, cont := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "```"):
			in = !in && (line == "```sh" || line == "```bash")
			continue
		case !in:
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cont += strings.TrimSpace(s) + " "
			continue
		}
		line, cont = cont+line, ""
		if strings.HasPrefix(line, prefix) {
			cmds = append(cmds, line)
		}
	}
	return cmds
}

// readmeSchemaCommands are deploy/README.md's temporal-sql-tool commands,
// as argument lists; the README sets the connection in the tool's SQL_*
// variables, which the test sets to its own PostgreSQL.
func readmeSchemaCommands(t *testing.T) [][]string {
	t.Helper()
	var out [][]string
	for _, line := range readmeCommands(t, "temporal-sql-tool ") {
		out = append(out, strings.Fields(line)[1:])
	}
	exports := strings.Join(readmeCommands(t, "export SQL_"), " ")
	if !strings.Contains(exports, "SQL_PLUGIN=postgres12") {
		t.Errorf("deploy/README.md: the schema commands' exports %q do not set SQL_PLUGIN=postgres12", exports)
	}
	if len(out) == 0 {
		t.Fatal("deploy/README.md has no temporal-sql-tool commands")
	}
	return out
}

var saTypes = map[string]enumspb.IndexedValueType{
	"Keyword": enumspb.INDEXED_VALUE_TYPE_KEYWORD, "KeywordList": enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST,
	"Text": enumspb.INDEXED_VALUE_TYPE_TEXT, "Int": enumspb.INDEXED_VALUE_TYPE_INT, "Double": enumspb.INDEXED_VALUE_TYPE_DOUBLE,
	"Bool": enumspb.INDEXED_VALUE_TYPE_BOOL, "Datetime": enumspb.INDEXED_VALUE_TYPE_DATETIME,
}

// runREADMEOperatorCommands runs deploy/README.md's `temporal operator`
// commands (and, with only "task-queue", its `temporal task-queue
// describe`) against the cluster through the Temporal operator API the
// Temporal CLI calls for them, and checks that they register exactly the
// search attributes airlock needs (api.SearchAttributes). It returns the
// commands run.
func runREADMEOperatorCommands(t *testing.T, hostPort, only string) []string {
	t.Helper()
	cl, err := client.Dial(client.Options{HostPort: hostPort, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	nc, err := client.NewNamespaceClient(client.Options{HostPort: hostPort, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmds := readmeCommands(t, "temporal ")
	if only == "task-queue" {
		// The README names this check in its prose.
		b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range inlineTaskQueue.FindAllStringSubmatch(string(b), -1) {
			cmds = append(cmds, strings.Join(strings.Fields(m[1]), " "))
		}
	}
	created := map[string]enumspb.IndexedValueType{}
	var ran []string
	for _, line := range cmds {
		fields := strings.Fields(line)
		flags := map[string]string{}
		var verb []string
		for i := 1; i < len(fields); i++ {
			if f, ok := strings.CutPrefix(fields[i], "--"); ok && i+1 < len(fields) {
				flags[f] = fields[i+1]
				i++
				continue
			}
			verb = append(verb, fields[i])
		}
		v := strings.Join(verb, " ")
		if (only == "task-queue") != (v == "task-queue describe") {
			continue
		}
		ns := flags["namespace"]
		if ns != clusterNamespace {
			t.Errorf("deploy/README.md: %q: namespace %q, the README's namespace is %q", line, ns, clusterNamespace)
		}
		switch v {
		case "operator namespace create", "operator namespace update":
			ret, err := time.ParseDuration(flags["retention"])
			if err != nil || ret < 30*24*time.Hour {
				t.Errorf("deploy/README.md: %q: retention %q is not a duration of at least 30 days", line, flags["retention"])
				continue
			}
			if v == "operator namespace create" {
				err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(ret)})
			} else {
				err = nc.Update(ctx, &workflowservice.UpdateNamespaceRequest{Namespace: ns,
					Config: &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(ret)}})
			}
			if err != nil {
				t.Fatalf("deploy/README.md: %q: %v", line, err)
			}
		case "operator search-attribute create":
			typ, ok := saTypes[flags["type"]]
			if !ok {
				t.Errorf("deploy/README.md: %q: unknown type %q", line, flags["type"])
				continue
			}
			_, err := cl.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: ns,
				SearchAttributes: map[string]enumspb.IndexedValueType{flags["name"]: typ}})
			var exists *serviceerror.AlreadyExists
			if err != nil && !errors.As(err, &exists) {
				t.Fatalf("deploy/README.md: %q: %v", line, err)
			}
			created[flags["name"]] = typ
		case "operator search-attribute list":
			resp, err := cl.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
			if err != nil {
				t.Fatalf("deploy/README.md: %q: %v", line, err)
			}
			for name, typ := range api.SearchAttributes() {
				if got, ok := resp.GetCustomAttributes()[name]; !ok || got != typ {
					t.Errorf("deploy/README.md: after its commands, %q shows %s as %v, want %v", line, name, got, typ)
				}
			}
		case "task-queue describe":
			var pollers []*taskqueuepb.PollerInfo
			waitFor(t, "both workers to poll "+flags["task-queue"], 30*time.Second, func() bool {
				resp, err := cl.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{Namespace: ns,
					TaskQueue: &taskqueuepb.TaskQueue{Name: flags["task-queue"], Kind: enumspb.TASK_QUEUE_KIND_NORMAL}})
				pollers = resp.GetPollers()
				return err == nil && len(pollers) >= 2
			})
			t.Logf("deploy/README.md: %q: %d pollers", line, len(pollers))
		case "worker deployment set-current-version":
			// The rolling-upgrade step for workers started with
			// --versioning; this cluster's workers are unversioned and the
			// command names a placeholder build (NEW_VERSION).
			if flags["deployment-name"] == "" || flags["build-id"] == "" {
				t.Errorf("deploy/README.md: %q: want --deployment-name and --build-id", line)
			}
			t.Logf("deploy/README.md: %q: not run (routing by version needs versioned workers)", line)
			continue
		default:
			t.Errorf("deploy/README.md: %q: this test does not know the command %q: teach runREADMEOperatorCommands its operator API equivalent", line, v)
			continue
		}
		ran = append(ran, line)
	}
	if only == "" && !mapsEqualSA(created, api.SearchAttributes()) {
		t.Errorf("deploy/README.md's search-attribute create commands register %v; airlock needs %v (api.SearchAttributes)", created, api.SearchAttributes())
	}
	if len(ran) == 0 && only == "" {
		t.Fatalf("deploy/README.md has no temporal %s commands", only)
	}
	return ran
}

func mapsEqualSA(a, b map[string]enumspb.IndexedValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// waitSearchAttributes waits until a visibility query on every search
// attribute succeeds in the namespace (SQL visibility maps them per
// namespace).
func waitSearchAttributes(t *testing.T, tc client.Client) {
	t.Helper()
	var clauses []string
	for name := range api.SearchAttributes() {
		clauses = append(clauses, fmt.Sprintf("%s = 'probe'", name))
	}
	q := strings.Join(clauses, " AND ")
	waitFor(t, "the search attributes to be usable", 30*time.Second, func() bool {
		_, err := tc.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{Query: q})
		return err == nil
	})
}

var inlineTaskQueue = regexp.MustCompile("`(temporal task-queue describe[^`]*)`")

var envLine = regexp.MustCompile(`^[A-Z_]+=\S+$`)

var runIDLine = regexp.MustCompile(`^[0-9a-f-]{36}$`)

// replayNamespace replays every run of every workflow in the cluster's
// namespace against the current workflow code and returns how many.
func replayNamespace(t *testing.T, tc client.Client) int {
	t.Helper()
	// Programs replay on the interpreter the workers ran them with.
	workflows.UseProgramRunner(programRuntime(t))
	replayer := sdkworker.NewWorkflowReplayer()
	worker.RegisterWorkflows(replayer)
	n := 0
	var token []byte
	for {
		resp, err := tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{PageSize: 100, NextPageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range resp.GetExecutions() {
			id, run := ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId()
			if !runIDLine.MatchString(run) {
				t.Errorf("workflow %s: run ID %q", id, run)
			}
			if err := replayer.ReplayWorkflowHistory(nil, fetchHistory(t, tc, id, run)); err != nil {
				t.Errorf("replaying %s run %s against the current code: %v", id, run, err)
			}
			n++
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return n
		}
	}
}

type usage struct {
	peakRSS int64 // bytes
	cpu     time.Duration
}

// procUsage reads a process's peak resident set (VmHWM) and its user +
// system CPU time from /proc.
func procUsage(pid int) (usage, error) {
	var u usage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			u.peakRSS = kb << 10
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The fields after the command (which may hold spaces) in parentheses:
	// utime and stime are the 12th and 13th, in clock ticks (100 a second).
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ut, st int64
	fmt.Sscanf(f[11], "%d", &ut)
	fmt.Sscanf(f[12], "%d", &st)
	u.cpu = time.Duration(ut+st) * 10 * time.Millisecond
	return u, nil
}
