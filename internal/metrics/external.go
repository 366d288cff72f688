package metrics

import "github.com/prometheus/client_golang/prometheus"

// ExternalDecisions counts the answers of the external policy decision
// point (issue 30 §3), by result: allow, deny, or the kind of failure
// (timeout, transport, status, malformed); cached says whether the answer
// was reused within its max-age.
var ExternalDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "airlock", Name: "external_decisions_total",
	Help: "Answers of the external policy decision point (AuthZEN), by result (allow, deny, timeout, transport, status, malformed) and cached (true, false).",
}, []string{"result", "cached"})

func init() { Registry.MustRegister(ExternalDecisions) }
