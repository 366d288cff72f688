package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/grpc"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/sandbox"
	"github.com/airlock-run/airlock/internal/sandbox/toolserver"
	"github.com/airlock-run/airlock/internal/telemetry"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// defaultConfig is the configuration file read when --config is not given.
const defaultConfig = "airlock.yaml"

// commonFlags are shared by the commands that serve.
type commonFlags struct {
	config    string
	dataDir   string
	listen    string
	address   string
	namespace string
	taskQueue string
	logLevel  string
	logFormat string
	tls       tlsFlags
	// metricsListen: "" serves /metrics on the role's own HTTP listener
	// (if it has one); an address, on a listener of its own instead; "off",
	// nowhere.
	metricsListen string
	auditLog      string
	// drain is how long a stopping role finishes what it has in flight
	// (--drain-timeout, on the serving roles only).
	drain time.Duration
	// The worker's build identity (airlock worker only; see versioning.go).
	buildID, deployment, versioning string
}

func (f *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", defaultConfig, "configuration `file` (manifests are found relative to it)")
	fs.StringVar(&f.dataDir, "data-dir", "", "local state `dir`ectory (default: data_dir in the config, else .airlock)")
	fs.StringVar(&f.listen, "listen", "", "gateway HTTP `address` (default: listen in the config, else 127.0.0.1:7400)")
	fs.StringVar(&f.address, "temporal-address", os.Getenv("TEMPORAL_ADDRESS"), "Temporal frontend `host:port` (env TEMPORAL_ADDRESS)")
	fs.StringVar(&f.namespace, "namespace", os.Getenv("TEMPORAL_NAMESPACE"), "Temporal `namespace` (env TEMPORAL_NAMESPACE; default: the config's, else \"default\")")
	fs.StringVar(&f.taskQueue, "task-queue", "", "Temporal task `queue` of the worker (default: the config's, else \"airlock\")")
	f.tls.register(fs)
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn, error")
	fs.StringVar(&f.logFormat, "log-format", "console", "log `format`: console or json (logs go to stderr)")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on a listener of its own at this `address` (\"off\": nowhere; default: on the HTTP listener at /metrics)")
	fs.StringVar(&f.auditLog, "audit-log", "", "where the audit stream goes: stdout, stderr, off or a `file` (default: audit.log in the config, else <data-dir>/audit.jsonl)")
}

// env is what a serving command has after loading its configuration.
type env struct {
	flags    commonFlags
	snap     *config.Snapshot
	dataDir  string
	listen   string
	ns       string
	tq       string
	log      zerolog.Logger
	servers  []manifests.Server
	cfgDir   string
	cfgPath  string
	external bool // Temporal is external (not the embedded dev server)
	// uiURL is the Temporal Web UI that links point to ("" for none).
	uiURL  string
	stderr io.Writer
	// audit is the audit stream, once a serving command has opened it
	// (nil: off).
	audit *auditstream.Log
	// tracing is set when a serving command turned tracing on (tracing.go;
	// nil: off).
	tracing *telemetry.Tracing
	// health answers /healthz and /readyz on every listener the role
	// serves.
	health health
}

