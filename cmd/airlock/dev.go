package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/approver/web"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/blob"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/consent"
	"github.com/airlock-run/airlock/internal/devserver"
	"github.com/airlock-run/airlock/internal/devui"
	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/internal/httplimit"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/pin"
	"github.com/airlock-run/airlock/internal/program"
	"github.com/airlock-run/airlock/internal/relay"
	"github.com/airlock-run/airlock/internal/reload"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/worker"
)

// roles says which parts a serving command runs.
type roles struct {
	embedded bool // embedded Temporal (dev only, when no address is given)
	worker   bool
	gateway  bool
	stdio    bool // gateway on stdin/stdout instead of HTTP
	ui       bool // Temporal Web UI on uiPort (with embedded only)
	uiPort   int
	uiFixed  bool // uiPort was asked for: if taken, fail rather than pick another
}

// stack is a running set of roles; stop tears it down in reverse order.
type stack struct {
	env    *env
	srv    *devserver.Server
	ui     *devui.UI
	client client.Client
	pool   *upstream.Pool
	pins   *pin.Store
	worker sdkworker.Worker
	// programs is the program interpreter of a worker with code mode on
	// (programs.go); nil otherwise.
	programs *program.Runtime
	dir      *identity.Directory
	http     *httplimit.Server
	httpErr  chan error
	addr     string
	stops    []func()

	// gw is the gateway once it is up; the pool's tool changes refresh it
	// from the pool's goroutines.
	gwMu sync.Mutex
	gw   *gateway.Gateway

	// consent is the user consent flow and credential store of upstreams
	// with user_oauth (credentials.go).
	consent *consent.Flow

	// cfg is the configuration version in force; reloads replace it
	// (reload.go).
	cfg *reload.Reloader[cfgVersion]

	// relay joins the gateway's and the worker's ends of each call (they
	// share this process): upstream progress, log messages, sampling and
	// elicitation reach the client (package relay).
	relay *relay.Hub
}

// callRelay is the stack's relay, made on first use.
func (s *stack) callRelay() *relay.Hub {
	if s.relay == nil {
		s.relay = relay.New()
	}
	return s.relay
}

func (s *stack) stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

const devLong = `Runs airlock in one process: an embedded Temporal server persisting to
<data-dir>/temporal.db (SQLite) with its Web UI on http://127.0.0.1:8233,
the worker, and the MCP gateway on http://<listen>/mcp. Killing and
restarting it on the same data dir resumes every task. With
--temporal-address (or TEMPORAL_ADDRESS) it uses that Temporal (and no UI)
instead of the embedded one.`

func devCommand() *Command {
	return &Command{Name: "dev", Usage: "[flags]", Short: "run everything in one process (embedded Temporal on SQLite)",
		Long: devLong, NoArgs: true, Flags: bind(devFlags, runDev)}
}

type devOptions struct {
	common       commonFlags
	stdio        bool
	task         string
	temporalPort int
	uiPort       int
	noUI         bool
	pprof        string
}

func devFlags(fs *flag.FlagSet, o *devOptions) {
	o.common.register(fs)
	o.common.registerDrain(fs, "requests and then tool calls in flight (each)")
	fs.BoolVar(&o.stdio, "stdio", false, "serve MCP on stdin/stdout (for Claude Desktop) instead of HTTP")
	fs.StringVar(&o.task, "task", "", "with --stdio: attach to this task `ID` (reattach after a client restart)")
	fs.IntVar(&o.temporalPort, "temporal-port", 7233, "`port` of the embedded Temporal frontend (127.0.0.1 only)")
	fs.IntVar(&o.uiPort, "ui-port", devui.DefaultPort, "`port` of the embedded Temporal's Web UI (127.0.0.1 only; 0 picks a free port, -1 turns it off)")
	fs.BoolVar(&o.noUI, "no-ui", false, "do not serve the Temporal Web UI")
	fs.StringVar(&o.pprof, "pprof", "", "serve Go's profiling endpoints (/debug/pprof/) on this loopback `address` (default: none)")
}

