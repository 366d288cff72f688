// Package metrics defines airlock's Prometheus metrics in one registry and
// serves them. Metrics are derived views for dashboards and alerts; the
// workflow history remains the record of what happened.
//
// Every role records into the same process-wide Registry: the gateway the
// calls it answers, the worker each attempt of a tool call, each policy
// decision and each approval it closes, and the Temporal SDK its own
// metrics (SDK, through NewSDKHandler). Workflow code records only through
// the SDK's replay-aware handler (see sdkOwned), so a
// replay cannot count twice. It imports the Prometheus client, the
// Temporal SDK's metrics interface and api's wire types (a program's
// result, programs.go) only.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry holds every airlock metric (and the Go runtime's).
var Registry = prometheus.NewRegistry()

// Buckets of the duration histograms, in seconds: tool calls last
// milliseconds to minutes; approvals seconds to hours.
var (
	callBuckets     = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	approvalBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600}
)

var (
	// Decisions counts policy decisions by effect, by the check that
	// decided (allowlist, permission, data_level, size, json, schema, path,
	// rule, default, error, pin) and by the rule that decided ("" unless
	// check is rule).
	Decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "policy_decisions_total",
		Help: "Policy decisions by effect, deciding check and deciding rule (empty unless check is rule).",
	}, []string{"effect", "check", "rule"})

	// ToolsBlocked counts tool definitions found different from their pin.
	ToolsBlocked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "tools_blocked_total",
		Help: "Upstream tool definitions that differ from their pinned hash (the tool is hidden and denied until re-pinned).",
	}, []string{"server", "tool"})

	// Calls counts the tools/call answers the gateway gives agents, by
	// exposed tool name and outcome: a workflow outcome (ok, tool_error,
	// denied, limit, unavailable, unknown, rejected, failed), "pending"
	// (still waiting past the inline wait) or "error" (no result: the task
	// could not be reached).
	Calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "tool_calls_total",
		Help: "Tool calls answered by the gateway, by tool and outcome (a call outcome, pending, or error).",
	}, []string{"tool", "outcome"})

	// Attempts counts attempts at running a tool on the worker (a call,
	// its capture, or a compensation), by exposed tool name and result:
	// ok, tool_error, or the activity error type (NotSent,
	// OutcomeUnknown, Rejected, Internal).
	Attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "tool_attempts_total",
		Help: "Attempts at running a tool on the worker, by tool and result (ok, tool_error, or the error type).",
	}, []string{"tool", "result"})

	// CallDuration is how long one attempt took, by exposed tool name.
	CallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "airlock", Name: "tool_call_duration_seconds",
		Help:    "Duration of one attempt at running a tool on the worker, by tool.",
		Buckets: callBuckets,
	}, []string{"tool"})

	// Compensations counts attempts at running a compensation (a rollback
	// step), by the compensating tool and result (as Attempts); a result
	// other than ok is a failed attempt.
	Compensations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "compensation_attempts_total",
		Help: "Attempts at running a compensation during a rollback, by compensating tool and result (ok, tool_error, or the error type).",
	}, []string{"tool", "result"})

	// RollbacksFailed counts rollbacks that stopped with compensations
	// left undone.
	RollbacksFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "airlock", Name: "rollbacks_failed_total",
		Help: "Rollbacks that stopped with compensations left undone (the task shows rollback_failed).",
	})

	// ApprovalWait is how long approval requests waited, from request to
	// outcome, by outcome: approved, denied, expired, canceled.
	ApprovalWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "airlock", Name: "approval_wait_seconds",
		Help:    "Time from an approval request to its outcome, by outcome (approved, denied, expired, canceled).",
		Buckets: approvalBuckets,
	}, []string{"outcome"})

	// AuthFailures counts HTTP requests the gateway refused by status:
	// 401 (no or unknown credentials), 403 (another principal's session).
	AuthFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "airlock", Name: "auth_failures_total",
		Help: "HTTP requests to the MCP endpoint refused for authentication (401) or session ownership (403).",
	}, []string{"status"})

	// SDK records the Temporal SDK's own metrics (set it as
	// client.Options.MetricsHandler).
	SDK = NewSDKHandler()
)

func init() {
	Registry.MustRegister(Decisions, ToolsBlocked, Calls, Attempts, CallDuration, Compensations, RollbacksFailed,
		ApprovalWait, AuthFailures, SDK,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// Handler serves the registry in the Prometheus text format. A series that
// cannot be collected is left out (and counted in
// promhttp_metric_handler_errors_total) rather than failing the scrape.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: Registry})
}
