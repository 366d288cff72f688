package gateway

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
)

// resultInRun reads call's result from the history of the task's run
// runID: the result its Update completed with. It serves a call whose own
// attempt was moved to a later run (the run it was sent to continued as
// new while the call ran) and that run no longer holds the result: the
// client that sent the call gets what it ran, not only that it ran.
// False when the history does not have it (retention, an error, or the
// run answered from an earlier run itself).
func (g *Gateway) resultInRun(ctx context.Context, task, runID, call string) (api.CallResult, bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	it := g.opts.Temporal.GetWorkflowHistory(ctx, task, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return api.CallResult{}, false
		}
		a := ev.GetWorkflowExecutionUpdateCompletedEventAttributes()
		if a == nil || a.GetMeta().GetUpdateId() != call {
			continue
		}
		var res api.CallResult
		s := a.GetOutcome().GetSuccess()
		if s == nil || converter.GetDefaultDataConverter().FromPayloads(s, &res) != nil || res.Repeat != nil {
			return api.CallResult{}, false
		}
		return res, true
	}
	return api.CallResult{}, false
}
