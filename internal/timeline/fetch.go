package timeline

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
)

// maxRuns bounds the walk back through a task's runs.
const maxRuns = 10000

// FetchRun is the whole history of one run ("" for the latest).
func FetchRun(ctx context.Context, c client.Client, taskID, runID string) (*historypb.History, error) {
	it := c.GetWorkflowHistory(ctx, taskID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, err
		}
		h.Events = append(h.Events, ev)
	}
	if len(h.GetEvents()) == 0 {
		return nil, fmt.Errorf("task %s has no history", taskID)
	}
	return h, nil
}

// FetchRuns is the histories of a task's runs, oldest first, ending with
// runID ("" for the latest run): each run's start names the run it
// continues, so the walk needs no visibility query.
func FetchRuns(ctx context.Context, c client.Client, taskID, runID string) ([]*historypb.History, error) {
	var hists []*historypb.History
	for range maxRuns {
		h, err := FetchRun(ctx, c, taskID, runID)
		if err != nil {
			if len(hists) > 0 {
				return nil, fmt.Errorf("run %s of task %s (continued by a later run): %w", runID, taskID, err)
			}
			return nil, err
		}
		hists = append(hists, h)
		runID = h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if runID == "" {
			break
		}
	}
	for i, j := 0, len(hists)-1; i < j; i, j = i+1, j-1 {
		hists[i], hists[j] = hists[j], hists[i]
	}
	return hists, nil
}
