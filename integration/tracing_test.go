package integration

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/telemetry"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/worker"
)

// seenCall is what the recording upstream saw of one tools/call.
type seenCall struct {
	tool        string
	metaParent  string // _meta.traceparent
	metaState   string // _meta.tracestate
	headerTrace string // the traceparent HTTP header
}

// recordingUpstream is a real go-sdk MCP server over streamable HTTP whose
// tools record the trace context each call brings.
type recordingUpstream struct {
	url string
	mu  sync.Mutex
	got []seenCall
}

func newRecordingUpstream(t testing.TB) *recordingUpstream {
	t.Helper()
	ru := &recordingUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "recorder", Version: "1"}, nil)
	for _, name := range []string{"lookup", "write"} {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				c := seenCall{tool: name}
				c.metaParent, _ = req.Params.Meta[tracing.MetaTraceparent].(string)
				c.metaState, _ = req.Params.Meta[tracing.MetaTracestate].(string)
				if req.Extra != nil && req.Extra.Header != nil {
					c.headerTrace = req.Extra.Header.Get("traceparent")
				}
				ru.mu.Lock()
				ru.got = append(ru.got, c)
				ru.mu.Unlock()
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " done"}}}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	ru.url = hs.URL
	return ru
}

func (ru *recordingUpstream) calls() []seenCall {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	return append([]seenCall(nil), ru.got...)
}

// tracedStack is airlock in-process (embedded Temporal, worker, gateway
// over HTTP) wired as cmd/airlock wires it when tracing is on (tp non-nil:
// the Temporal interceptor on the client, the tracer on the gateway) or off.
func tracedStack(t testing.TB, tp *sdktrace.TracerProvider, upstreamURL string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	dir := t.TempDir()
	ctx := context.Background()
	srv := sharedTemporal(t)

	copts := client.Options{HostPort: srv.HostPort(), Namespace: srv.Namespace(), Logger: quiet{}}
	var gwTracer trace.TracerProvider
	if tp != nil {
		ic, err := telemetry.TemporalInterceptor(tp)
		if err != nil {
			t.Fatal(err)
		}
		copts.Interceptors = []interceptor.ClientInterceptor{ic}
		gwTracer = tp
	}
	c, err := client.Dial(copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	m, err := manifests.Parse(filepath.Join(dir, "recorder.yaml"), []byte(`server:
  name: recorder
  http:
    url: `+upstreamURL+`
tools:
  lookup: {side_effects: [read], data_access_level: public, risk: low, idempotent: true, timeout: 10s}
  write: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false, timeout: 60s}
`))
	if err != nil {
		t.Fatal(err)
	}
	ms := []*manifests.Manifest{m}
	servers := []manifests.Server{m.Server}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	var gwMu sync.Mutex
	var gw *gateway.Gateway
	pool := upstream.New(servers, upstream.Options{Logger: &log, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second,
		OnToolsChanged: func(string) {
			gwMu.Lock()
			defer gwMu.Unlock()
			if gw != nil {
				gw.Refresh()
			}
		}})
	pool.Start(ctx)
	t.Cleanup(func() { _ = pool.Close() })
	pol, err := policy.Compile(policy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(c, &activities.Activities{Tools: pool, Policy: pol, Catalog: activities.NewCatalog(ms, servers, pool, false)}, worker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	gwMu.Lock()
	gw = gateway.New(gateway.Options{Temporal: c, Manifests: ms, Upstreams: pool, Principal: "tester", Policy: pol,
		IdleTimeout: time.Hour, Logger: log, Tracer: gwTracer})
	gwMu.Unlock()
	gw.Refresh()
	hs := httptest.NewServer(gw.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// callWithMeta calls tool with the given _meta and fails the test on an
// error result.
func callWithMeta(t testing.TB, cs *mcp.ClientSession, tool string, meta mcp.Meta) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}, Meta: meta})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s: error result %q", tool, text(res))
	}
}

