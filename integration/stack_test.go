// Package integration holds airlock's end-to-end tests: the real embedded
// Temporal server, the real worker and gateway, driven by the real go-sdk
// MCP client against real upstream MCP servers (the npm reference servers
// and testupstream), plus a kill -9 crash test of the airlock binary and
// the benchmarks. The tests run in parallel on one shared server, a
// namespace each (main_test.go); they wait with waitFor, never a sleep.
package integration

import (
	"context"
	"crypto/ecdh"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/grpc"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/blob"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/consent"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/pin"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/relay"
	"github.com/airlock-run/airlock/internal/sandbox"
	"github.com/airlock-run/airlock/internal/sandbox/toolserver"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/worker"
	"github.com/airlock-run/airlock/workflows"
)

// repoRoot is the repository root (this file lives in integration/).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// buildBinary builds a main package of this module once per test process.
func buildBinary(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "airlock-bin-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

// loadExample loads an example manifest and points its server at the
// installed npm package (node, no npx: faster, and no registry),
// installing the npm packages first if they are missing.
func loadExample(t testing.TB, name, pkg string, args []string, env map[string]string) *manifests.Manifest {
	t.Helper()
	m, err := manifests.Load(filepath.Join(repoRoot(), "manifests", "examples", name))
	if err != nil {
		t.Fatalf("example manifest %s: %v", name, err)
	}
	testenv.RequireNode(t)
	m.Server.Stdio = &manifests.StdioServer{Command: "node", Args: append([]string{testenv.NPMServer(t, pkg)}, args...), Env: env}
	if m.Server.Sandbox != nil {
		// The example's paths are under airlock's directories; here the
		// sandbox finds the package from the script, and the memory file's
		// directory is granted by sandboxWrites.
		sb := *m.Server.Sandbox
		sb.ReadPaths, sb.WritePaths = nil, nil
		if len(args) > 1 {
			// As the example grants files/: the roots' common parent, so
			// that moves between them stay in one mount.
			sb.WritePaths = []string{commonDir(args)}
		}
		m.Server.Sandbox = &sb
	}
	if len(m.Server.PathRoots) > 0 {
		// The example confines paths to the directories the server serves.
		m.Server.PathRoots = args
	}
	return m
}

// testupstreamManifest declares the testupstream tools.
func testupstreamManifest(t testing.TB, sideEffectLog string) *manifests.Manifest {
	t.Helper()
	bin := buildBinary(t, "./integration/testupstream")
	yaml := `server:
  name: counter
  stdio:
    command: ` + bin + `
    env:
      SIDE_EFFECT_LOG: ` + sideEffectLog + `
tools:
  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  append: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false, timeout: 60s}
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, timeout: 60s}
  fail: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  content: {side_effects: [read], data_access_level: public, risk: low, idempotent: true}
`
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "counter.yaml"), []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// stack is airlock in-process: a namespace on the shared embedded Temporal,
// worker, gateway over HTTP.
type stack struct {
	// srv is the test's namespace on the shared server.
	srv    temporalNS
	client client.Client
	pool   *upstream.Pool
	worker sdkworker.Worker
	gw     *gateway.Gateway
	hub    *relay.Hub // the gateway's relay to the worker in this process (nil when split)
	http   *httptest.Server
	url    string
	log    zerolog.Logger
	// sandbox runs the native tools; nil without any.
	sandbox *sandbox.Sandbox
}

type stackOptions struct {
	// dataDir holds the blobs and the wasm cache (default a temporary
	// directory). Temporal is the package's shared server.
	dataDir   string
	manifests []*manifests.Manifest
	maxCalls  int
	// continueAsNewAfter makes tasks continue as new after this many
	// calls per run (default: the workflow's).
	continueAsNewAfter int
	// directory, when set, makes the gateway authenticate callers.
	directory *identity.Directory
	// pins, when set, makes the gateway block tools whose definition
	// changed since it was pinned.
	pins *pin.Store
	// policy judges calls (default: an empty policy, so the risk tiers
	// decide: high and critical tools need approval).
	policy *policy.Config
	// groups are the approver groups' members (principal names).
	groups map[string][]string
	// notifiers announce approval requests (default none: local only).
	notifiers []activities.Notifier
	// inlineWait and progressEvery tune the gateway's long waits.
	inlineWait, progressEvery time.Duration
	// rollbackOnDeny and rollbackNotify configure agent tasks' rollback.
	rollbackOnDeny bool
	rollbackNotify string
	// maxResultBytes bounds a call's result (default: activities').
	maxResultBytes int
	// noBlobs runs the worker without a blob store (large captures stay
	// in the history).
	noBlobs bool
	// vars are the manifests' ${VAR}s for native (wasm) tools, whose
	// modules are loaded into a sandbox when any manifest has them.
	vars map[string]string
	// sandboxWarm is the sandbox's Options.Warm (0: its default).
	sandboxWarm int
	// split gives the gateway and the worker no relay in common, as when
	// they run in different processes.
	split bool
	// workerIdentity is the worker's identity (default the SDK's).
	workerIdentity string
	// catalog is the gateway's catalog mode (default full).
	catalog string
	// state configures tasks' state (task.state; nil: the defaults).
	state *api.StateConfig
	// taskRateLimits and budget are every task's rate limits and budget
	// (issue 16 §3; limits_test.go).
	taskRateLimits []api.RateLimit
	budget         int
	// askTimeout bounds how long an upstream's request waits for the
	// client's answer (default: the gateway's and activities').
	askTimeout time.Duration
	// sessionKey is the gateway's session key (default a new one), for
	// tests that add replicas sharing it (issue 14).
	sessionKey []byte
	// interceptors wrap the worker (burst_test.go drops workflow tasks).
	interceptors []interceptor.WorkerInterceptor
	// programs turns code mode on (airlock_run_program, program_test.go):
	// the gateway offers the tool, and the package's one program
	// interpreter runs programs (programRuntime).
	programs *gateway.ProgramOptions
	// sharedUnnamed puts a principal's stateless requests that name no
	// task in <principal>-default (gateway.unnamed_calls: principal_task).
	sharedUnnamed bool
	// taskConcurrency and taskBacklog bound a task's calls in flight and
	// waiting (gateway.task_concurrency, gateway.task_backlog; 0: the
	// defaults).
	taskConcurrency, taskBacklog int
	// principalShare bounds a principal's calls in flight while other
	// principals have calls (gateway.principal_share; 0: the default,
	// negative: off).
	principalShare int
	// grpcUnary intercepts every attempt of the stack's Temporal client's
	// calls (inside the SDK's retries), to count what the server refused.
	grpcUnary []grpc.UnaryClientInterceptor
	// judge, when set, is the worker's configuration in force
	// (activities.Activities.Current, as a hot reload swaps it); nil
	// answers fall back to the stack's policy and catalog.
	judge func() *activities.Judge
	// external, when set (and judge is not), is the worker's external
	// policy decision point (issue 30 §3).
	external *activities.External
	// audit, when set, receives the worker's and the gateway's audit
	// lines.
	audit *auditstream.Log
	// subjectKey is the worker's subject key (its public half the
	// gateway's) for upstreams that act as the user (tokenexchange_test.go).
	subjectKey *ecdh.PrivateKey
	// consent, when set, is the user consent flow of upstreams with
	// user_oauth, on the worker and the gateway (consent_test.go).
	consent *consent.Flow
	// logs, when set, receives every log line of the stack, debug and up.
	logs io.Writer
}

func newStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	if o.dataDir == "" {
		o.dataDir = t.TempDir()
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	if o.logs != nil {
		log = zerolog.New(zerolog.MultiLevelWriter(o.logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
	}
	ctx := context.Background()
	srv := sharedTemporal(t)
	s := &stack{srv: srv, log: log}

	copts := client.Options{HostPort: srv.HostPort(), Namespace: srv.Namespace(), Logger: quiet{}}
	// As cmd/airlock dials: the server's in-flight refusals of calls are
	// answered busy (gateway/serverbusy.go); o.grpcUnary sees them first.
	copts.ConnectionOptions.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(append([]grpc.UnaryClientInterceptor{gateway.RefuseBusyUpdates}, o.grpcUnary...)...)}
	// And without gzip, as `airlock dev` dials its embedded server
	// (cmd/airlock/wiring.go, dialEmbedded): with the SDK's default the
	// benchmarks counted ~5% of the process's CPU that airlock dev does
	// not spend.
	copts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	c, err := client.Dial(copts)
	if err != nil {
		t.Fatal(err)
	}
	s.client = c
	t.Cleanup(c.Close)

	var servers []manifests.Server
	for _, m := range o.manifests {
		servers = append(servers, sandboxWrites(m.Server))
	}
	var nativeFn func(context.Context, string) (mcp.Transport, error)
	for _, m := range o.manifests {
		if m.Server.WASM == nil {
			continue
		}
		if err := toolserver.MkdirMounts(o.manifests, o.vars); err != nil {
			t.Fatal(err)
		}
		sb, err := sandbox.New(ctx, sandbox.Options{CacheDir: filepath.Join(o.dataDir, "wasm-cache"), Warm: o.sandboxWarm})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.Close(context.Background()) })
		s.sandbox = sb
		nat, err := toolserver.New(ctx, sb, o.manifests, toolserver.Options{Vars: o.vars, Getenv: os.Getenv,
			Report: func(server, tool string, err error) {
				t.Logf("native tool %s of %s unavailable: %v", tool, server, err)
			}})
		if err != nil {
			t.Fatalf("native tools: %v", err)
		}
		nativeFn = nat.Transport
		break
	}
	var gwMu sync.Mutex
	s.pool = upstream.New(servers, upstream.Options{Logger: &log, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Native: nativeFn,
		Sandbox: stackSandbox(t, o.dataDir),
		OnToolsChanged: func(string) {
			gwMu.Lock()
			defer gwMu.Unlock()
			if s.gw != nil {
				s.gw.Refresh()
			}
		}})
	s.pool.Start(ctx)
	t.Cleanup(func() { _ = s.pool.Close() })

	pc := policy.Config{}
	if o.policy != nil {
		pc = *o.policy
	}
	pol, err := policy.Compile(pc)
	if err != nil {
		t.Fatal(err)
	}
	var blobs *blob.Store
	if !o.noBlobs {
		if blobs, err = blob.New(filepath.Join(o.dataDir, "blobs")); err != nil {
			t.Fatal(err)
		}
	}
	hub := relay.New()
	gwHub := hub
	if o.split {
		hub, gwHub = nil, nil // as airlock worker and airlock gateway, each alone
	}
	s.hub = gwHub
	if o.programs != nil {
		workflows.UseProgramRunner(programRuntime(t))
	}
	catalog := activities.NewCatalog(o.manifests, servers, s.pool, false)
	if o.external != nil && o.judge == nil {
		j := &activities.Judge{Policy: pol, Catalog: catalog, Groups: o.groups, External: o.external}
		o.judge = func() *activities.Judge { return j }
	}
	s.worker = worker.New(c, &activities.Activities{Relay: hub, AskTimeout: o.askTimeout, Blobs: blobs, Tools: s.pool, Policy: pol, Groups: o.groups, Notifiers: o.notifiers, Pins: o.pins, MaxResultBytes: o.maxResultBytes,
		Catalog: catalog, Current: o.judge, Audit: o.audit, SubjectKey: o.subjectKey, Consent: o.consent}, worker.Options{Identity: o.workerIdentity, Interceptors: o.interceptors})
	if err := s.worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.worker.Stop)

	gwMu.Lock()
	s.gw = gateway.New(gateway.Options{
		Temporal: c, Relay: gwHub, Manifests: o.manifests, Upstreams: s.pool, Principal: "tester", Directory: o.directory, Pins: o.pins, Policy: pol,
		InlineWait: o.inlineWait, ProgressEvery: o.progressEvery,
		MaxCalls: o.maxCalls, ContinueAsNewAfter: o.continueAsNewAfter, IdleTimeout: time.Hour, Logger: log,
		RollbackOnDeny: o.rollbackOnDeny, RollbackNotify: o.rollbackNotify,
		Catalog: o.catalog, State: o.state, SharedUnnamedTask: o.sharedUnnamed,
		TaskRateLimits: o.taskRateLimits, Budget: o.budget, AskTimeout: o.askTimeout,
		SessionKey: o.sessionKey, Audit: o.audit, SubjectKey: subjectPub(o.subjectKey), Consent: o.consent,
		Programs:        o.programs,
		TaskConcurrency: o.taskConcurrency, TaskBacklog: o.taskBacklog, PrincipalShare: o.principalShare,
	})
	gwMu.Unlock()
	s.gw.Refresh()
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.gw.Handler())
	s.http = httptest.NewServer(mux)
	t.Cleanup(s.http.Close)
	s.url = s.http.URL + "/mcp"
	return s
}

