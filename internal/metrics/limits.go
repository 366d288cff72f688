package metrics

import "github.com/prometheus/client_golang/prometheus"

// LimitRefusals counts the tool calls refused by a rate limit or a task
// budget (issue 16 §3), by check (rate_limit, budget) and limit name: the
// tools/call answers the gateway gives, and the plan steps the Plan
// workflow runs (counted by the worker through the SDK's replay-aware
// handler, see sdkOwned), each refusal once.
var LimitRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "airlock", Name: "limit_refusals_total",
	Help: "Tool calls refused by a rate limit or a task budget, by check (rate_limit, budget) and limit.",
}, []string{"check", "limit"})

func init() { Registry.MustRegister(LimitRefusals) }
