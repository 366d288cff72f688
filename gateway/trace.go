package gateway

import (
	"context"
	"reflect"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/internal/tracing"
)

// tracerName names the gateway's spans.
const tracerName = "github.com/airlock-run/airlock/gateway"

// traceMiddleware makes a server span of every MCP request the gateway
// receives ("tools/call <tool>" for calls, the method otherwise). It
// continues the caller's trace when the request carries one: _meta
// traceparent (SEP-414), else the HTTP traceparent header. The span is in
// the context the rest of the request runs in, so the Temporal client's
// tracing interceptor makes the Update a child of it and carries the trace
// into the task's workflow and the call's activity. Installed only when
// Options.Tracer is set.
func (g *Gateway) traceMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	tr := g.opts.Tracer.Tracer(tracerName)
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if strings.HasPrefix(method, "notifications/") {
			return next(ctx, method, req)
		}
		if extra := req.GetExtra(); extra != nil {
			ctx = tracing.ExtractHeader(ctx, extra.Header)
		}
		// _meta is the request's own; it wins over the connection's header.
		// (Params may be a typed nil: tools/list without params.)
		if p := req.GetParams(); p != nil && !reflect.ValueOf(p).IsNil() {
			ctx = tracing.ExtractMeta(ctx, p.GetMeta())
		}
		name := method
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(tracing.AttrMethod.String(method))}
		if cr, ok := req.(*mcp.CallToolRequest); ok && cr.Params != nil {
			name += " " + cr.Params.Name
			opts = append(opts, trace.WithAttributes(tracing.AttrTool.String(cr.Params.Name), tracing.AttrOperation.String("execute_tool")))
		}
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil && ss.ID() != "" {
			opts = append(opts, trace.WithAttributes(tracing.AttrSession.String(ss.ID())))
		}
		ctx, span := tr.Start(ctx, name, opts...)
		defer span.End()
		res, err := next(ctx, method, req)
		switch r, _ := res.(*mcp.CallToolResult); {
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		case r != nil && r.IsError:
			span.SetAttributes(tracing.AttrErrorType.String("tool_error"))
			span.SetStatus(codes.Error, "the call's result is an error")
		}
		return res, err
	}
}

// traceCall names the task, the call and the caller on the request's span
// (never the arguments: they may hold secrets).
func traceCall(ctx context.Context, taskID, callID, principal string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.AttrTask.String(taskID), tracing.AttrCall.String(callID), tracing.AttrPrincipal.String(principal))
}