// connect opens an MCP client session to the gateway over streamable HTTP,
// with extra headers (e.g. Airlock-Task).
func (s *stack) connect(t testing.TB, headers map[string]string) *mcp.ClientSession {
	t.Helper()
	return connectURL(t, s.url, headers)
}

// testKey is the API key of the principal "tester" in identityYAML.
const testKey = "integration-test-key"

// identityYAML gives a subprocess's configuration one principal, tester,
// with every grant, as its HTTP key holder and its local principal.
var identityYAML = `principals:
  - name: tester
    roles: [all]
    api_key_sha256: [` + identity.HashKey(testKey) + `]
local_principal: tester
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
`

// connectURL connects an MCP client to url, sending testKey unless headers
// set Authorization (set it to "" to send no key).
func connectURL(t testing.TB, url string, headers map[string]string) *mcp.ClientSession {
	t.Helper()
	return connectAt(t, url, headers, sessionProtocol)
}

// connectStateless connects like connectURL at protocol 2026-07-28: no
// session, each request on its own.
func connectStateless(t testing.TB, url string, headers map[string]string) *mcp.ClientSession {
	t.Helper()
	return connectAt(t, url, headers, &mcp.ClientSessionOptions{ProtocolVersion: gateway.StatelessProtocol})
}

func connectAt(t testing.TB, url string, headers map[string]string, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + testKey}
	for k, v := range headers {
		h[k] = v
	}
	hc := &http.Client{Transport: headerRT{headers: h}}
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, opts)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// sessionProtocol makes a go-sdk v1.8.0 client open an MCP session
// (2025-11-25); left to itself it speaks the sessionless 2026-07-28, which
// puts every call of a client without Airlock-Task in the principal's
// default task (replica_test.go covers that revision).
var sessionProtocol = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

