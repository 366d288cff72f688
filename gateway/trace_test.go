package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/api"
)

// The gateway's spans: one server span per request (not per
// notification), calls named after the tool and carrying task, call and
// principal but no arguments, and a tool's error result marked as an
// error. (integration/tracing_test.go follows a call through Temporal.)
func TestTraceSpansOfRequests(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ft := &fakeTemporal{answer: func(u sentUpdate, n int) (api.CallResult, error) {
		if n == 2 {
			return api.CallResult{Outcome: api.OutcomeToolError, Result: json.RawMessage(`{"content":[{"type":"text","text":"disk full"}],"isError":true}`)}, nil
		}
		return okResult("fine"), nil
	}}
	cs := connectMemory(t, newTestGateway(t, ft, Options{Principal: "alice", Tracer: tp}))
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if res := callTool(t, cs, "counter__echo", map[string]any{"text": "secret-value"}, "key-1"); res.IsError {
		t.Fatalf("first call: %q", textOf(res))
	}
	if res := callTool(t, cs, "counter__echo", map[string]any{}, "key-2"); !res.IsError {
		t.Fatal("second call: want the tool's error result")
	}

	byName := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = append(byName[s.Name], s)
		if strings.HasPrefix(s.Name, "notifications/") {
			t.Errorf("span %q: notifications get no span", s.Name)
		}
		if s.SpanKind != trace.SpanKindServer {
			t.Errorf("span %q is %v, want server", s.Name, s.SpanKind)
		}
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.Emit(), "secret-value") {
				t.Errorf("span %q records the arguments (%s)", s.Name, a.Key)
			}
		}
	}
	// The session starts with initialize, or server/discover on 2026-07-28.
	if len(byName["initialize"])+len(byName["server/discover"]) != 1 || len(byName["tools/list"]) != 1 || len(byName["tools/call counter__echo"]) != 2 {
		t.Fatalf("spans %v: want initialize (or server/discover), tools/list and two tools/call counter__echo", keys(byName))
	}
	calls := byName["tools/call counter__echo"]
	attrs := map[string]string{}
	for _, a := range calls[0].Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	task := ft.all()[0].update.WorkflowID
	want := map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "counter__echo", "gen_ai.operation.name": "execute_tool",
		"airlock.task.id": task, "airlock.call.id": "k-key-1", "airlock.principal": "alice"}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("first call's span: %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}
	if calls[0].Status.Code != codes.Unset {
		t.Errorf("first call's span status %v, want unset (ok)", calls[0].Status)
	}
	if calls[1].Status.Code != codes.Error {
		t.Errorf("second call's span status %v, want error (the tool failed)", calls[1].Status)
	}
}

func keys(m map[string][]tracetest.SpanStub) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
