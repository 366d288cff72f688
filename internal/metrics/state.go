package metrics

import "github.com/prometheus/client_golang/prometheus"

// StateCalls counts the calls of the built-in task-state tools (issue 16
// §5) by op (get, set, delete) and result (ok, or the check that refused
// the call: state_args, state_size, state_schema). The task's workflow
// serves them, so the worker counts them, through the SDK's replay-aware
// handler (sdkOwned), whether an agent or a plan step called.
var StateCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "airlock", Name: "task_state_calls_total",
	Help: "Calls of the task-state tools (airlock_state_get/set/delete), by op and result (ok or the check that refused it).",
}, []string{"op", "result"})

func init() { Registry.MustRegister(StateCalls) }
