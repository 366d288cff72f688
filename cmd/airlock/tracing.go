package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/airlock-run/airlock/internal/telemetry"
)

// Roles as service names: service.name is <telemetry.service_name>-<role>.
const (
	roleGateway  = "gateway"
	roleWorker   = "worker"
	roleApprover = "approver"
)

// startTracing sets up tracing as the configuration's telemetry block and
// the OTEL_* environment say, for a process that runs role ("" for airlock
// dev, all roles in one process), into e.tracing; off, e.tracing stays nil
// and nothing is installed. The returned stop exports what is buffered.
func startTracing(ctx context.Context, e *env, role string) (stop func(), err error) {
	cfg := e.snap.Config.Telemetry
	name := firstNonEmpty(cfg.ServiceName, telemetry.DefaultServiceName)
	if role != "" {
		name += "-" + role
	}
	t, err := telemetry.New(ctx, telemetry.Options{Endpoint: cfg.Endpoint, Protocol: cfg.Protocol, ServiceName: name,
		Version: version, SamplingRatio: cfg.SamplingRatio, Getenv: os.Getenv})
	if err != nil {
		return nil, fmt.Errorf("%w (see telemetry in %s)", err, e.cfgPath)
	}
	if t == nil {
		return func() {}, nil
	}
	e.tracing = t
	e.log.Info().Str("export", t.String()).Msg("tracing on")
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			e.log.Warn().Err(err).Msg("tracing: spans not exported at shutdown")
		}
	}, nil
}

// tracingRole is the role a stack's process reports as.
func (r roles) tracingRole() string {
	switch {
	case r.gateway && r.worker:
		return ""
	case r.gateway:
		return roleGateway
	default:
		return roleWorker
	}
}

// startTracing is startTracing for the roles of a stack, before it dials
// Temporal (the client carries the tracing interceptor).
func (s *stack) startTracing(ctx context.Context, r roles) error {
	stop, err := startTracing(ctx, s.env, r.tracingRole())
	if err != nil {
		return err
	}
	s.stops = append(s.stops, stop)
	return nil
}
