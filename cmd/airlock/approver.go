package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/approver/slack"
	"github.com/airlock-run/airlock/approver/webhook"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/metrics"
)

// defaultApproverListen is where `airlock approver` takes Slack
// interactions unless --listen says otherwise (the gateway has 7400).
const defaultApproverListen = "127.0.0.1:7401"

const approverLong = `Takes approvers' Slack clicks and delivers them to the waiting tasks. With
slack.mode http it serves Slack's interaction endpoint on
http://<listen><slack.interactions_path> (point the Slack app's
Interactivity Request URL at its public address); with slack.mode socket it
connects to Slack over Socket Mode (no public URL). Every request's
signature is checked with the signing secret. Stateless: run as many
replicas as needed. airlock dev and airlock gateway serve the same endpoint
on their own listener.

The secrets are read from the environment variables the slack block names
(default SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN).

Prometheus metrics (tasks waiting for approval, the Temporal SDK's) are at
/metrics on its listener, or on --metrics-listen. Every decision delivered
or refused is written to the audit stream (--audit-log).`

func approverCommand() *Command {
	return &Command{Name: "approver", Usage: "--temporal-address HOST:PORT [flags]",
		Short: "take approvers' Slack clicks (interaction endpoint or Socket Mode)",
		Long:  approverLong, NoArgs: true, Flags: bind(approverFlags, runApprover)}
}

func approverFlags(fs *flag.FlagSet, f *commonFlags) {
	f.register(fs)
	f.registerDrain(fs, "decisions being delivered")
	if l := fs.Lookup("listen"); l != nil {
		l.Usage = "interaction endpoint's HTTP `address` (slack.mode http)"
		l.DefValue = defaultApproverListen
	}
	if l := fs.Lookup("metrics-listen"); l != nil {
		l.Usage = "serve Prometheus /metrics on a listener of its own at this `address` (\"off\": nowhere; default: at /metrics on --listen with slack.mode http, on " + defaultApproverListen + " with socket)"
	}
}

func runApprover(c *Call, f *commonFlags) int {
	if code := badDrain(c, f.drain); code != 0 {
		return code
	}
	e, err := load(*f, c.Stderr)
	if err != nil {
		return c.fail(err)
	}
	cfg := e.snap.Config
	if cfg.Slack == nil {
		return c.fail(fmt.Errorf("%s has no slack block: add one (slack: {mode: http}) and the approver groups' slack_channel; without Slack, decide with airlock approvals", e.cfgPath))
	}
	if !e.external {
		return c.fail(fmt.Errorf("no Temporal address: pass --temporal-address HOST:PORT (or set TEMPORAL_ADDRESS, or temporal.address in %s); airlock dev serves Slack itself", e.cfgPath))
	}
	listen := firstNonEmpty(f.listen, defaultApproverListen)
	if e.flags.metricsListen == "" && cfg.Slack.Mode == config.SlackModeSocket {
		e.flags.metricsListen = listen // no interaction endpoint there
	}
	dir := identity.New(cfg)
	if dir.Empty() {
		return c.fail(fmt.Errorf("%s: no principals: approvers are principals with a slack_user_id", e.cfgPath))
	}
	if err := checkSlack(e, roles{gateway: true}); err != nil {
		return c.fail(err)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	hup := notifyHUP() // reload.go
	tc, stop, err := startApprover(ctx, e)
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	watchReload(ctx, e, approverReload(e, dir), hup) // reload.go
	app := slack.NewApp(cfg, os.Getenv)
	if app.Config.Mode == config.SlackModeSocket {
		return approveOverSocket(ctx, c, e, app, tc, dir)
	}
	return approveOverHTTP(ctx, c, e, app, tc, dir, listen)
}

// startApprover dials Temporal and opens what the approver reports to: the
// audit stream, /metrics, the count of tasks waiting for approval. stop
// closes them.
func startApprover(ctx context.Context, e *env) (client.Client, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	stopTracing, err := startTracing(ctx, e, roleApprover) // tracing.go
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, stopTracing)
	tc, err := dial(ctx, e.flags.address, e.ns, e.flags.tls, e.log, e.tracing.ClientInterceptors()...)
	if err != nil {
		stop()
		return nil, nil, err
	}
	stops = append(stops, tc.Close)
	e.health.setTemporal(tc)
	closeAudit, err := openAudit(e, false)
	if err != nil {
		stop()
		return nil, nil, err
	}
	stops = append(stops, closeAudit)
	stopMetrics, err := serveMetrics(e)
	if err != nil {
		stop()
		return nil, nil, err
	}
	stops = append(stops, stopMetrics, watchPending(tc, e.ns))
	return tc, stop, nil
}

