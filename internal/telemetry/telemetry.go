// Package telemetry sets up OpenTelemetry tracing for an airlock role: an
// OTLP exporter (gRPC or HTTP), the sampler, the service's resource, and
// the Temporal SDK's tracing interceptor (go.temporal.io/sdk/contrib/
// opentelemetry) that carries a call's trace from the gateway's Update
// through the task's workflow into the call's activity.
//
// Tracing is off unless an endpoint is configured (the telemetry block of
// airlock.yaml) or OTEL_EXPORTER_OTLP_ENDPOINT / _TRACES_ENDPOINT is set;
// off, New returns nil and nothing is installed anywhere: no provider, no
// interceptor, no middleware.
//
// It imports the OpenTelemetry SDK and exporters, the Temporal SDK's
// interceptor packages and the standard library; only commands and tests
// import it.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// Protocols of the OTLP exporter (the values of OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// DefaultServiceName is the service.name prefix of airlock's spans.
const DefaultServiceName = "airlock"

// Options configure New. The zero value is tracing off (unless the
// environment names an endpoint).
type Options struct {
	// Endpoint is the collector's base URL: http://host:4318 (OTLP/HTTP
	// posts to <endpoint>/v1/traces unless the URL has a path of its own)
	// or, with ProtocolGRPC, http://host:4317. http:// is plain text,
	// https:// TLS. Empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as it
	// is), else OTEL_EXPORTER_OTLP_ENDPOINT (a base URL, as above); none
	// set: tracing is off. The exporters read the other OTEL_EXPORTER_OTLP_*
	// variables (headers, certificates, timeout) themselves.
	Endpoint string
	// Protocol is ProtocolGRPC or ProtocolHTTP ("http" is taken for the
	// latter). Empty: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then
	// OTEL_EXPORTER_OTLP_PROTOCOL, else ProtocolHTTP.
	Protocol string
	// ServiceName is service.name (OTEL_SERVICE_NAME overrides it, as does
	// service.name in OTEL_RESOURCE_ATTRIBUTES). Default DefaultServiceName.
	ServiceName string
	// Version is service.version.
	Version string
	// SamplingRatio, when set, samples that share (0 to 1) of the traces
	// that start here, and follows the caller's decision for those that
	// continue a caller's trace. Nil: OTEL_TRACES_SAMPLER if set, else
	// every trace (parent-based).
	SamplingRatio *float64
	// Getenv reads the environment (default os.Getenv).
	Getenv func(string) string

	// Exporter, when set, replaces the OTLP exporter (tests); tracing is
	// then on whatever the endpoint.
	Exporter sdktrace.SpanExporter
}

// Tracing is tracing set up for one process. A nil *Tracing is tracing off:
// its methods return nothing to install.
type Tracing struct {
	tp   *sdktrace.TracerProvider
	ic   interceptor.Interceptor
	desc string
}

// New sets tracing up as o says, or returns nil, nil when it is off.
// Errors name what to fix.
func New(ctx context.Context, o Options) (*Tracing, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if off, _ := strconv.ParseBool(getenv("OTEL_SDK_DISABLED")); off {
		return nil, nil
	}
	exp, desc := o.Exporter, "a test exporter"
	if exp == nil {
		var err error
		if exp, desc, err = otlpExporter(ctx, o, getenv); exp == nil || err != nil {
			return nil, err
		}
	}
	name := o.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	// The environment's resource attributes (OTEL_SERVICE_NAME,
	// OTEL_RESOURCE_ATTRIBUTES) win over the configuration, as operators
	// expect of OpenTelemetry.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("telemetry: service resource: %w", err)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if o.SamplingRatio != nil {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*o.SamplingRatio))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	ic, err := TemporalInterceptor(tp)
	if err != nil {
		_ = tp.Shutdown(ctx)
		return nil, err
	}
	return &Tracing{tp: tp, ic: ic, desc: fmt.Sprintf("%s as service %q", desc, name)}, nil
}