func runDev(c *Call, o *devOptions) int {
	if code := badDrain(c, o.common.drain); code != 0 {
		return code
	}
	if o.uiPort < -1 || o.uiPort > 65535 {
		return c.usage("--ui-port %d: want 0-65535 (0 picks a free port) or -1 (no UI)", o.uiPort)
	}
	e, err := load(o.common, c.Stderr)
	if err != nil {
		return c.fail(err)
	}
	r := roles{embedded: !e.external, worker: true, gateway: true, stdio: o.stdio,
		ui: !o.noUI && o.uiPort >= 0, uiPort: o.uiPort, uiFixed: c.given("ui-port")}
	if o.pprof != "" {
		stop, err := servePprof(e, o.pprof)
		if err != nil {
			return c.fail(err)
		}
		defer stop()
	}
	return serve(c, e, r, o.temporalPort, o.task)
}

// serve starts the roles, prints how to connect, and runs until SIGINT or
// SIGTERM (or stdin closing, with --stdio).
func serve(c *Call, e *env, r roles, temporalPort int, task string) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	hup := notifyHUP() // reload.go

	s, err := start(ctx, e, r, temporalPort)
	if err != nil {
		fmt.Fprintf(c.Stderr, "airlock: %v\n", err)
		if s != nil {
			s.stop()
		}
		return 1
	}
	defer s.stop()
	watchReload(ctx, e, s.cfg, hup) // reload.go
	s.releaseStartupMemory(ctx)     // memory.go

	if r.stdio {
		// stdout belongs to MCP: everything for people goes to stderr.
		banner(c.Stderr, e, s, r)
		err := s.gw.ServeStdio(ctx, &mcp.IOTransport{Reader: io.NopCloser(c.Stdin), Writer: nopWriteCloser{c.Stdout}}, task)
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
			e.log.Error().Err(err).Msg("stdio session ended")
		}
		e.log.Info().Msg("shutting down")
		return 0
	}
	if r.gateway {
		banner(c.Stdout, e, s, r)
	} else {
		fmt.Fprintf(c.Stdout, "airlock worker polling task queue %q on %s (namespace %s)\n", e.tq, e.flags.address, e.ns)
	}
	return waitForSignal(ctx, e, s)
}

