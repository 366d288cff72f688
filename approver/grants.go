package approver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
)

// grantUpdateSuffix makes an approval with a grant another Update than the
// same approval without one, so that a second try with a grant is refused
// as a second vote rather than answered with the first outcome.
func grantUpdateSuffix(g *api.GrantAsk) string {
	if g.Empty() {
		return ""
	}
	s := ":grant:" + strconv.Itoa(g.Calls) + ":" + g.For.String()
	if g.Principal {
		s += ":principal"
	}
	return s
}

// ParseGrant reads the grant options every decision path offers: a count
// of calls ("" or "0": none) and a duration ("" : none; "30m", "1h"). The
// result is nil when neither is given. The workflow checks the tool's
// approval.max_grant.
func ParseGrant(calls, dur string, principal bool) (*api.GrantAsk, error) {
	var g api.GrantAsk
	if s := strings.TrimSpace(calls); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 1000 {
			return nil, fmt.Errorf("grant calls %q: give a whole number of later calls the approval also covers, 1 to 1000", calls)
		}
		g.Calls = n
	}
	if s := strings.TrimSpace(dur); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("grant duration %q: give how long the approval also covers later calls, e.g. 30m or 1h", dur)
		}
		g.For = d
	}
	g.Principal = principal
	if g.Empty() {
		if principal {
			return nil, errors.New("a grant for the principal needs a number of calls or a duration too")
		}
		return nil, nil
	}
	return &g, nil
}

// Revoke ends a grant (its ID names its task): later calls it covered ask
// for approval again. by must be the grant's principal or one of its
// approvers; the workflow's refusal comes back as a *Refusal.
func Revoke(ctx context.Context, c client.Client, grantID, by, reason string) (api.Grant, error) {
	task, err := TaskOf(grantID)
	if err != nil || !strings.Contains(grantID, "~grant-") {
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