// approveOverSocket takes Slack clicks over Socket Mode until ctx ends.
func approveOverSocket(ctx context.Context, c *Call, e *env, app *slack.App, tc client.Client, dir *identity.Directory) int {
	opts, err := interactionOptions(e, app, tc, dir)
	if err != nil {
		return c.fail(err)
	}
	api, err := app.AppClient()
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.Stdout, "airlock approver taking Slack clicks over Socket Mode (Temporal %s, namespace %s)\n", e.flags.address, e.ns)
	if err := slack.RunSocketMode(ctx, slack.SocketModeOptions{Client: api, Interactions: opts}); err != nil {
		return c.fail(err)
	}
	return 0
}

// approveOverHTTP serves Slack's interaction endpoint on listen until a
// signal (or the server failing).
func approveOverHTTP(ctx context.Context, c *Call, e *env, app *slack.App, tc client.Client, dir *identity.Directory, listen string) int {
	h, err := interactionHandler(e, app, tc, dir)
	if err != nil {
		return c.fail(err)
	}
	mux := http.NewServeMux()
	mux.Handle(app.Config.InteractionsPath, h)
	if err := mountWebhookDecisions(e, tc, dir, mux); err != nil {
		return c.fail(err)
	}
	if e.metricsOnMux() {
		mux.Handle("/metrics", metrics.Handler())
	}
	e.health.mount(mux)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return c.fail(fmt.Errorf("cannot listen on %s: %v (pass --listen)", listen, err))
	}
	// No API keys here: every request counts as unauthenticated (Slack's
	// signature is checked on the body, which the limits bound).
	srv := limitedServer(e.health.track(mux), e.snap.Config, nil, e.log)
	httpErr := make(chan error, 1)
	go func() { httpErr <- srv.Serve(ln) }()
	fmt.Fprintf(c.Stdout, "airlock approver taking Slack clicks at http://%s%s (Temporal %s, namespace %s)\n",
		ln.Addr(), app.Config.InteractionsPath, e.flags.address, e.ns)
	code := 0
	select {
	case <-ctx.Done():
		e.log.Info().Dur("drain_timeout", e.drain()).Msg("shutting down: decisions in flight may be delivered within --drain-timeout")
	case err := <-httpErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error().Err(err).Msg("approver HTTP server failed")
			code = 1
		}
	}
	drainHTTP(e, srv.HTTP, "approver")
	if err := h.Close(); err != nil {
		e.log.Warn().Err(err).Msg("stopping the Slack interaction endpoint")
	}
	return code
}

