package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/devserver"
	"github.com/airlock-run/airlock/internal/tracing"
)

// exportedSpan is one span an OTLP receiver got.
type exportedSpan struct{ service, name, traceID string }

// otlpReceiver is a real OTLP/HTTP endpoint (protobuf) that keeps what it
// receives.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans []exportedSpan
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var msg coltracepb.ExportTraceServiceRequest
		if err != nil || req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &msg) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.GetResourceSpans() {
			svc := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					svc = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					r.spans = append(r.spans, exportedSpan{svc, s.GetName(), hex.EncodeToString(s.GetTraceId())})
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

func (r *otlpReceiver) got() []exportedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exportedSpan(nil), r.spans...)
}

// TestTracingAirlockDevExportsOverOTLP runs the airlock binary (airlock
// dev) with a telemetry block naming an OTLP/HTTP receiver, makes a call
// that brings the agent's trace in _meta, stops airlock with SIGTERM (which
// flushes the exporter) and checks that the receiver got the call's spans
// from the gateway, the Temporal client, the update handler, the activity
// and the upstream call, all in the agent's trace, under the configured
// service name, and that the upstream saw that trace.
func TestTracingAirlockDevExportsOverOTLP(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	ru := newRecordingUpstream(t)
	rcv := newOTLPReceiver(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "recorder.yaml"), `server:
  name: recorder
  http:
    url: `+ru.url+`
tools:
  write: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false, timeout: 60s}
`)
	writeFile(t, filepath.Join(dir, "airlock.yaml"), "manifests: [recorder.yaml]\n"+identityYAML+`telemetry:
  endpoint: `+rcv.url+`
  service_name: acme-airlock
`)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	base := "http://" + listen
	p := startDev(t, bin, "--config", filepath.Join(dir, "airlock.yaml"), "--data-dir", filepath.Join(dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(freePort(t)), "--no-ui", "--log-format", "json")
	p.waitHealthy(t, base)
	cs := connectURL(t, base+"/mcp", nil)
	waitTools(t, cs, "recorder__write")

	agentCtx, agent := sdktrace.NewTracerProvider().Tracer("agent").Start(context.Background(), "agent step")
	agent.End()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "recorder__write", Arguments: map[string]any{}, Meta: tracing.InjectMeta(agentCtx, nil)})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %v", err, res)
	}
	_ = cs.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("airlock dev did not exit within 60s of SIGTERM")
	}

	tid := agent.SpanContext().TraceID().String()
	inTrace := map[string]string{} // span name -> service, for the agent's trace
	for _, s := range rcv.got() {
		if s.traceID == tid {
			inTrace[s.name] = s.service
		}
	}
	for _, name := range []string{"tools/call recorder__write", "UpdateWithStartWorkflow:call_tool", "HandleUpdate:call_tool",
		"StartActivity:CallTool", "RunActivity:CallTool", "tools/call write"} {
		if svc, ok := inTrace[name]; !ok || svc != "acme-airlock" {
			t.Errorf("span %q in the agent's trace: service %q, found %v; want it exported under acme-airlock", name, svc, ok)
		}
	}
	if t.Failed() {
		t.Logf("received: %+v", rcv.got())
	}
	if got := ru.calls(); len(got) != 1 || len(got[0].metaParent) != 55 || got[0].metaParent[3:35] != tid {
		t.Errorf("upstream saw %+v; want one call whose _meta.traceparent is in trace %s", got, tid)
	}
}

// TestTracingAcrossRoles runs the production shape, `airlock worker` and
// `airlock gateway` as separate processes against a Temporal server the
// test owns, with the collector named only by OTEL_EXPORTER_OTLP_ENDPOINT
// and the configuration's service_name: one call is one trace across both
// processes, the gateway's spans under <service_name>-gateway, the
// worker's (update handler, activity, upstream call) under
// <service_name>-worker.
func TestTracingAcrossRoles(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	srv, err := devserver.Start(context.Background(), devserver.Options{DataDir: t.TempDir(), Namespace: "traced",
		SearchAttributes: api.SearchAttributes()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	ru := newRecordingUpstream(t)
	rcv := newOTLPReceiver(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "recorder.yaml"), `server:
  name: recorder
  http:
    url: `+ru.url+`
tools:
  write: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false, timeout: 60s}
`)
	writeFile(t, filepath.Join(dir, "airlock.yaml"), "manifests: [recorder.yaml]\ntemporal: {namespace: traced}\n"+identityYAML+"telemetry: {service_name: acme}\n")
	cfg := filepath.Join(dir, "airlock.yaml")
	env := append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.url, "TEMPORAL_ADDRESS="+srv.HostPort(), "OTEL_SERVICE_NAME=")

	wcmd := exec.Command(bin, "worker", "--config", cfg, "--data-dir", filepath.Join(dir, "worker-data"), "--metrics-listen", "off")
	wcmd.Env = env
	wout := &lockedWriter{w: new(bytes.Buffer)}
	wcmd.Stdout, wcmd.Stderr = wout, wout
	wp := startProc(t, wcmd, wout)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	gcmd := exec.Command(bin, "gateway", "--config", cfg, "--listen", listen, "--data-dir", filepath.Join(dir, "gateway-data"))
	gcmd.Env = env
	gout := &lockedWriter{w: new(bytes.Buffer)}
	gcmd.Stdout, gcmd.Stderr = gout, gout
	gp := startProc(t, gcmd, gout)
	gp.waitHealthy(t, "http://"+listen)

	cs := connectURL(t, "http://"+listen+"/mcp", nil)
	waitTools(t, cs, "recorder__write")
	callWithMeta(t, cs, "recorder__write", nil)
	_ = cs.Close()
	for _, p := range []*devProcess{gp, wp} { // SIGTERM flushes each exporter
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.exited:
		case <-time.After(60 * time.Second):
			t.Fatal("a role did not exit within 60s of SIGTERM")
		}
	}

	var gwSpan exportedSpan
	for _, s := range rcv.got() {
		if s.name == "tools/call recorder__write" {
			gwSpan = s
		}
	}
	if gwSpan.traceID == "" {
		t.Fatalf("no gateway span exported; received %+v", rcv.got())
	}
	want := map[string]string{"tools/call recorder__write": "acme-gateway", "UpdateWithStartWorkflow:call_tool": "acme-gateway",
		"HandleUpdate:call_tool": "acme-worker", "RunActivity:CallTool": "acme-worker", "tools/call write": "acme-worker"}
	got := map[string]string{}
	for _, s := range rcv.got() {
		if s.traceID == gwSpan.traceID {
			if _, ok := want[s.name]; ok {
				got[s.name] = s.service
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spans of the call's trace by service (-want +got):\n%s\nreceived: %+v", diff, rcv.got())
	}
	if calls := ru.calls(); len(calls) != 1 || len(calls[0].metaParent) != 55 || calls[0].metaParent[3:35] != gwSpan.traceID {
		t.Errorf("upstream saw %+v; want one call whose _meta.traceparent is in trace %s", calls, gwSpan.traceID)
	}
}