type headerRT struct{ headers map[string]string }

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		if v == "" {
			r.Header.Del(k)
			continue
		}
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// waitSlack widens every wait of this package: the tests run side by side
// on one server, often on a loaded 2-core machine, where a wait that takes
// 10 s alone can take 30. A wait returns when its condition holds, so a
// wide bound costs only a failing test's time.
const waitSlack = 3

// waitFor polls cond until it holds, failing the test after waitSlack × d:
// it is testenv.WaitFor, the tests' one polling loop.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, what, waitSlack*d, cond)
}

// waitUntil is waitFor for a condition that says why it does not hold yet
// (testenv.WaitUntil).
func waitUntil(t testing.TB, what string, d time.Duration, cond func() error) {
	t.Helper()
	testenv.WaitUntil(t, what, waitSlack*d, cond)
}

// waitTools waits until the gateway lists every name (upstreams connect in
// the background).
func waitTools(t testing.TB, cs *mcp.ClientSession, names ...string) map[string]*mcp.Tool {
	t.Helper()
	var got map[string]*mcp.Tool
	waitUntil(t, "the gateway to list "+strings.Join(names, ", "), 60*time.Second, func() error {
		got = map[string]*mcp.Tool{}
		res, err := cs.ListTools(context.Background(), nil)
		if err == nil {
			for _, tool := range res.Tools {
				got[tool.Name] = tool
			}
		}
		for _, n := range names {
			if tool, ok := got[n]; !ok || strings.HasPrefix(tool.Description, "[unavailable") {
				return fmt.Errorf("tool %s not available (list error %v); have %d tools", n, err, len(got))
			}
		}
		return nil
	})
	return got
}