// checkSlack fails fast, naming the environment variable, when a role
// needs a Slack secret that is not set: the worker posts with the bot
// token; the gateway role (and airlock approver) verifies clicks with the
// signing secret (mode http, with a listener) or connects with the
// app-level token (mode socket), and replies with the bot token.
func checkSlack(e *env, r roles) error {
	cfg := e.snap.Config
	if cfg.Slack == nil {
		return nil
	}
	app := slack.NewApp(cfg, os.Getenv)
	var err error
	if r.worker && cfg.NotifiesSlack() {
		_, err = app.BotClient()
	}
	if err == nil && r.gateway {
		switch {
		case app.Config.Mode == config.SlackModeSocket:
			_, err = app.AppClient()
		case !r.stdio:
			if _, err = app.BotClient(); err == nil {
				_, err = app.SigningSecret()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", e.cfgPath, err)
	}
	return nil
}

// approvalNotifiers are the worker's notifiers: Slack when the
// configuration has a slack block and approvals.notify (if given) names
// slack, and each webhook approval channel. A missing secret is an error
// naming its variable.
func approvalNotifiers(e *env) ([]activities.Notifier, error) {
	cfg := e.snap.Config
	var out []activities.Notifier
	if cfg.NotifiesSlack() {
		n, err := slack.NewApp(cfg, os.Getenv).Notifier()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.cfgPath, err)
		}
		out = append(out, n.WithTaskLinks(e.uiURL, e.ns))
	}
	chans, err := webhook.Channels(cfg, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.cfgPath, err)
	}
	for _, ch := range chans {
		out = append(out, webhook.NewNotifier(ch, nil))
	}
	return out, nil
}

// mountWebhookDecisions serves webhook.DecisionPath on mux when the
// configuration has webhook approval channels.
func mountWebhookDecisions(e *env, c client.Client, dir *identity.Directory, mux *http.ServeMux) error {
	chans, err := webhook.Channels(e.snap.Config, os.Getenv)
	if err != nil {
		return fmt.Errorf("%s: %w", e.cfgPath, err)
	}
	if len(chans) == 0 {
		return nil
	}
	mux.Handle(webhook.DecisionPath, webhook.Decisions(webhook.DecisionOptions{
		Channels: chans, Directory: dir, Local: approver.Local{Temporal: c, Namespace: e.ns, Audit: e.audit}, Audit: e.audit}))
	return nil
}

func interactionOptions(e *env, app *slack.App, c client.Client, dir *identity.Directory) (slack.InteractionOptions, error) {
	api, err := app.BotClient()
	if err != nil {
		return slack.InteractionOptions{}, fmt.Errorf("%s: %w", e.cfgPath, err)
	}
	return slack.InteractionOptions{Slack: api, Users: dir, Temporal: c, Logger: e.log, Audit: e.audit}, nil
}

func interactionHandler(e *env, app *slack.App, c client.Client, dir *identity.Directory) (*slack.Interactions, error) {
	opts, err := interactionOptions(e, app, c, dir)
	if err != nil {
		return nil, err
	}
	secret, err := app.SigningSecret()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.cfgPath, err)
	}
	opts.SigningSecret = secret
	return slack.InteractionHandler(opts), nil
}

// startSlack takes Slack clicks inside the gateway role: on mux (the
// gateway's own listener) with slack.mode http, or over Socket Mode with
// slack.mode socket. It returns what stops it; nothing without a slack
// block, or with mode http and no listener (stdio).
func startSlack(ctx context.Context, e *env, c client.Client, dir *identity.Directory, mux *http.ServeMux) (func(), error) {
	cfg := e.snap.Config
	if cfg.Slack == nil {
		return nil, nil
	}
	app := slack.NewApp(cfg, os.Getenv)
	if app.Config.Mode == config.SlackModeSocket {
		opts, err := interactionOptions(e, app, c, dir)
		if err != nil {
			return nil, err
		}
		api, err := app.AppClient()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.cfgPath, err)
		}
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := slack.RunSocketMode(sctx, slack.SocketModeOptions{Client: api, Interactions: opts}); err != nil {
				e.log.Error().Err(err).Msg("Slack Socket Mode stopped; Slack clicks are not taken (decide with airlock approvals)")
			}
		}()
		e.log.Info().Msg("taking Slack clicks over Socket Mode")
		return func() { cancel(); <-done }, nil
	}
	if mux == nil {
		return nil, nil
	}
	h, err := interactionHandler(e, app, c, dir)
	if err != nil {
		return nil, err
	}
	mux.Handle(app.Config.InteractionsPath, h)
	return func() {
		if err := h.Close(); err != nil {
			e.log.Warn().Err(err).Msg("stopping the Slack interaction endpoint")
		}
	}, nil
}
