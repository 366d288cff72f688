package upstream

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/internal/tracing"
)

// tracerName names the spans of upstream calls.
const tracerName = "github.com/airlock-run/airlock/internal/upstream"

// traceCall starts the client span of one upstream tools/call under the
// span in ctx (the worker's activity span), from that span's own provider:
// the pool needs no tracing configuration, and without a span in ctx (tracing
// off) the span is a no-op and nothing is propagated. end records the
// outcome and ends it.
func traceCall(ctx context.Context, server, tool string) (context.Context, func(*mcp.CallToolResult, error)) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return ctx, func(*mcp.CallToolResult, error) {}
	}
	ctx, span := parent.TracerProvider().Tracer(tracerName).Start(ctx, "tools/call "+tool,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.AttrMethod.String("tools/call"), tracing.AttrTool.String(tool),
			tracing.AttrOperation.String("execute_tool"), tracing.AttrUpstream.String(server)))
	return ctx, func(res *mcp.CallToolResult, err error) {
		switch {
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		case res != nil && res.IsError:
			span.SetAttributes(tracing.AttrErrorType.String("tool_error"))
			span.SetStatus(codes.Error, "the tool reported an error")
		}
		span.End()
	}
}