// waitForSignal runs until SIGINT or SIGTERM, or the gateway's HTTP server
// failing.
func waitForSignal(ctx context.Context, e *env, s *stack) int {
	select {
	case <-ctx.Done():
		// Unready at once, so load balancers stop sending here while the
		// listener closes and what is in flight finishes (stop).
		e.health.draining.Store(true)
		e.log.Info().Dur("drain_timeout", e.drain()).Msg("shutting down (signal): no new requests; requests and tool calls in flight may finish within --drain-timeout")
	case err := <-s.httpErr:
		if err != nil {
			e.log.Error().Err(err).Msg("gateway HTTP server failed")
			return 1
		}
	}
	return 0
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// start brings the roles up in dependency order. On error the returned
// stack holds what was started, for stop.
func start(ctx context.Context, e *env, r roles, temporalPort int) (*stack, error) {
	s := &stack{env: e, httpErr: make(chan error, 1)}
	if err := checkSlack(e, r); err != nil {
		return s, err
	}
	if err := makeDataDirs(e); err != nil {
		return s, err
	}
	if err := s.startTracing(ctx, r); err != nil { // tracing.go
		return s, err
	}
	if err := s.startPrograms(ctx, r); err != nil { // programs.go
		return s, err
	}
	if err := s.connectTemporal(ctx, r, temporalPort); err != nil {
		return s, err
	}
	if err := s.observe(r); err != nil {
		return s, err
	}
	if err := s.startUpstreams(ctx); err != nil {
		return s, err
	}
	if err := s.startReload(r); err != nil { // reload.go
		return s, err
	}
	if err := s.startConsent(ctx); err != nil { // credentials.go
		return s, err
	}
	if r.worker {
		if err := s.startWorker(ctx, r.gateway); err != nil {
			return s, err
		}
	}
	if !r.gateway {
		return s, nil
	}
	if err := s.startGateway(r); err != nil {
		return s, err
	}
	if r.stdio {
		// Slack clicks over Socket Mode need no listener.
		return s, s.startSlack(ctx, nil)
	}
	return s, s.serveHTTP(ctx)
}

// makeDataDirs creates the data dir, the scratch directory the example
// filesystem upstream serves, and the directory its rollbacks move created
// files into. They must exist before it starts: it drops a missing one
// with only a warning, and every rollback move into it would then be
// refused.
func makeDataDirs(e *env) error {
	if err := os.MkdirAll(e.dataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	for _, d := range []string{"files/sandbox", "files/rollback-trash"} {
		if err := os.MkdirAll(filepath.Join(e.dataDir, d), 0o700); err != nil {
			return fmt.Errorf("creating %s dir: %w", d, err)
		}
	}
	return nil
}

// connectTemporal starts the embedded Temporal (and its UI) when the roles
// ask for it, else checks there is an external one, and dials it.
func (s *stack) connectTemporal(ctx context.Context, r roles, temporalPort int) error {
	e := s.env
	if r.embedded {
		if err := s.startEmbedded(ctx, r, temporalPort); err != nil {
			return err
		}
	} else if e.flags.address == "" {
		return errors.New("no Temporal to use: pass --temporal-address host:port (or set TEMPORAL_ADDRESS, or temporal.address in the config); only `airlock dev` embeds one")
	}
	tf := e.flags.tls
	if r.embedded {
		tf = tlsFlags{} // the embedded server listens in plain text on 127.0.0.1
	}
	var c client.Client
	var err error
	if r.embedded {
		c, err = dialEmbedded(ctx, e.flags.address, e.ns, e.log, e.tracing.ClientInterceptors()...)
	} else {
		c, err = dial(ctx, e.flags.address, e.ns, tf, e.log, e.tracing.ClientInterceptors()...)
	}
	if err != nil {
		return err
	}
	s.client = c
	s.stops = append(s.stops, c.Close)
	e.health.setTemporal(c)
	if !r.embedded {
		ensureSearchAttributes(ctx, c, e.ns, e.log)
	}
	return nil
}

// startEmbedded starts the embedded Temporal server and, unless turned
// off, its Web UI; the server's address becomes the one to dial.
func (s *stack) startEmbedded(ctx context.Context, r roles, temporalPort int) error {
	e := s.env
	srv, err := devserver.Start(ctx, devserver.Options{
		DataDir:          e.dataDir,
		Namespace:        e.ns,
		Port:             temporalPort,
		SearchAttributes: api.SearchAttributes(),
		Data:             devNamespaceData(e),
		Logger:           e.log.With().Str("component", "temporal-server").Logger(),
	})
	if err != nil {
		return fmt.Errorf("starting embedded Temporal: %w", err)
	}
	s.srv = srv
	s.stops = append(s.stops, func() {
		if err := srv.Stop(); err != nil {
			e.log.Warn().Err(err).Msg("stopping embedded Temporal")
		}
	})
	e.flags.address = srv.HostPort()
	s.stops = append(s.stops, func() { removeServedUI(e.dataDir) })
	if !r.ui {
		return s.recordUI("")
	}
	return s.startUI(ctx, r)
}

// recordUI tells audit show which Web UI, if any, serves the embedded
// Temporal (a failure only costs the link).
func (s *stack) recordUI(url string) error {
	e := s.env
	if err := writeServedUI(e.dataDir, servedUI{TemporalAddress: e.flags.address, UIURL: url}); err != nil {
		e.log.Warn().Err(err).Msg("could not record the Web UI's address for airlock audit show")
	}
	return nil
}

// startUI serves the Temporal Web UI for the embedded server.
func (s *stack) startUI(ctx context.Context, r roles) error {
	e := s.env
	o := devui.Options{Port: r.uiPort, TemporalAddress: e.flags.address, Namespace: e.ns}
	ui, err := devui.Start(ctx, o)
	if err != nil && !r.uiFixed && errors.Is(err, syscall.EADDRINUSE) {
		// Only the default is taken (another dev server, say): the
		// banner prints where the UI went instead.
		e.log.Warn().Err(err).Msg("Temporal UI's default port is taken; using a free one (choose with --ui-port)")
		o.Port = 0
		ui, err = devui.Start(ctx, o)
	}
	if err != nil {
		return fmt.Errorf("%w (pass --ui-port to use another port, 0 for a free one, or --no-ui)", err)
	}
	s.ui = ui
	s.stops = append(s.stops, ui.Stop)
	e.uiURL = firstNonEmpty(e.uiURL, ui.URL()) // links in Slack messages
	return s.recordUI(ui.URL())
}

// startUpstreams starts the wasm servers and the pool of upstream
// connections, and opens the pins.
func (s *stack) startUpstreams(ctx context.Context) error {
	e := s.env
	nat, stopNative, err := startNative(ctx, e)
	if err != nil {
		return err
	}
	s.stops = append(s.stops, stopNative)
	s.pool = newPool(e, nat, func(string) {
		s.gwMu.Lock()
		g := s.gw
		s.gwMu.Unlock()
		if g != nil {
			g.Refresh()
		}
	})
	s.pool.Start(context.WithoutCancel(ctx))
	e.health.setPool(s.pool)
	s.stops = append(s.stops, func() { _ = s.pool.Close() })
	s.pins, err = openPins(e)
	return err
}

// startWorker starts the worker: the activities over the upstream pool,
// the blob store and the notifiers. withGateway: a gateway runs in this
// process, and the relay joins them; a worker alone has none, and its
// upstreams' sampling and elicitation go through the task (activities
// mrtr.go).
func (s *stack) startWorker(ctx context.Context, withGateway bool) error {
	e := s.env
	acts := &activities.Activities{Pins: s.pins, Tools: s.pool, Audit: e.audit,
		// The policy, manifests and approver groups in force at each call
		// (reload.go).
		Current:    func() *activities.Judge { return s.cfg.Current().judge },
		AskTimeout: e.snap.Config.Task.AskTimeout.D()}
	priv, _, err := exchange.KeysFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	acts.SubjectKey = priv
	acts.Consent = s.consent
	if priv != nil {
		e.log.Info().Str("key_id", exchange.KeyID(priv.PublicKey())).Msg("subject key: this worker opens the user tokens sealed to it (upstreams with token_exchange)")
	}
	if withGateway {
		acts.Relay = s.callRelay()
	}
	blobsURL, err := e.snap.Config.BlobsURL(e.dataDir)
	if err != nil {
		return err
	}
	if acts.Blobs, err = blob.Open(ctx, blobsURL); err != nil {
		return fmt.Errorf("%s: %w", e.cfgPath, err)
	}
	s.stops = append(s.stops, func() { _ = acts.Blobs.Close() })
	e.log.Info().Str("blobs", acts.Blobs.String()).Msg("blob store")
	notifiers, err := approvalNotifiers(e)
	if err != nil {
		return err
	}
	acts.Notifiers = append(acts.Notifiers, notifiers...)
	wo := worker.Options{TaskQueue: e.tq, StopTimeout: e.drain(), BuildID: e.buildID(), DeploymentName: e.flags.deployment, Versioning: e.flags.versioning}
	if s.srv != nil {
		// The only worker of its own Temporal: what an earlier process
		// was running when it died is dead; answer it before polling.
		wo.Identity = worker.SoleIdentity()
		if _, err := worker.ResolveOrphans(ctx, s.client, worker.OrphanOptions{Namespace: e.ns, TaskQueue: e.tq, Identity: wo.Identity, Logger: e.log}); err != nil {
			e.log.Warn().Err(err).Msg("some calls in flight when airlock last stopped wait for their heartbeat timeout")
		}
	}
	if err := s.programsReady(ctx); err != nil {
		return err
	}
	w := worker.New(s.client, acts, wo)
	e.log.Info().Str("policy", e.snap.Policy.Version()).Int("rules", len(e.snap.Config.Policy.Rules)).Msg("policy loaded")
	if err := w.Start(); err != nil {
		return fmt.Errorf("starting worker: %w", err)
	}
	s.worker = w
	s.stops = append(s.stops, w.Stop)
	return nil
}

// startGateway makes the gateway over the principals of the
// configuration; with --stdio its caller is the local principal.
func (s *stack) startGateway(r roles) error {
	e := s.env
	cfg := e.snap.Config
	dir := s.cfg.Current().dir // loadVersion checked it has principals
	var local *identity.Principal
	if r.stdio {
		p, err := dir.Local()
		if err != nil {
			return fmt.Errorf("%s: %w", e.cfgPath, err)
		}
		local = p
	} else if p, err := dir.Local(); err == nil {
		local = p
	}
	s.dir = dir
	// Replicas that share the key serve each other's sessions.
	key, keySource, err := cfg.SessionKey(e.dataDir)
	if err != nil {
		return fmt.Errorf("%s: %w", e.cfgPath, err)
	}
	e.log.Info().Str("source", keySource).Str("fingerprint", sessionKeyFingerprint(key)).
		Msg("MCP session IDs are signed with this key; every gateway replica behind one load balancer needs the same one")
	_, subjectPub, err := exchange.KeysFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	for _, m := range e.snap.Manifests {
		if m.Server.ExchangesTokens() && subjectPub == nil {
			e.log.Warn().Str("server", m.Server.Name).Msg("this upstream acts as the calling user (server.http.auth.token_exchange), and no subject key is set: its calls are refused. Set " + exchange.EnvKey + " (or " + exchange.EnvPublicKey + " on a gateway alone); `airlock keys subject` makes one")
		}
	}
	g := gateway.New(gateway.Options{
		SubjectKey:      subjectPub,
		Consent:         s.consent,
		Directory:       dir,
		Local:           local,
		Temporal:        s.client,
		TaskQueue:       e.tq,
		Manifests:       e.snap.Manifests,
		Upstreams:       s.pool,
		ExposeUncovered: cfg.ExposeUncovered,
		Catalog:         cfg.Catalog,
		Programs:        gatewayPrograms(cfg.Programs), // code mode (issue 27)
		PageSize:        cfg.Gateway.PageSize,
		// A stateless request naming no task: its own, or the principal's.
		SharedUnnamedTask: cfg.Gateway.UnnamedCalls == config.UnnamedPrincipalTask,
		Pins:              s.pins,
		Policy:            e.snap.Policy,
		MaxCalls:          cfg.Task.MaxCalls,
		DeadlineAfter:     cfg.Task.Deadline.D(),
		IdleTimeout:       cfg.Task.IdleTimeout.D(),
		RollbackOnDeny:    cfg.Task.RollbackOnDeny,
		RollbackNotify:    cfg.Task.RollbackNotify,
		State:             cfg.StateConfig(),    // task.state
		TaskRateLimits:    cfg.TaskRateLimits(), // issue 16 §3
		Budget:            cfg.Task.Budget,
		InlineWait:        cfg.Approvals.InlineWait.D(),
		AskTimeout:        cfg.Task.AskTimeout.D(),
		Logger:            e.log,
		Version:           version,
		Relay:             s.callRelay(),
		Audit:             e.audit,
		Tracer:            e.tracing.TracerProvider(), // nil: off
		// Approvers decide from an MCP client too (airlock_approvals_*).
		Approvals: mcpApprovals{local: approver.Local{Temporal: s.client, Namespace: e.ns, Audit: e.audit}, groups: func() map[string][]string { return s.cfg.Current().groups }},

		// Idle HTTP sessions end; a principal's open sessions are capped.
		SessionIdle:             cfg.Gateway.SessionIdleTimeout.D(),
		MaxSessionsPerPrincipal: cfg.Gateway.MaxSessionsPerPrincipal,
		TaskConcurrency:         cfg.Gateway.TaskConcurrency,
		TaskBacklog:             cfg.Gateway.TaskBacklog,
		PrincipalShare:          principalShare(cfg.Gateway.PrincipalShare),
		SessionKey:              key,
	})
	s.gwMu.Lock()
	s.gw = g
	s.gwMu.Unlock()
	g.Refresh()
	return nil
}

// startSlack takes Slack clicks for the gateway role (see startSlack).
func (s *stack) startSlack(ctx context.Context, mux *http.ServeMux) error {
	stop, err := startSlack(ctx, s.env, s.client, s.dir, mux)
	if err != nil {
		return err
	}
	if stop != nil {
		s.stops = append(s.stops, stop)
	}
	return nil
}

// serveHTTP serves the gateway's listener: MCP, /metrics, /healthz, the
// approvals page and Slack's interaction endpoint.
func (s *stack) serveHTTP(ctx context.Context) error {
	e := s.env
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.gw.Handler())
	// Users authorize airlock at the providers of upstreams with user_oauth.
	mux.Handle("/oauth/consent/", s.consent.Handler())
	// OAuth clients discover the authorization servers here (RFC 9728).
	s.dir.MountMetadata(mux)
	if e.metricsOnMux() {
		mux.Handle("/metrics", metrics.Handler())
	}
	e.health.mount(mux)
	// Approving without Slack: the page lists the requests a principal may
	// decide, after a login with its API key.
	approvals, err := web.Handler(web.Options{Temporal: s.client, Namespace: e.ns, Directory: s.dir, Audit: e.audit,
		CurrentGroups: func() map[string][]string { return s.cfg.Current().groups }})
	if err != nil {
		return err
	}
	mux.Handle("/approvals", approvals)
	mux.Handle("/approvals/", approvals)
	if err := mountWebhookDecisions(e, s.client, s.dir, mux); err != nil {
		return err
	}
	// Slack clicks: on this listener (slack.mode http) or over Socket Mode.
	// Stopped after the HTTP server, so no click arrives once it closes.
	if err := s.startSlack(ctx, mux); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", e.listen)
	if err != nil {
		return fmt.Errorf("gateway cannot listen on %s: %w (is another airlock running? pass --listen)", e.listen, err)
	}
	s.addr = ln.Addr().String()
	// Bounded reads and a cap on unauthenticated connections: a client
	// without a key must not hold connections (file descriptors) open.
	s.http = limitedServer(e.health.track(mux), e.snap.Config, s.dir, e.log)
	go func() {
		err := s.http.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.httpErr <- err
	}()
	s.stops = append(s.stops, func() { drainHTTP(e, s.http.HTTP, "gateway") })
	return nil
}

// drainHTTP stops srv gracefully: the listener closes at once (new
// connections are refused, idle ones closed) and the requests in flight
// (counted by e.health.track) get --drain-timeout to finish. Then what is
// still open is cut: event streams clients hold open (they reconnect to
// another replica), and answers still waiting at the deadline (an
// approval's inline wait); the clients retry on another replica with the
// same idempotency key.
func drainHTTP(e *env, srv *http.Server, what string) {
	e.health.draining.Store(true)
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), e.drain())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				_ = srv.Close()
				e.log.Warn().Dur("after", time.Since(t0)).Int64("cut", e.health.requests.Load()).Msg(what + ": requests still open at the end of --drain-timeout were cut")
				return
			}
			e.log.Info().Dur("took", time.Since(t0)).Msg(what + ": drained; every request in flight finished")
			return
		case <-tick.C:
			if e.health.requests.Load() > 0 {
				continue
			}
			// Only streams are left: end them.
			_ = srv.Close()
			<-done
			e.log.Info().Dur("took", time.Since(t0)).Msg(what + ": drained; every request in flight finished (open streams closed)")
			return
		}
	}
}