// load reads the configuration and applies flags over it. Errors name the
// file and field.
func load(f commonFlags, stderr io.Writer) (*env, error) {
	lvl, err := zerolog.ParseLevel(f.logLevel)
	if err != nil || f.logLevel == "" {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", f.logLevel)
	}
	var w io.Writer = stderr
	switch f.logFormat {
	case "console":
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly}
	case "json":
	default:
		return nil, fmt.Errorf("--log-format %q: use console or json", f.logFormat)
	}
	log := zerolog.New(w).Level(lvl).With().Timestamp().Logger()

	cfgPath, err := filepath.Abs(f.config)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfgPath); errors.Is(err, os.ErrNotExist) {
		return nil, configMissing(f.config, cfgPath)
	}
	snap, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	e := &env{flags: f, snap: snap, log: log, cfgPath: cfgPath, cfgDir: filepath.Dir(cfgPath), stderr: stderr}
	e.dataDir = firstNonEmpty(f.dataDir, snap.Config.DataDir, ".airlock")
	if e.dataDir, err = filepath.Abs(e.dataDir); err != nil {
		return nil, err
	}
	e.listen = firstNonEmpty(f.listen, snap.Config.Listen, "127.0.0.1:7400")
	e.ns = firstNonEmpty(f.namespace, snap.Config.Temporal.Namespace, "default")
	e.tq = firstNonEmpty(f.taskQueue, snap.Config.Temporal.TaskQueue, api.DefaultTaskQueue)
	e.uiURL = snap.Config.Temporal.UIURL
	addr := firstNonEmpty(f.address, snap.Config.Temporal.Address)
	e.flags.address = addr
	e.external = addr != ""

	if e.servers, err = e.expandServers(snap); err != nil {
		return nil, err
	}
	return e, nil
}

// expandServers expands airlock's ${VAR}s in the manifests' servers (in
// the manifests' order); the reload does it again for each new version.
func (e *env) expandServers(snap *config.Snapshot) ([]manifests.Server, error) {
	vars := e.vars()
	var out []manifests.Server
	for _, m := range snap.Manifests {
		s := m.Server.Expand(vars)
		if err := expandedRootsAbsolute(m, s); err != nil {
			return nil, err
		}
		if s.Stdio != nil && s.Stdio.Dir == "" {
			s.Stdio.Dir = filepath.Dir(m.File)
		}
		out = append(out, s)
	}
	return out, nil
}

// expandedRootsAbsolute refuses a path root that is relative once its
// ${VAR}s are expanded (validation accepts any root that starts with one):
// policy would deny every call under it.
func expandedRootsAbsolute(m *manifests.Manifest, s manifests.Server) error {
	var ps manifests.Problems
	for i, r := range s.PathRoots {
		if r == "" || filepath.IsAbs(r) {
			continue
		}
		at := fmt.Sprintf("server.path_roots[%d]", i)
		ps = append(ps, manifests.Problem{File: m.File, Line: max(1, m.Lines.Line(at)), Field: at,
			Msg: fmt.Sprintf("%q expands to %q, a relative path, under which policy would deny every call; make the variable hold an absolute path, or write one", m.Server.PathRoots[i], r)})
	}
	if len(ps) > 0 {
		return ps
	}
	return nil
}

// vars are airlock's own ${VAR}s for manifests.
func (e *env) vars() map[string]string {
	return map[string]string{"AIRLOCK_DATA_DIR": e.dataDir, "AIRLOCK_CONFIG_DIR": e.cfgDir}
}

// configMissing says what to do about a configuration file that does not
// exist: the default one is missing when airlock runs outside the repository
// root; a named one is a wrong path.
func configMissing(name, abs string) error {
	if name == defaultConfig {
		return fmt.Errorf("configuration %s does not exist: run from the repository root (it has the example airlock.yaml) or pass --config FILE", abs)
	}
	where := ""
	if abs != name {
		where = " (looked for " + abs + ")"
	}
	return fmt.Errorf("--config %s: the file does not exist%s; fix the path, or start from the example airlock.yaml at the repository root", name, where)
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// sdkLogger bridges the Temporal SDK's logger to zerolog, one level up
// (the SDK is chatty at info).
func sdkLogger(log zerolog.Logger) sdklog.Logger {
	l := log.With().Str("component", "temporal-sdk").Logger()
	if l.GetLevel() < zerolog.WarnLevel {
		l = l.Level(zerolog.WarnLevel)
	}
	return sdklog.NewStructuredLogger(slog.New(zerolog.NewSlogHandler(l)))
}

// dial connects to Temporal, retrying for up to a minute so a cluster that
// starts after airlock is waited for. The SDK's own metrics (requests,
// polls, task latencies) go to airlock's Prometheus registry.
func dial(ctx context.Context, hostPort, ns string, tf tlsFlags, log zerolog.Logger, ics ...interceptor.ClientInterceptor) (client.Client, error) {
	opts := client.Options{HostPort: hostPort, Namespace: ns, Logger: sdkLogger(log), MetricsHandler: metrics.SDK, Interceptors: ics}
	if err := tf.clientOptions(&opts); err != nil {
		return nil, err
	}
	return dialWith(ctx, opts, log)
}

// dialEmbedded connects to the embedded server over loopback. Without
// gzip: the SDK compresses every request (and the server every answer) by
// default, which buys nothing on loopback and cost ~5% of airlock dev's CPU
// under load (issue 12).
func dialEmbedded(ctx context.Context, hostPort, ns string, log zerolog.Logger, ics ...interceptor.ClientInterceptor) (client.Client, error) {
	opts := client.Options{HostPort: hostPort, Namespace: ns, Logger: sdkLogger(log), MetricsHandler: metrics.SDK, Interceptors: ics,
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}}}
	return dialWith(ctx, opts, log)
}

