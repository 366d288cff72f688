package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/internal/config"
)

func TestTelemetryBlock(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("alpha"))
	snap, err := config.Load(write(t, filepath.Join(dir, "airlock.yaml"), `manifests: [m.yaml]
telemetry:
  endpoint: http://otel-collector:4317
  protocol: grpc
  service_name: acme-airlock
  sampling_ratio: 0.25
`))
	if err != nil {
		t.Fatal(err)
	}
	ratio := 0.25
	want := config.Telemetry{Endpoint: "http://otel-collector:4317", Protocol: "grpc", ServiceName: "acme-airlock", SamplingRatio: &ratio}
	if diff := cmp.Diff(want, snap.Config.Telemetry); diff != "" {
		t.Errorf("telemetry (-want +got):\n%s", diff)
	}

	// Absent: the zero block, tracing off (unless the environment says).
	snap, err = config.Load(write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(config.Telemetry{}, snap.Config.Telemetry); diff != "" {
		t.Errorf("telemetry without a block (-want +got):\n%s", diff)
	}
}

func TestTelemetryProblems(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "m.yaml"), manifestFor("alpha"))
	for _, tc := range []struct {
		name, block string
		want        string // file:line: field: the start of the message
	}{
		{"no scheme", "  endpoint: otel-collector:4318\n", `:3: telemetry.endpoint: "otel-collector:4318" is not an OTLP collector URL`},
		{"grpc scheme", "  endpoint: grpc://otel:4317\n", `:3: telemetry.endpoint: "grpc://otel:4317" is not an OTLP collector URL`},
		{"no host", "  endpoint: http://\n", `:3: telemetry.endpoint: "http://" has no host`},
		{"credentials", "  endpoint: https://user:pw@otel:4318\n", `:3: telemetry.endpoint: must not hold credentials`},
		{"empty endpoint", "  endpoint: \"\"\n", `:3: telemetry.endpoint: is empty`},
		{"protocol", "  endpoint: http://otel:4318\n  protocol: thrift\n", `:4: telemetry.protocol: "thrift" is not an OTLP protocol; use grpc or http/protobuf`},
		{"ratio", "  endpoint: http://otel:4318\n  sampling_ratio: 1.5\n", `:4: telemetry.sampling_ratio: is 1.5; write a share of traces from 0`},
		{"service name", "  service_name: \"\"\n", `:3: telemetry.service_name: is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, filepath.Join(dir, "airlock.yaml"), "manifests: [m.yaml]\ntelemetry:\n"+tc.block)
			_, err := config.Load(path)
			if err == nil {
				t.Fatal("Load succeeded, want a problem")
			}
			got := problems(t, err)
			if len(got) != 1 || !strings.HasPrefix(got[0], path+tc.want) {
				t.Fatalf("problems %q; want one starting %q", got, path+tc.want)
			}
		})
	}
}
