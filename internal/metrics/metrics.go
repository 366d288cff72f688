// Package metrics defines airlock's Prometheus metrics in one registry and
// serves them. Metrics are derived views for dashboards and alerts; the
// workflow history remains the record of what happened.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry holds every airlock metric (and the Go runtime's).
var Registry = prometheus.NewRegistry()

var (
	// Decisions counts policy decisions by effect and by the check that
	// decided (allowlist, permission, data_level, size, json, schema, path,
	// rule, default, error, pin).
	Decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "policy_decisions_total",
		Help: "Policy decisions by effect and deciding check.",
	}, []string{"effect", "check"})

	// ToolsBlocked counts tool definitions found different from their pin.
	ToolsBlocked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "tools_blocked_total",
		Help: "Upstream tool definitions that differ from their pinned hash (the tool is hidden and denied until re-pinned).",
	}, []string{"server", "tool"})

	// Calls counts finished tool calls by outcome.
	Calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "tool_calls_total",
		Help: "Tool calls answered by the gateway, by outcome.",
	}, []string{"outcome"})
)

func init() {
	Registry.MustRegister(Decisions, ToolsBlocked, Calls,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// Handler serves the registry in the Prometheus text format.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{})
}