// TestTracingFollowsACallToTheUpstream runs two calls through the real
// gateway, embedded Temporal and worker to a real MCP upstream, exporting
// to memory: a regular call (its decision and its CallTool activity) that
// continues the agent's trace from _meta.traceparent, and a fast-path call
// (one local activity) that starts a trace at the gateway. Each call is one
// trace: the upstream call's span descends from the gateway's request span
// through the Update, the update handler and the activity, and the
// upstream receives a traceparent (in _meta, SEP-414, and as an HTTP
// header) naming that trace and the upstream call's span.
func TestTracingFollowsACallToTheUpstream(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ru := newRecordingUpstream(t)
	url := tracedStack(t, tp, ru.url)
	cs := connectURL(t, url, nil)
	waitTools(t, cs, "recorder__lookup", "recorder__write")

	// The agent's own span, as an instrumented agent (another process,
	// exporting elsewhere) would send it.
	agentTP := sdktrace.NewTracerProvider()
	agentCtx, agent := agentTP.Tracer("agent").Start(context.Background(), "agent step")
	agentMeta := tracing.InjectMeta(agentCtx, nil)
	agentMeta[tracing.MetaTracestate] = "agent=1"
	agent.End()
	callWithMeta(t, cs, "recorder__write", agentMeta)
	callWithMeta(t, cs, "recorder__lookup", nil)

	var spans tracetest.SpanStubs
	waitFor(t, "the upstream call spans", 30*time.Second, func() bool {
		spans = exp.GetSpans()
		return len(named(spans, "tools/call write")) == 1 && len(named(spans, "tools/call lookup")) == 1
	})
	got := ru.calls()
	if len(got) != 2 {
		t.Fatalf("upstream saw %d calls, want 2: %+v", len(got), got)
	}

	// An HTTP client that sends the W3C traceparent header instead of
	// _meta: the gateway's span continues that trace too.
	hdrCtx, hdrSpan := agentTP.Tracer("agent").Start(context.Background(), "agent over http")
	hdr := http.Header{}
	tracing.InjectHeader(hdrCtx, hdr)
	hdrSpan.End()
	cs2 := connectURL(t, url, map[string]string{"traceparent": hdr.Get("traceparent")})
	callWithMeta(t, cs2, "recorder__lookup", nil)
	waitFor(t, "the third call's span", 30*time.Second, func() bool { return len(named(exp.GetSpans(), "tools/call lookup")) == 2 })
	third := named(exp.GetSpans(), "tools/call lookup")[1]
	if chain := ancestry(exp.GetSpans(), third); chain[len(chain)-1].Name != "tools/call recorder__lookup" ||
		chain[len(chain)-1].Parent.SpanID() != hdrSpan.SpanContext().SpanID() || third.SpanContext.TraceID() != hdrSpan.SpanContext().TraceID() {
		t.Errorf("a call with a traceparent header: gateway span %q has parent %v, want the agent's span %v",
			chain[len(chain)-1].Name, chain[len(chain)-1].Parent, hdrSpan.SpanContext())
	}

	for i, tc := range []struct {
		tool, exposed string
		parent        trace.SpanContext // the gateway span's parent (invalid: a root)
		chain         []string          // span names from the upstream call up to the gateway's
	}{
		{"write", "recorder__write", agent.SpanContext(), []string{
			"tools/call write", "RunActivity:CallTool", "StartActivity:CallTool", "HandleUpdate:call_tool",
			"UpdateWithStartWorkflow:call_tool", "tools/call recorder__write"}},
		{"lookup", "recorder__lookup", trace.SpanContext{}, []string{
			"tools/call lookup", "RunActivity:DecideAndCall", "StartActivity:DecideAndCall", "HandleUpdate:call_tool",
			"UpdateWorkflow:call_tool", "tools/call recorder__lookup"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			up := named(spans, "tools/call "+tc.tool)[0]
			chain := ancestry(spans, up)
			var names []string
			for _, s := range chain {
				names = append(names, s.Name)
			}
			if diff := cmp.Diff(tc.chain, names); diff != "" {
				t.Fatalf("parent chain of the upstream call's span (-want +got):\n%s\nall spans: %s", diff, spanList(spans))
			}
			gw := chain[len(chain)-1]
			tid := gw.SpanContext.TraceID()
			for _, s := range chain {
				if s.SpanContext.TraceID() != tid {
					t.Errorf("span %q is in trace %s, the gateway's in %s", s.Name, s.SpanContext.TraceID(), tid)
				}
			}
			if gw.SpanKind != trace.SpanKindServer || up.SpanKind != trace.SpanKindClient {
				t.Errorf("kinds: gateway %v, upstream call %v; want server, client", gw.SpanKind, up.SpanKind)
			}
			if tc.parent.IsValid() {
				if gw.Parent.SpanID() != tc.parent.SpanID() || tid != tc.parent.TraceID() || !gw.Parent.IsRemote() {
					t.Errorf("gateway span's parent %v, want the agent's span %v from _meta.traceparent", gw.Parent, tc.parent)
				}
			} else if gw.Parent.IsValid() {
				t.Errorf("gateway span's parent %v, want none (the call brought no trace context)", gw.Parent)
			}
			attrs := map[string]string{}
			for _, a := range gw.Attributes {
				attrs[string(a.Key)] = a.Value.Emit()
			}
			if attrs["gen_ai.tool.name"] != tc.exposed || attrs["airlock.principal"] != "tester" ||
				!strings.HasPrefix(attrs["airlock.task.id"], "task-") || !strings.HasPrefix(attrs["airlock.call.id"], "call-") {
				t.Errorf("gateway span attributes %v: want the tool, principal, task and call", attrs)
			}
			for _, a := range gw.Attributes {
				if strings.Contains(strings.ToLower(string(a.Key)), "argument") {
					t.Errorf("gateway span records %s: arguments must never be recorded", a.Key)
				}
			}

			seen := got[i]
			want := "00-" + tid.String() + "-" + up.SpanContext.SpanID().String() + "-01"
			if seen.tool != tc.tool || seen.metaParent != want || seen.headerTrace != want {
				t.Errorf("upstream saw %+v; want _meta.traceparent and header traceparent %s (the gateway's trace, the upstream call's span)", seen, want)
			}
			if tc.tool == "write" && seen.metaState != "agent=1" {
				t.Errorf("upstream saw _meta.tracestate %q, want the agent's %q carried along", seen.metaState, "agent=1")
			}
		})
	}
}

