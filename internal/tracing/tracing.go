// Package tracing carries W3C trace context across airlock's MCP edges: out
// of a request's _meta (SEP-414) or HTTP headers into a Go context, and from
// a context into an upstream call's _meta and HTTP headers. It also names
// the span attributes the gateway and the upstream pool set.
//
// It uses the OpenTelemetry API only (no SDK, no exporter): when tracing is
// off, contexts hold no span and every function here does nothing. Setting
// tracing up (exporters, sampling, the Temporal interceptor) is package
// internal/telemetry's job. It imports the OpenTelemetry API and the
// standard library only.
package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The _meta keys SEP-414 reserves for W3C Trace Context: unprefixed, an
// exception to MCP's rule that _meta keys carry a DNS prefix, to match the
// OpenTelemetry semantic conventions for MCP. (Baggage, the third key, is
// neither read nor sent: it may carry anything a caller put in it.)
const (
	MetaTraceparent = "traceparent"
	MetaTracestate  = "tracestate"
)

// Span attributes. The mcp.* and gen_ai.* names are OpenTelemetry's
// semantic conventions for MCP; airlock.* are airlock's own. Arguments and
// results are never recorded: they may hold secrets or personal data.
const (
	AttrMethod    = attribute.Key("mcp.method.name")
	AttrSession   = attribute.Key("mcp.session.id")
	AttrTool      = attribute.Key("gen_ai.tool.name")
	AttrOperation = attribute.Key("gen_ai.operation.name")
	AttrErrorType = attribute.Key("error.type")
	AttrTask      = attribute.Key("airlock.task.id")
	AttrCall      = attribute.Key("airlock.call.id")
	AttrPrincipal = attribute.Key("airlock.principal")
	AttrUpstream  = attribute.Key("airlock.upstream")
)

// w3c is the only propagation format airlock speaks on its MCP edges,
// whatever the process's global propagator is.
var w3c = propagation.TraceContext{}

// metaCarrier reads and writes trace context in a _meta object.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	return []string{MetaTraceparent, MetaTracestate}
}

// InjectMeta writes the trace context of ctx's span into meta under
// traceparent and tracestate, and returns meta (a new map when meta is nil
// and there is something to write). Without a span it returns meta as is.
func InjectMeta(ctx context.Context, meta map[string]any) map[string]any {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return meta
	}
	if meta == nil {
		meta = map[string]any{}
	}
	w3c.Inject(ctx, metaCarrier(meta))
	return meta
}

// ExtractMeta returns ctx with the remote span context that meta's
// traceparent (and tracestate) name, or ctx unchanged when meta has none or
// a malformed one.
func ExtractMeta(ctx context.Context, meta map[string]any) context.Context {
	if _, ok := meta[MetaTraceparent].(string); !ok {
		return ctx
	}
	return w3c.Extract(ctx, metaCarrier(meta))
}

// InjectHeader writes the trace context of ctx's span as traceparent and
// tracestate headers; nothing without a span.
func InjectHeader(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		w3c.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// ExtractHeader returns ctx with the remote span context of h's
// traceparent header, or ctx unchanged when there is none.
func ExtractHeader(ctx context.Context, h http.Header) context.Context {
	if h == nil || h.Get(MetaTraceparent) == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}