// otlpExporter makes the OTLP exporter, or returns nil when no endpoint is
// configured or in the environment.
func otlpExporter(ctx context.Context, o Options, getenv func(string) string) (sdktrace.SpanExporter, string, error) {
	proto := firstNonEmpty(o.Protocol, getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), ProtocolHTTP)
	if proto == "http" {
		proto = ProtocolHTTP
	}
	if proto != ProtocolGRPC && proto != ProtocolHTTP {
		return nil, "", fmt.Errorf("telemetry: protocol %q: use %s or %s", proto, ProtocolGRPC, ProtocolHTTP)
	}
	// target is the URL the exporter sends to: the configured endpoint
	// (OTLP/HTTP adds /v1/traces unless it has a path), else
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else
	// OTEL_EXPORTER_OTLP_ENDPOINT (OTLP/HTTP adds /v1/traces).
	endpoint, target := strings.TrimSpace(o.Endpoint), ""
	switch sig, base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")), strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); {
	case endpoint != "":
		target = endpoint
		if proto == ProtocolHTTP {
			target = HTTPTracesURL(endpoint)
		}
	case sig != "":
		endpoint, target = sig, sig
	case base != "":
		endpoint, target = base, base
		if proto == ProtocolHTTP {
			target = strings.TrimRight(base, "/") + "/v1/traces"
		}
	default:
		return nil, "", nil
	}
	if err := CheckEndpoint(endpoint); err != nil {
		return nil, "", fmt.Errorf("telemetry endpoint: %w", err)
	}
	if proto == ProtocolGRPC {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(target))
		if err != nil {
			return nil, "", fmt.Errorf("telemetry: OTLP/gRPC exporter to %s: %w", endpoint, err)
		}
		return exp, "OTLP/gRPC to " + endpoint, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(target))
	if err != nil {
		return nil, "", fmt.Errorf("telemetry: OTLP/HTTP exporter to %s: %w", target, err)
	}
	return exp, "OTLP/HTTP to " + target, nil
}

// CheckEndpoint says what is wrong with a configured collector URL, or nil.
func CheckEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %v", endpoint, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want http://host:port (plain text) or https://host:port (TLS), e.g. http://otel-collector:4318", endpoint)
	case u.Host == "":
		return fmt.Errorf("%q has no host; write e.g. http://otel-collector:4318", endpoint)
	case u.User != nil:
		return errors.New("the endpoint must not hold credentials; give the collector's headers in OTEL_EXPORTER_OTLP_HEADERS")
	}
	return nil
}

// HTTPTracesURL is where OTLP/HTTP posts spans for a configured endpoint:
// the endpoint itself when it has a path, else <endpoint>/v1/traces (as
// for OTEL_EXPORTER_OTLP_ENDPOINT).
func HTTPTracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}

// TemporalInterceptor is the Temporal SDK's OpenTelemetry interceptor over
// tp. On a client's options (client.Options.Interceptors) it traces the
// client's calls (the gateway's Update-with-Start, and Update) and, because
// it is a worker interceptor too, every worker made from that client:
// workflow runs, update handlers, activity starts and runs. Trace context
// travels in Temporal headers as W3C traceparent; baggage is not carried,
// and queries (status polls) are not traced.
func TemporalInterceptor(tp trace.TracerProvider) (interceptor.Interceptor, error) {
	ic, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:              tp.Tracer("go.temporal.io/sdk"),
		TextMapPropagator:   propagation.TraceContext{},
		DisableBaggage:      true,
		DisableQueryTracing: true,
	})
	if err != nil {
		return nil, fmt.Errorf("telemetry: Temporal tracing interceptor: %w", err)
	}
	return ic, nil
}

// TracerProvider is the provider of the gateway's spans; nil when off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// ClientInterceptors go on the Temporal client's options; nil when off.
func (t *Tracing) ClientInterceptors() []interceptor.ClientInterceptor {
	if t == nil {
		return nil
	}
	return []interceptor.ClientInterceptor{t.ic}
}

// String says where spans go, for the log.
func (t *Tracing) String() string {
	if t == nil {
		return "off"
	}
	return t.desc
}

// Shutdown exports what is buffered and stops; ctx bounds the wait.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s = strings.TrimSpace(s); s != "" {
			return s
		}
	}
	return ""
}
