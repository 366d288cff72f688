package metrics

import "github.com/prometheus/client_golang/prometheus"

// The reasons of TaskBusy.
const (
	BusyQueueFull = "queue_full" // the task's queue was full: answered at once
	BusyWaited    = "waited"     // the call's wait ended while it was queued
	BusyServer    = "server"     // the server had history.maxInFlightUpdates of the task in flight
	// BusyPrincipal: the principal's share (gateway.principal_share) was
	// in use while others had calls, and its backlog full or its wait ended.
	BusyPrincipal = "principal"
)

// TaskQueued counts the Updates (tool calls, programs) that waited for a
// turn in their task's queue (gateway/admission.go): the task had
// gateway.task_concurrency in flight already.
var TaskQueued = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: "airlock", Name: "task_queued_total",
	Help: "Tool calls and programs that waited for a turn in their task's queue (gateway.task_concurrency in flight).",
})

// TaskBusy counts the calls answered that their task was busy, by reason
// (queue_full, waited, server, principal); nothing of them ran.
var TaskBusy = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "airlock", Name: "task_busy_total",
	Help: "Tool calls and programs answered that their task was busy (nothing ran), by reason (queue_full, waited, server, principal).",
}, []string{"reason"})

// PrincipalQueued counts the tool calls and programs that waited for
// their principal's share (gateway/fairness.go): other principals had
// calls, and this one had gateway.principal_share in flight.
var PrincipalQueued = prometheus.NewCounter(prometheus.CounterOpts{
	Namespace: "airlock", Name: "principal_queued_total",
	Help: "Tool calls and programs that waited for their principal's share (gateway.principal_share in flight while other principals had calls).",
})

func init() { Registry.MustRegister(TaskQueued, TaskBusy, PrincipalQueued) }