// call calls a tool with optional idempotency key and returns the result.
func call(t testing.TB, cs *mcp.ClientSession, name string, args any, key string) *mcp.CallToolResult {
	t.Helper()
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	if key != "" {
		p.Meta = mcp.Meta{gateway.MetaIdempotencyKey: key}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type quiet struct{}

func (quiet) Debug(string, ...interface{}) {}
func (quiet) Info(string, ...interface{})  {}
func (quiet) Warn(string, ...interface{})  {}
func (quiet) Error(string, ...interface{}) {}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// newHeaderClient is an HTTP client that adds headers to every request.
func newHeaderClient(headers map[string]string) *http.Client {
	return &http.Client{Transport: headerRT{headers: headers}}
}

// counterManifest serves testupstream as server "counter" with the given
// tool declarations (YAML lines under "tools:", indented two spaces) and
// returns it with the side-effect log its tools write to.
func counterManifest(t testing.TB, tools string) (*manifests.Manifest, string) {
	t.Helper()
	effects := filepath.Join(t.TempDir(), "effects.log")
	bin := buildBinary(t, "./integration/testupstream")
	m, err := manifests.Parse(filepath.Join(t.TempDir(), "counter.yaml"), []byte(`server:
  name: counter
  stdio:
    command: `+bin+`
    env: {SIDE_EFFECT_LOG: `+effects+`}
tools:
`+tools))
	if err != nil {
		t.Fatal(err)
	}
	return m, effects
}

// appendNeedsOps declares testupstream's append as a high-risk write that
// group ops must approve.
const appendNeedsOps = `  append:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: false
    redact: [key]
    approval: {group: ops, timeout: 10m}
`

// allGrants is a directory of principals with every grant, each with the
// API key "<name>-key" and, when slack names one, a Slack user ID.
func allGrants(slack map[string]string, names ...string) *identity.Directory {
	c := &config.Config{Roles: map[string]*config.Role{
		"all": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}}}}
	for _, n := range names {
		c.Principals = append(c.Principals, config.Principal{Name: n, Roles: []string{"all"},
			APIKeySHA256: []string{identity.HashKey(n + "-key")}, SlackUserID: slack[n]})
	}
	return identity.New(c)
}

