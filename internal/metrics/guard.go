package metrics

import "github.com/prometheus/client_golang/prometheus"

// GuardFindings counts the secrets the worker's content guard found in
// tool results (issue 30 §1), by rule (aws-access-key, private-key, …)
// and action (redact, block): one per finding, per attempt of a call.
var GuardFindings = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "airlock", Name: "guard_findings_total",
	Help: "Secrets found in tool results by the content guard, by rule and action (redact, block).",
}, []string{"rule", "action"})

func init() { Registry.MustRegister(GuardFindings) }
