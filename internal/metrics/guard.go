package metrics

import "github.com/prometheus/client_golang/prometheus"

// GuardFindings counts the content guard's findings (issue 30 §1), by
// rule (aws-access-key, email, injection-ignore-instructions, …) and
// action (redact, block, annotate): in tool results one per finding, per
// attempt of a call; in tool definitions (the gateway) one per finding,
// per definition served.
var GuardFindings = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "airlock", Name: "guard_findings_total",
	Help: "Findings of the content guard in tool results and tool definitions, by rule and action (redact, block, annotate).",
}, []string{"rule", "action"})

func init() { Registry.MustRegister(GuardFindings) }
