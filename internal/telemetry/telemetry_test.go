package telemetry_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-run/airlock/internal/telemetry"
)

// received is what an OTLP receiver got: span names by service.name.
type received struct {
	mu    sync.Mutex
	paths []string
	spans map[string][]string
}

func (r *received) add(path string, req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spans == nil {
		r.spans = map[string][]string{}
	}
	r.paths = append(r.paths, path)
	for _, rs := range req.GetResourceSpans() {
		svc := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				svc = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans[svc] = append(r.spans[svc], s.GetName())
			}
		}
	}
}

// httpReceiver is a real OTLP/HTTP endpoint (protobuf bodies).
func httpReceiver(t *testing.T) (*received, string) {
	t.Helper()
	r := &received{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var msg coltracepb.ExportTraceServiceRequest
		if err != nil || proto.Unmarshal(body, &msg) != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		r.add(req.URL.Path, &msg)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

type grpcTraces struct {
	coltracepb.UnimplementedTraceServiceServer
	r *received
}

func (g grpcTraces) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.r.add("grpc", req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// grpcReceiver is a real OTLP/gRPC endpoint.
func grpcReceiver(t *testing.T) (*received, string) {
	t.Helper()
	r := &received{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, grpcTraces{r: r})
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return r, "http://" + ln.Addr().String()
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// emit records one root span through tr and flushes it.
func emit(t *testing.T, tr *telemetry.Tracing, name string) {
	t.Helper()
	if tr == nil {
		t.Fatal("tracing is off, want on")
	}
	_, span := tr.TracerProvider().Tracer("test").Start(context.Background(), name)
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown (export): %v", err)
	}
}

func TestExportsOverOTLP(t *testing.T) {
	one := 1.0
	for _, tc := range []struct {
		name     string
		receiver func(*testing.T) (*received, string)
		opts     func(url string) telemetry.Options
		wantPath string
	}{
		{"http from config", httpReceiver, func(url string) telemetry.Options {
			return telemetry.Options{Endpoint: url, ServiceName: "airlock-gateway", SamplingRatio: &one, Getenv: env()}
		}, "/v1/traces"},
		{"http config path kept", httpReceiver, func(url string) telemetry.Options {
			return telemetry.Options{Endpoint: url + "/otlp/traces", Protocol: "http", ServiceName: "airlock-gateway", Getenv: env()}
		}, "/otlp/traces"},
		{"http from OTEL_EXPORTER_OTLP_ENDPOINT", httpReceiver, func(url string) telemetry.Options {
			return telemetry.Options{ServiceName: "airlock-gateway", Getenv: env("OTEL_EXPORTER_OTLP_ENDPOINT", url+"/")}
		}, "/v1/traces"},
		{"http from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", httpReceiver, func(url string) telemetry.Options {
			return telemetry.Options{ServiceName: "airlock-gateway", Getenv: env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url+"/custom",
				"OTEL_EXPORTER_OTLP_ENDPOINT", "http://elsewhere.invalid:4318")}
		}, "/custom"},
		{"grpc from config", grpcReceiver, func(url string) telemetry.Options {
			return telemetry.Options{Endpoint: url, Protocol: telemetry.ProtocolGRPC, ServiceName: "airlock-gateway", Getenv: env()}
		}, "grpc"},
		{"grpc from the environment", grpcReceiver, func(url string) telemetry.Options {
			return telemetry.Options{ServiceName: "airlock-gateway", Getenv: env("OTEL_EXPORTER_OTLP_ENDPOINT", url, "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")}
		}, "grpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, url := tc.receiver(t)
			tr, err := telemetry.New(context.Background(), tc.opts(url))
			if err != nil {
				t.Fatal(err)
			}
			emit(t, tr, "tools/call x")
			r.mu.Lock()
			defer r.mu.Unlock()
			if len(r.paths) == 0 || r.paths[0] != tc.wantPath {
				t.Errorf("exported to %v, want %s", r.paths, tc.wantPath)
			}
			if got := r.spans["airlock-gateway"]; len(got) != 1 || got[0] != "tools/call x" {
				t.Errorf("received %v, want the one span under service airlock-gateway", r.spans)
			}
		})
	}
}

func TestSamplingRatioZeroExportsNothing(t *testing.T) {
	r, url := httpReceiver(t)
	zero := 0.0
	tr, err := telemetry.New(context.Background(), telemetry.Options{Endpoint: url, SamplingRatio: &zero, Getenv: env()})
	if err != nil {
		t.Fatal(err)
	}
	emit(t, tr, "dropped")
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.spans) != 0 {
		t.Fatalf("received %v with sampling_ratio 0, want nothing", r.spans)
	}
}

func TestOTELServiceNameWins(t *testing.T) {
	r, url := httpReceiver(t)
	t.Setenv("OTEL_SERVICE_NAME", "from-env") // resource detection reads the process environment
	tr, err := telemetry.New(context.Background(), telemetry.Options{Endpoint: url, ServiceName: "airlock-worker", Getenv: env()})
	if err != nil {
		t.Fatal(err)
	}
	emit(t, tr, "s")
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.spans["from-env"]) != 1 {
		t.Fatalf("received %v, want the span under OTEL_SERVICE_NAME's from-env", r.spans)
	}
}

func TestOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts telemetry.Options
	}{
		{"nothing configured", telemetry.Options{Getenv: env()}},
		{"OTEL_SDK_DISABLED", telemetry.Options{Endpoint: "http://127.0.0.1:4318", Getenv: env("OTEL_SDK_DISABLED", "true")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := telemetry.New(context.Background(), tc.opts)
			if err != nil || tr != nil {
				t.Fatalf("New = %v, %v; want nil, nil (off)", tr, err)
			}
			// A nil Tracing hands out nothing to install.
			if tr.TracerProvider() != nil || tr.ClientInterceptors() != nil || tr.Shutdown(context.Background()) != nil || tr.String() != "off" {
				t.Fatal("a nil Tracing must install nothing")
			}
		})
	}
}

func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts telemetry.Options
		want string
	}{
		{"protocol", telemetry.Options{Endpoint: "http://127.0.0.1:4318", Protocol: "thrift", Getenv: env()}, `protocol "thrift": use grpc or http/protobuf`},
		{"env protocol", telemetry.Options{Endpoint: "http://127.0.0.1:4318", Getenv: env("OTEL_EXPORTER_OTLP_PROTOCOL", "zipkin")}, `protocol "zipkin"`},
		{"env endpoint", telemetry.Options{Getenv: env("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")}, `want http://host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := telemetry.New(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want an error containing %q", tr, err, tc.want)
			}
		})
	}
}