func dialWith(ctx context.Context, opts client.Options, log zerolog.Logger) (client.Client, error) {
	hostPort, ns := opts.HostPort, opts.Namespace
	// A call refused by the server's in-flight limit is answered busy,
	// not retried into it (gateway/serverbusy.go); it touches only the
	// gateway's call and program Updates.
	opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(gateway.RefuseBusyUpdates))
	var last error
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			return c, nil
		}
		last = err
		log.Warn().Err(err).Str("address", hostPort).Msg("Temporal not reachable yet; retrying")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	return nil, fmt.Errorf("connecting to Temporal at %s (namespace %s): %w; check --temporal-address and that the cluster is up", hostPort, ns, last)
}

// ensureSearchAttributes registers airlock's search attributes on an
// external cluster. Best effort: a cluster whose operator API is locked down
// has them registered by its admins (see deploy/). Only the missing ones are
// added, so an error is a real one; AlreadyExists is a replica that added
// them first (older servers also answer it for ones that exist).
func ensureSearchAttributes(ctx context.Context, c client.Client, ns string, log zerolog.Logger) {
	want := api.SearchAttributes()
	if have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns}); err == nil {
		for name := range have.GetCustomAttributes() {
			delete(want, name)
		}
		if len(want) == 0 {
			return
		}
	}
	_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: ns, SearchAttributes: want,
	})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		log.Warn().Err(err).Msg("could not register search attributes; ask the cluster admin to add them (see deploy/README.md)")
	}
}

// newPool builds the upstream pool; onChange is called when an upstream's
// tools change.
func newPool(e *env, nat *toolserver.Servers, onChange func(string)) *upstream.Pool {
	log := e.log.With().Str("component", "upstream").Logger()
	opts := upstream.Options{
		Logger:         &log,
		ClientInfo:     &mcp.Implementation{Name: "airlock", Version: version},
		OnToolsChanged: onChange,
		Sandbox:        newSandbox(e, log),
		Audit:          e.audit,
	}
	if nat != nil {
		opts.Native = nat.Transport
	}
	return upstream.New(e.servers, opts)
}

// nativeMarker is the file in the compilation cache that says a native
// tool's module (by its pinned SHA-256) compiled and loaded there with
// this wazero on this architecture, as interpreterMarker says it of the
// program interpreter. With it, the module loads at its tool's first call
// (0.2-0.7 s from the cache on the first, then as before); without it (a
// new module, a new wazero, an emptied cache), when the pool connects, so
// that a module that does not compile is listed as unavailable.
func nativeMarker(cacheDir, sha string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00wazero %s %s/%s", strings.ToLower(strings.TrimSpace(sha)), wazeroVersion(), runtime.GOOS, runtime.GOARCH)
	return filepath.Join(cacheDir, "airlock-native-"+hex.EncodeToString(h.Sum(nil))[:32]+".compiled")
}

