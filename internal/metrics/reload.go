package metrics

import "github.com/prometheus/client_golang/prometheus"

// Result label values of ConfigReloads.
const (
	ReloadOK    = "ok"
	ReloadError = "error"
)

// ConfigReloads counts reloads of the configuration (airlock.yaml, the
// manifests, policy rules, principals and approver groups) by result: ok
// (the new version replaced the running one) or error (a file had a
// problem; the running version was kept and every problem logged).
var ConfigReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "airlock", Name: "config_reload_total",
	Help: "Configuration reloads (SIGHUP or a changed file) by result: ok (switched to the new version) or error (kept the running one).",
}, []string{"result"})

func init() {
	Registry.MustRegister(ConfigReloads)
	// Both series exist from the start, so a dashboard sees 0 rather than
	// nothing before the first reload.
	ConfigReloads.WithLabelValues(ReloadOK)
	ConfigReloads.WithLabelValues(ReloadError)
}
