package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/metrics"
)

// Defaults of --metrics-listen for the roles without an HTTP listener of
// their own (the gateway's is 7400, the approver's 7401).
const defaultWorkerMetrics = "127.0.0.1:7402"

// metricsOff is the --metrics-listen value that serves /metrics nowhere.
const metricsOff = "off"

// metricsOnMux reports whether /metrics goes on the role's own HTTP
// listener: unless --metrics-listen names a listener of its own (or off).
func (e *env) metricsOnMux() bool { return e.flags.metricsListen == "" }

// auditDest is where the audit stream goes: --audit-log, else the
// configuration's audit.log, else <data dir>/audit.jsonl.
func (e *env) auditDest() string {
	return firstNonEmpty(e.flags.auditLog, e.snap.Config.AuditLog(e.dataDir))
}

// openAudit opens the audit stream into e.audit; stdout is refused when it
// carries MCP (--stdio).
func openAudit(e *env, stdio bool) (func(), error) {
	dest := e.auditDest()
	if stdio && dest == auditstream.Stdout {
		return nil, errors.New("the audit log cannot go to stdout with --stdio (stdout carries MCP): pass --audit-log stderr or a file")
	}
	l, c, err := auditstream.Open(dest, os.Stdout, e.stderr)
	if err != nil {
		return nil, fmt.Errorf("%w (set audit.log in %s or pass --audit-log)", err, e.cfgPath)
	}
	e.audit = l
	if l != nil {
		e.log.Info().Str("to", dest).Msg("audit log")
	}
	return func() { _ = c.Close() }, nil
}

// observe sets up what a serving role reports besides its work: the audit
// log, /metrics on a listener of its own when --metrics-listen names one,
// and, on the roles that face people (gateway, approver), the count of
// tasks waiting for approval.
func (s *stack) observe(r roles) error {
	stop, err := openAudit(s.env, r.stdio)
	if err != nil {
		return err
	}
	s.stops = append(s.stops, stop)
	stop, err = serveMetrics(s.env)
	if err != nil {
		return err
	}
	s.stops = append(s.stops, stop)
	if r.gateway {
		s.stops = append(s.stops, watchPending(s.client, s.env.ns))
	}
	return nil
}

// serveMetrics serves /metrics (and /healthz, /readyz) on --metrics-listen when it
// names an address. The returned function stops it.
func serveMetrics(e *env) (func(), error) {
	addr := e.flags.metricsListen
	if addr == "" || addr == metricsOff {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics cannot listen on %s: %w (pass --metrics-listen with another address, or off)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler())
	e.health.mount(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error().Err(err).Msg("metrics listener failed")
		}
	}()
	e.log.Info().Str("url", "http://"+ln.Addr().String()+"/metrics").Msg("serving metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// watchPending reports airlock_approvals_pending from Temporal's visibility
// for as long as the returned function has not been called.
func watchPending(c client.Client, ns string) func() {
	p := metrics.NewPending(func(ctx context.Context) (int64, error) { return approver.CountPending(ctx, c, ns) }, 0)
	if err := metrics.Registry.Register(p); err != nil {
		return func() {} // another stack in this process reports it already
	}
	return func() { metrics.Registry.Unregister(p) }
}
