package config

import (
	"net/url"
	"strings"
)

// Telemetry configures OpenTelemetry tracing: a trace per tool call from
// the gateway through the task's workflow and the call's activity to the
// upstream, exported over OTLP. Off unless Endpoint is set here or
// OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is in the environment;
// the standard OTEL_* variables are honoured (package internal/telemetry).
type Telemetry struct {
	// Endpoint is the OTLP collector's base URL: http://host:4318 for
	// OTLP/HTTP (spans go to <endpoint>/v1/traces unless it has a path),
	// http://host:4317 with protocol grpc. https:// uses TLS.
	Endpoint string `yaml:"endpoint,omitempty"`
	// Protocol is grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_PROTOCOL,
	// else http/protobuf).
	Protocol string `yaml:"protocol,omitempty"`
	// ServiceName prefixes service.name: each role reports as
	// <service_name>-<role> (airlock-gateway, airlock-worker), airlock dev
	// (every role in one process) as <service_name>. Default "airlock";
	// OTEL_SERVICE_NAME overrides it.
	ServiceName string `yaml:"service_name,omitempty"`
	// SamplingRatio is the share of new traces recorded, 0 to 1 (default
	// 1); a call that brings its caller's trace follows the caller's
	// sampling decision.
	SamplingRatio *float64 `yaml:"sampling_ratio,omitempty"`
}

// telemetryProtocols are the accepted values of telemetry.protocol.
var telemetryProtocols = map[string]bool{"grpc": true, "http/protobuf": true, "http": true}

func (c *Config) validateTelemetry(v *validator) {
	t := c.Telemetry
	if ep := strings.TrimSpace(t.Endpoint); ep != "" {
		u, err := url.Parse(ep)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https"):
			v.add("telemetry.endpoint", "%q is not an OTLP collector URL; write http://host:4318 (OTLP/HTTP), or http://host:4317 with protocol: grpc (https:// for TLS)", t.Endpoint)
		case u.Host == "":
			v.add("telemetry.endpoint", "%q has no host; write e.g. http://otel-collector:4318", t.Endpoint)
		case u.User != nil:
			v.add("telemetry.endpoint", "must not hold credentials; give the collector's auth headers in OTEL_EXPORTER_OTLP_HEADERS")
		}
	} else if v.lines.Has("telemetry.endpoint") {
		v.add("telemetry.endpoint", "is empty; omit it (tracing off unless OTEL_EXPORTER_OTLP_ENDPOINT is set) or write the collector's URL, e.g. http://otel-collector:4318")
	}
	if t.Protocol != "" && !telemetryProtocols[t.Protocol] {
		v.add("telemetry.protocol", "%q is not an OTLP protocol; use grpc or http/protobuf", t.Protocol)
	}
	if v.lines.Has("telemetry.service_name") && strings.TrimSpace(t.ServiceName) == "" {
		v.add("telemetry.service_name", "is empty; omit it for \"airlock\" or name the service")
	}
	if r := t.SamplingRatio; r != nil && (*r < 0 || *r > 1) {
		v.add("telemetry.sampling_ratio", "is %g; write a share of traces from 0 (none) to 1 (all, the default)", *r)
	}
}