// drain is --drain-timeout (the default for roles without the flag).
func (e *env) drain() time.Duration {
	if e.flags.drain > 0 {
		return e.flags.drain
	}
	return defaultDrain
}

// devKey is the documented key of the example configuration.
const devKey = "airlock-dev-key"

// banner prints what a user needs to connect.
func banner(w io.Writer, e *env, s *stack, r roles) {
	temporal := e.flags.address + " (external), namespace " + e.ns
	if s.srv != nil {
		temporal = s.srv.HostPort() + " (embedded, " + filepath.Join(e.dataDir, "temporal.db") + "), namespace " + e.ns
	}
	if s.ui != nil {
		temporal += "\n  Temporal UI:   " + s.ui.URL() + "   (tasks and their histories)"
	}
	var ups []string
	for _, st := range s.pool.Statuses() {
		ups = append(ups, st.Server)
	}
	bin := airlockBinary(e)
	if r.stdio {
		fmt.Fprintf(w, "airlock %s serving MCP on stdio\n  temporal: %s\n  data:     %s\n  upstreams: %s\n",
			version, temporal, e.dataDir, strings.Join(ups, ", "))
		return
	}
	url := "http://" + s.addr + "/mcp"
	key, keyNote := "<your API key>", "  (keys: principals[].api_key_sha256 in the config; `airlock keys new` makes one)\n"
	if _, err := s.dir.Authenticate(http.Header{"Authorization": {"Bearer " + devKey}}); err == nil {
		key, keyNote = devKey, "  (\""+devKey+"\" is the example configuration's DEV key: replace it before sharing this gateway)\n"
	}
	fmt.Fprintf(w, `airlock %s is running
  MCP endpoint:  %s   (streamable HTTP)
  approvals:     http://%s/approvals   (or: airlock approvals list)
  Temporal:      %s
  data:          %s
  config:        %s
  upstreams:     %s

HTTP clients (Cursor, Claude Code, custom agents) send an API key:
  {"mcpServers": {"airlock": {"url": "%s", "headers": {"Authorization": "Bearer %s"}}}}
  claude mcp add --transport http airlock %s --header "Authorization: Bearer %s"
%s
Claude Desktop (stdio; claude_desktop_config.json). It attaches to this
process's Temporal, which runs the calls:
  {"mcpServers": {"airlock": {"command": %q, "args": ["gateway", "--stdio", "--config", %q, "--temporal-address", %q]}}}

Reattach to a task after a client restart: send the header "Airlock-Task: <task ID>"
(the ID is in every result's _meta "airlock.dev/task").
Stop with Ctrl-C; restarting on the same data dir resumes every task.
`, version, url, s.addr, temporal, e.dataDir, e.cfgPath, strings.Join(ups, ", "), url, key, url, key, keyNote, bin, e.cfgPath, e.flags.address)
}

// airlockBinary is the path to put in client configs: this executable,
// unless it is a temporary `go run` build.
func airlockBinary(e *env) string {
	exe, err := os.Executable()
	if err == nil && !strings.Contains(exe, "go-build") {
		return exe
	}
	return filepath.Join(e.cfgDir, "bin", "airlock") + " (build it: go build -o bin/airlock ./cmd/airlock)"
}

// sessionKeyFingerprint lets operators compare replicas' session keys in
// their logs without printing the key.
func sessionKeyFingerprint(key []byte) string {
	sum := sha256.Sum256(append([]byte("airlock-session-key-fingerprint\x00"), key...))
	return hex.EncodeToString(sum[:6])
}

// gatewayPrograms is the gateway's airlock_run_program configuration
// (nil: not offered).
func gatewayPrograms(p config.Programs) *gateway.ProgramOptions {
	if !p.ProgramsEnabled() {
		return nil
	}
	return &gateway.ProgramOptions{MaxDescriptionBytes: p.DescriptionBytes(), Limits: p.Limits.Effective()}
}

// principalShare is gateway.Options.PrincipalShare for
// gateway.principal_share, whose 0 turns the bound off.
func principalShare(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