func subjectPub(k *ecdh.PrivateKey) *ecdh.PublicKey {
	if k == nil {
		return nil
	}
	return k.PublicKey()
}

// stackSandbox is the stdio sandbox the stack's servers run in, as
// airlock runs them (sandboxed by default), hiding the stack's data
// directory. Without bubblewrap the servers run unsandboxed, except under
// CI=true, where that fails the test.
func stackSandbox(t testing.TB, dataDir string) *upstream.Sandbox {
	t.Helper()
	sb := upstream.ProbeSandbox([]string{dataDir})
	if err := sb.Err(); err != nil {
		if testenv.CI() {
			t.Fatalf("%v (CI=true: the integration tests run their stdio servers sandboxed)", err)
		}
		t.Logf("stdio servers run unsandboxed: %v", err)
		return nil
	}
	return sb
}

// sandboxWrites gives a stdio test server write access to the
// directories of the files its environment names (the test upstream's
// SIDE_EFFECT_LOG, server-memory's MEMORY_FILE_PATH): those are where the
// tests read its side effects, so the manifest would list them in
// sandbox.write_paths.
func sandboxWrites(s manifests.Server) manifests.Server {
	if s.Stdio == nil || !s.Sandboxed() {
		return s
	}
	var dirs []string
	for _, k := range slices.Sorted(maps.Keys(s.Stdio.Env)) {
		if v := s.Stdio.Env[k]; filepath.IsAbs(v) {
			dirs = append(dirs, filepath.Dir(v))
		}
	}
	if len(dirs) == 0 {
		return s
	}
	sb := manifests.Sandbox{}
	if s.Sandbox != nil {
		sb = *s.Sandbox
	}
	sb.WritePaths = append(slices.Clone(sb.WritePaths), dirs...)
	s.Sandbox = &sb
	return s
}

// commonDir is the deepest directory holding every path in ps.
func commonDir(ps []string) string {
	d := filepath.Clean(ps[0])
	for _, p := range ps[1:] {
		for !strings.HasPrefix(filepath.Clean(p)+"/", d+"/") && d != "/" {
			d = filepath.Dir(d)
		}
	}
	return d
}
