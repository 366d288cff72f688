package tracing_test

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/internal/tracing"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestMetaRoundTrip(t *testing.T) {
	ctx := tracing.ExtractMeta(context.Background(), map[string]any{tracing.MetaTraceparent: parent, tracing.MetaTracestate: "v=1", "other": 3})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || sc.TraceState().String() != "v=1" {
		t.Fatalf("extracted %+v", sc)
	}
	meta := tracing.InjectMeta(ctx, map[string]any{"airlock.dev/idempotency-key": "k"})
	if meta[tracing.MetaTraceparent] != parent || meta[tracing.MetaTracestate] != "v=1" || meta["airlock.dev/idempotency-key"] != "k" {
		t.Fatalf("injected %v", meta)
	}
	h := http.Header{}
	tracing.InjectHeader(ctx, h)
	if h.Get("traceparent") != parent || h.Get("tracestate") != "v=1" {
		t.Fatalf("header %v", h)
	}
	if sc := trace.SpanContextFromContext(tracing.ExtractHeader(context.Background(), h)); sc.TraceID() != trace.SpanContextFromContext(ctx).TraceID() {
		t.Fatalf("header round trip: %+v", sc)
	}
}

func TestNothingWithoutATrace(t *testing.T) {
	ctx := context.Background()
	if m := tracing.InjectMeta(ctx, nil); m != nil {
		t.Fatalf("InjectMeta without a span = %v, want nil", m)
	}
	h := http.Header{}
	tracing.InjectHeader(ctx, h)
	if len(h) != 0 {
		t.Fatalf("InjectHeader without a span set %v", h)
	}
	for _, meta := range []map[string]any{
		nil,
		{tracing.MetaTraceparent: "not-a-traceparent"},
		{tracing.MetaTraceparent: 42},
		{tracing.MetaTraceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, // all-zero trace ID
	} {
		if sc := trace.SpanContextFromContext(tracing.ExtractMeta(ctx, meta)); sc.IsValid() {
			t.Errorf("ExtractMeta(%v) = %+v, want no span context", meta, sc)
		}
	}
}