// startNative prepares the wasm servers over a sandbox whose compilation
// cache lives under the data dir (nil when there are none). A module that
// is missing, does not match its sha256 or does not compile makes its own
// tools unavailable (listed with the reason, calls fail) and is logged as
// an error; the other tools are served. Compiling happens when the
// upstream pool first connects, in the background.
func startNative(ctx context.Context, e *env) (*toolserver.Servers, func(), error) {
	wasm := false
	for _, m := range e.snap.Manifests {
		wasm = wasm || m.Server.WASM != nil
	}
	if !wasm {
		return nil, func() {}, nil
	}
	vars := e.vars()
	if err := toolserver.MkdirMounts(e.snap.Manifests, vars); err != nil {
		return nil, nil, err
	}
	sb, err := sandbox.New(ctx, sandbox.Options{CacheDir: e.wasmCache()})
	if err != nil {
		return nil, nil, fmt.Errorf("starting the wasm sandbox: %w", err)
	}
	stop := func() { _ = sb.Close(context.Background()) }
	t0 := time.Now()
	cache := e.wasmCache()
	nat, err := toolserver.New(ctx, sb, e.snap.Manifests, toolserver.Options{Vars: vars, Getenv: os.Getenv,
		// A module that loaded from this cache before loads at its
		// first call (issue 28 §5: ~40 MiB of an idle process were the
		// example's two modules); see nativeMarker.
		Compiled: func(sha string) bool { _, err := os.Stat(nativeMarker(cache, sha)); return err == nil },
		Loaded: func(sha string) {
			if err := os.WriteFile(nativeMarker(cache, sha), nil, 0o600); err != nil {
				e.log.Debug().Err(err).Msg("marking a native module compiled; the next start loads it eagerly again")
			}
		},
		Report: func(server, tool string, err error) {
			e.log.Error().Str("server", server).Str("tool", tool).Err(err).
				Msg("native tool unavailable: its module could not be loaded; the server's other tools are served")
		}})
	if err != nil {
		stop()
		return nil, nil, err
	}
	e.log.Info().Dur("took", time.Since(t0)).Msg("wasm modules checked against their sha256; new ones compile in the background, ones compiled before load at their first call (cached under the data dir)")
	return nat, stop, nil
}

// envSandbox=off turns the stdio sandbox off for every server whose
// manifest does not require it (a host where airlock itself is the
// container, or the tests that run the binary with a test upstream
// writing outside any root).
const envSandbox = "AIRLOCK_SANDBOX"

// newSandbox probes the stdio sandbox (also without stdio servers: a
// reload may add one) and says at start-up what the servers get. A
// server sees none of airlock's data directory, configuration or key
// files.
func newSandbox(e *env, log zerolog.Logger) *upstream.Sandbox {
	c := e.snap.Config
	hide := []string{e.dataDir, e.cfgDir, e.cfgPath, c.AuditSigningKeyPath()}
	if p := c.Gateway.SessionKeyFile; p != "" {
		if !filepath.IsAbs(p) {
			p = filepath.Join(e.cfgDir, p)
		}
		hide = append(hide, p)
	}
	sb := probeSandbox(hide, log)
	if err := sb.Err(); err != nil {
		log.Warn().Str("reason", err.Error()).Msg("stdio servers are NOT sandboxed: they run with airlock's user, files, network and environment (a server whose manifest says sandbox: on, required: true or has an egress allowlist does not start; sandbox: off silences this per server)")
	} else {
		log.Info().Msg(sb.Describe())
	}
	return sb
}

// probeSandbox is the stdio sandbox as envSandbox leaves it: off, or
// probed (hiding hide).
func probeSandbox(hide []string, log zerolog.Logger) *upstream.Sandbox {
	switch v := os.Getenv(envSandbox); v {
	case "off":
		return upstream.NoSandbox(envSandbox + "=off is set")
	case "":
	default:
		log.Warn().Str(envSandbox, v).Msg(envSandbox + " is neither empty nor off; ignored (the sandbox stays on where the host supports it)")
	}
	return upstream.ProbeSandbox(hide)
}