// TestTracingOffSendsNoTraceContext: with no telemetry configuration
// nothing is set up (telemetry.New returns nil, so cmd/airlock installs no
// interceptor and no gateway middleware), and a call through the stack
// wired that way, even one that brings a traceparent, reaches the upstream
// with no trace context.
func TestTracingOffSendsNoTraceContext(t *testing.T) {
	t.Parallel()
	tr, err := telemetry.New(context.Background(), telemetry.Options{Getenv: func(string) string { return "" }})
	if err != nil || tr != nil {
		t.Fatalf("telemetry.New with no endpoint = %v, %v; want nil (off)", tr, err)
	}
	if tr.TracerProvider() != nil || tr.ClientInterceptors() != nil {
		t.Fatal("tracing off still hands out a provider or interceptors")
	}
	ru := newRecordingUpstream(t)
	url := tracedStack(t, nil, ru.url)
	cs := connectURL(t, url, nil)
	waitTools(t, cs, "recorder__write")
	callWithMeta(t, cs, "recorder__write", mcp.Meta{tracing.MetaTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	got := ru.calls()
	if len(got) != 1 || got[0].metaParent != "" || got[0].metaState != "" || got[0].headerTrace != "" {
		t.Fatalf("upstream saw %+v; want one call without trace context", got)
	}
}

func named(spans tracetest.SpanStubs, name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// ancestry is s and its exported ancestors, nearest first.
func ancestry(spans tracetest.SpanStubs, s tracetest.SpanStub) []tracetest.SpanStub {
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, x := range spans {
		byID[x.SpanContext.SpanID()] = x
	}
	out := []tracetest.SpanStub{s}
	for {
		p, ok := byID[out[len(out)-1].Parent.SpanID()]
		if !ok || len(out) > 50 {
			return out
		}
		out = append(out, p)
	}
}

func spanList(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString("\n  " + s.Name + " " + s.SpanContext.SpanID().String() + " <- " + s.Parent.SpanID().String())
	}
	return b.String()
}

// BenchmarkTracingOverhead is the cost of tracing on the fast path
// (auto-allowed, idempotent, low risk: one local activity): the same call
// through the in-process stack with tracing off and on (every span
// recorded, batched to an exporter that drops them).
//
//	go test ./integration -run '^$' -bench TracingOverhead -benchtime 300x
func BenchmarkTracingOverhead(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		var tp *sdktrace.TracerProvider
		if on {
			name = "on"
			tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		}
		b.Run(name, func(b *testing.B) {
			ru := newRecordingUpstream(b)
			cs := connectURL(b, tracedStack(b, tp, ru.url), nil)
			waitTools(b, cs, "recorder__lookup")
			callWithMeta(b, cs, "recorder__lookup", nil) // the task exists
			cpu0 := processCPU(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				callWithMeta(b, cs, "recorder__lookup", nil)
			}
			b.StopTimer()
			// CPU of the whole process (gateway, worker, embedded Temporal,
			// upstream) per call: steadier than wall time on a loaded machine.
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/call")
		})
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU(t testing.TB) time.Duration {
	cpu, ok := testenv.ProcessCPU()
	if !ok {
		t.Fatal("cannot read this process's CPU time (getrusage)")
	}
	return cpu
}
