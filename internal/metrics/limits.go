package metrics

import "github.com/prometheus/client_golang/prometheus"

// LimitRefusals counts the tools/call answers refused by a rate limit or
// a task budget (issue 16 §3), by check (rate_limit, budget) and limit
// name.
var LimitRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "airlock", Name: "limit_refusals_total",
	Help: "Tool calls refused by a rate limit or a task budget, by check (rate_limit, budget) and limit.",
}, []string{"check", "limit"})

func init() { Registry.MustRegister(LimitRefusals) }
