package activities

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
)

// AddPrincipalGrant records a grant across the principal's tasks in the
// principal's grants workflow, starting it when none runs (Update with
// start). The grant's ID is the Update ID: a retry records it once.
func (a *Activities) AddPrincipalGrant(ctx context.Context, g api.Grant) error {
	c := activity.GetClient(ctx)
	id := api.PrincipalGrantsID(g.Principal)
	op := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: id, TaskQueue: activity.GetInfo(ctx).TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, api.PrincipalGrantsName, api.PrincipalGrantsInput{Principal: g.Principal})
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{WorkflowID: id, UpdateID: g.ID, UpdateName: api.UpdateAddGrant,
			Args: []any{g}, WaitForStage: client.WorkflowUpdateStageCompleted}})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.Type() == api.ErrTypeGrantRefused {
		return temporal.NewNonRetryableApplicationError(app.Message(), api.ErrTypeGrantRefused, err)
	}
	if err != nil {
		return fmt.Errorf("recording grant %s in %s: %w", g.ID, id, err)
	}
	return nil
}

// UsePrincipalGrant asks the principal's grants workflow whether a grant
// covers the call, counting it when one does. The call's task and ID make
// the Update ID, so a retried activity counts the call once. No grants
// workflow running means no grant.
func (a *Activities) UsePrincipalGrant(ctx context.Context, r api.UseGrantRequest) (api.UseGrantResult, error) {
	c := activity.GetClient(ctx)
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: api.PrincipalGrantsID(r.Principal),
		UpdateID: api.GrantUseID(r.TaskID, r.CallID), UpdateName: api.UpdateUseGrant, Args: []any{r},
		WaitForStage: client.WorkflowUpdateStageCompleted})
	var out api.UseGrantResult
	if err == nil {
		err = h.Get(ctx, &out)
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return api.UseGrantResult{}, nil
	}
	return out, err
}
