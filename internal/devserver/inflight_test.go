package devserver

import (
	"testing"

	"go.temporal.io/server/common/dynamicconfig"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/workflows"
)

// The server's in-flight Update limit, the workflows' fast-path headroom
// and the gateway's per-task concurrency move together (issue 28 §1):
// the headroom must equal the limit, and the gateway must leave room
// under it for what it does not count (calls waiting for approval).
func TestInFlightUpdatesMatchTheWorkflowsAndTheGateway(t *testing.T) {
	got := dynamicConfig()[dynamicconfig.WorkflowExecutionMaxInFlightUpdates.Key()]
	if got != MaxInFlightUpdates {
		t.Fatalf("history.maxInFlightUpdates = %v, want %d", got, MaxInFlightUpdates)
	}
	if workflows.FastHeadroom != MaxInFlightUpdates {
		t.Errorf("workflows.FastHeadroom = %d, want history.maxInFlightUpdates (%d): raise both, the headroom behind a new version", workflows.FastHeadroom, MaxInFlightUpdates)
	}
	if gateway.DefaultTaskConcurrency >= MaxInFlightUpdates {
		t.Errorf("gateway.DefaultTaskConcurrency = %d, want less than history.maxInFlightUpdates (%d)", gateway.DefaultTaskConcurrency, MaxInFlightUpdates)
	}
}
