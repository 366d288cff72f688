package activities

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
)

// TakeLimits takes one call's tokens from the shared windows of its
// rate limits (a principal's, a role's): each window is a Limiter
// workflow, asked by Update-with-Start, so that it holds across every
// gateway replica and worker. It takes them in order and, when one
// refuses, gives back those it took: a refused call takes nothing.
// It runs as a local activity of the task; its result is recorded in the
// task's history.
func (a *Activities) TakeLimits(ctx context.Context, in api.TakeLimitsInput) (api.TakeLimitsOutput, error) {
	c := activity.GetClient(ctx)
	if c == nil {
		return api.TakeLimitsOutput{}, errors.New("no Temporal client in the activity's context")
	}
	tq := activity.GetInfo(ctx).TaskQueue
	var taken []api.RateLimit
	giveBack := func() {
		for _, l := range taken {
			// Best effort: a token not given back is returned by time.
			_, _ = takeToken(ctx, c, tq, l.WindowKey(in.Tool), api.RefundID(in.TaskID, in.CallID), api.TakeRequest{Limit: l, Refund: true})
		}
	}
	for _, l := range in.Limits {
		res, err := takeToken(ctx, c, tq, l.WindowKey(in.Tool), api.CallKey(in.TaskID, in.CallID), api.TakeRequest{Limit: l})
		if err != nil {
			giveBack()
			return api.TakeLimitsOutput{}, fmt.Errorf("rate limit %s: %w", l.Name, err)
		}
		if !res.Allowed {
			giveBack()
			return api.TakeLimitsOutput{Hit: &api.LimitHit{Check: api.CheckRateLimit, Limit: l.Name, Window: l.Window, RetryAfter: res.RetryAfter}}, nil
		}
		taken = append(taken, l)
	}
	return api.TakeLimitsOutput{}, nil
}

// takeToken sends one TakeRequest to the limiter of key, starting it if
// it is not running. The Update ID makes a retried attempt of the same
// call take once (within the limiter's run).
func takeToken(ctx context.Context, c client.Client, tq, key, updateID string, req api.TakeRequest) (api.TakeResult, error) {
	op := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: api.LimiterID(key), TaskQueue: tq,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, api.LimiterName, api.LimiterInput{Key: key})
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{UpdateID: updateID, UpdateName: api.UpdateTake,
			Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted},
	})
	var res api.TakeResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	return res, err
}
