package metrics

import "github.com/prometheus/client_golang/prometheus"

// EgressRefusals counts the connections sandboxed stdio servers asked
// their egress proxy for and did not get (issue 32), by server and kind
// (not_allowed, address, resolve, protocol, limit). Every refusal is
// counted; the log and the audit stream get a few per second per server.
var EgressRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "airlock", Name: "egress_refusals_total",
	Help: "Connections sandboxed stdio servers asked their egress proxy for and did not get, by server and kind (not_allowed, address, resolve, protocol, limit).",
}, []string{"server", "kind"})

func init() { Registry.MustRegister(EgressRefusals) }
