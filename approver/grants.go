package approver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
)

// GrantUpdateSuffix makes an approval with a grant another Update than the
// same approval without one, so that a second try with a grant is refused
// as a second vote rather than answered with the first outcome. Every
// channel appends it to its Update ID.
func GrantUpdateSuffix(g *api.GrantAsk) string {
	if g.Empty() {
		return ""
	}
	s := ":grant:" + strconv.Itoa(g.Calls) + ":" + g.For.String()
	if g.Principal {
		s += ":principal"
	}
	return s
}

// Revoke ends a grant (its ID names its task): later calls it covered ask
// for approval again. by must be the grant's principal or one of its
// approvers; the workflow's refusal comes back as a *Refusal.
func Revoke(ctx context.Context, c client.Client, grantID, by, reason string) (api.Grant, error) {
	task, err := TaskOf(grantID)
	if err != nil || !api.IsGrantID(grantID) {
		return api.Grant{}, fmt.Errorf("%q is not a grant ID (they look like task-1a2b~grant-call-3c4d; airlock tasks show TASK lists them)", grantID)
	}
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: task, UpdateName: api.UpdateRevokeGrant,
		Args: []any{api.RevokeGrantRequest{GrantID: grantID, By: by, Reason: reason}}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var g api.Grant
	if err == nil {
		err = h.Get(ctx, &g)
	}
	if err != nil {
		var app *temporal.ApplicationError
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &app):
			return g, &Refusal{RequestID: grantID, Reason: app.Message()}
		case errors.As(err, &nf):
			return g, &Refusal{RequestID: grantID, Reason: fmt.Sprintf("task %s is not running, so its grants are over", task)}
		}
		return g, fmt.Errorf("revoking %s: %w", grantID, err)
	}
	return g, nil
}

// GrantText is a grant as the audit stream records it ("" for none).
func GrantText(g *api.GrantAsk) string {
	if g.Empty() {
		return ""
	}
	return g.String()
}
