package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// grantsKept is how many grants a task remembers (active ones first to
// stay), across continue-as-new.
const grantsKept = 32

// startGrants decides, once per run, whether the run takes grants, picks
// up the grants carried in, and registers the revoke_grant Update.
func (t *task) startGrants(ctx workflow.Context) error {
	if workflow.GetVersion(ctx, changeGrants, workflow.DefaultVersion, 1) < 1 {
		return nil
	}
	t.grantsOn = true
	if c := t.in.Carried; c != nil {
		for _, g := range c.Grants {
			t.grants = append(t.grants, &g)
		}
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRevokeGrant, t.revokeGrant,
		workflow.UpdateHandlerOptions{Validator: t.validateRevokeGrant})
}

// granted is the decision on a call that policy sends for approval when a
// grant of the task covers it: allow, check grant, naming the grant and
// what is left of it. It counts the call against the grant. Calls policy
// allows or denies outright never reach a grant.
func (t *task) granted(ctx workflow.Context, req api.CallRequest, d api.Decision, spec *api.ApprovalSpec) (api.Decision, bool) {
	if !t.grantsOn || d.Effect != api.RequireApproval || spec == nil || spec.MaxGrant == nil {
		return d, false
	}
	now := workflow.Now(ctx)
	for _, g := range t.grants {
		if g.Tool != req.Tool || !g.Active(now) || !grantCovers(g, req) {
			continue
		}
		g.Used++
		reason := fmt.Sprintf("allowed by grant %s (%s approved %s with it at %s, bound to %s): %s",
			g.ID, strings.Join(g.GrantedBy, ", "), g.RequestID, g.GrantedAt.UTC().Format(time.RFC3339), grantArgsText(g), g.Remaining())
		return api.Decision{Effect: api.Allow, Check: api.CheckGrant, Rule: d.Rule, Reason: reason,
			PolicyVersion: d.PolicyVersion, Group: d.Group, Quorum: d.Quorum, Grant: g.ID}, true
	}
	if spec.MaxGrant.Principal {
		if g := t.usePrincipalGrant(ctx, req); g != nil {
			reason := fmt.Sprintf("allowed by grant %s across %s's tasks (%s approved %s with it at %s, bound to %s): %s",
				g.ID, g.Principal, strings.Join(g.GrantedBy, ", "), g.RequestID, g.GrantedAt.UTC().Format(time.RFC3339), grantArgsText(g), g.Remaining())
			return api.Decision{Effect: api.Allow, Check: api.CheckGrant, Rule: d.Rule, Reason: reason,
				PolicyVersion: d.PolicyVersion, Group: d.Group, Quorum: d.Quorum, Grant: g.ID}, true
		}
	}
	return d, false
}

// principalGrantOptions: the principal's grants workflow answers at once;
// a failure to reach it means no grant (the call asks for approval).
func principalGrantOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{api.ErrTypeGrantRefused}},
	})
}

// usePrincipalGrant asks the principal's grants workflow for a grant that
// covers req, counting the call against it (nil: none).
func (t *task) usePrincipalGrant(ctx workflow.Context, req api.CallRequest) *api.Grant {
	if req.ArgumentsRef != "" {
		return nil
	}
	var out api.UseGrantResult
	err := workflow.ExecuteActivity(principalGrantOptions(ctx), api.UsePrincipalGrantName, api.UseGrantRequest{
		Principal: t.in.Principal, TaskID: t.in.TaskID, CallID: req.CallID, Tool: req.Tool, Arguments: req.Arguments,
	}).Get(ctx, &out)
	if err != nil {
		workflow.GetLogger(ctx).Warn("principal grants not reachable; the call asks for approval", "error", err)
		return nil
	}
	return out.Grant
}

// grantCovers reports whether req has the grant's argument values.
func grantCovers(g *api.Grant, req api.CallRequest) bool {
	if len(g.Args) > 0 && req.ArgumentsRef != "" {
		return false // arguments not in history: nothing to compare
	}
	for _, a := range g.Args {
		if g.ArgValue(req.Arguments, a.Path) != a.Value {
			return false
		}
	}
	return true
}

func grantArgsText(g *api.Grant) string {
	if len(g.Args) == 0 {
		return "any arguments of " + g.Tool
	}
	parts := make([]string, len(g.Args))
	for i, a := range g.Args {
		v := a.Value
		if v == "" {
			v = "absent"
		}
		parts[i] = a.Path + "=" + v
	}
	return strings.Join(parts, ", ")
}

// grantOnApproval makes the grant the approvers asked for when they
// approved req's request: what every approving vote granted (the fewest
// calls, the shortest time), with the dimension none named filled in from
// the tool's max_grant. An approval without a grant in every approving
// vote (or by on_timeout: approve) grants nothing.
func (t *task) grantOnApproval(ctx workflow.Context, req api.CallRequest) {
	if !t.grantsOn {
		return
	}
	ar := t.approval(api.RequestID(t.in.TaskID, req.CallID))
	if ar == nil || ar.State != api.ApprovalApproved || ar.MaxGrant == nil {
		return
	}
	var ask api.GrantAsk
	var by []string
	for _, v := range ar.Votes {
		if !v.Approve {
			continue
		}
		if v.Grant.Empty() {
			return
		}
		if len(by) == 0 {
			ask = *v.Grant
		} else {
			ask.Calls = minPositive(ask.Calls, v.Grant.Calls)
			ask.For = minPositive(ask.For, v.Grant.For)
			ask.Principal = ask.Principal && v.Grant.Principal
		}
		by = append(by, v.Approver)
	}
	if len(by) == 0 || ask.Empty() {
		return
	}
	b := ar.MaxGrant
	if ask.Calls == 0 {
		ask.Calls = b.Calls
	}
	if ask.For == 0 {
		ask.For = b.Duration
	}
	at := ar.DecidedAt
	if at.IsZero() {
		at = workflow.Now(ctx)
	}
	g := &api.Grant{ID: api.GrantIDOf(t.in.TaskID, req.CallID), TaskID: t.in.TaskID, RequestID: ar.ID,
		Group: ar.Group, Approvers: slices.Clone(ar.Approvers),
		Tool: req.Tool, Principal: t.in.Principal, Scope: api.GrantScopeTask, GrantedBy: by, GrantedAt: at,
		Calls: ask.Calls, ExactArgs: t.exactOn}
	if ask.For > 0 {
		g.ExpiresAt = at.Add(ask.For)
	}
	for _, p := range ar.GrantArgs {
		g.Args = append(g.Args, api.GrantArg{Path: p, Value: g.ArgValue(req.Arguments, p)})
	}
	if ask.Principal && b.Principal && !g.ExpiresAt.IsZero() {
		// Across the principal's tasks: recorded in its grants workflow.
		pg := *g
		pg.ID, pg.Scope = api.PrincipalGrantIDOf(t.in.Principal, t.in.TaskID, req.CallID), api.GrantScopePrincipal
		err := workflow.ExecuteActivity(principalGrantOptions(ctx), api.AddPrincipalGrantName, pg).Get(ctx, nil)
		if err == nil {
			ar.GrantID = pg.ID
			return
		}
		// Not recorded there: the grant still holds in this task.
		workflow.GetLogger(ctx).Warn("principal grant not recorded; it holds in this task only", "grant", pg.ID, "error", err)
	}
	ar.GrantID = g.ID
	t.grants = append(t.grants, g)
	t.pruneGrants(at)
}

func minPositive[T int | time.Duration](a, b T) T {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// pruneGrants keeps at most grantsKept grants, dropping the oldest closed
// ones first.
func (t *task) pruneGrants(now time.Time) {
	for len(t.grants) > grantsKept {
		i := slices.IndexFunc(t.grants, func(g *api.Grant) bool { return !g.Active(now) })
		if i < 0 {
			i = 0
		}
		t.grants = slices.Delete(t.grants, i, i+1)
	}
}

// validateGrantAsk refuses a decision's grant the request cannot take.
func (t *task) validateGrantAsk(ar *api.ApprovalRequest, d api.DecideRequest) error {
	g := d.Grant
	if g == nil || (g.Empty() && !g.Principal) {
		return nil
	}
	refuse := func(msg string) error { return temporal.NewApplicationError(msg, api.ErrTypeGrantRefused) }
	switch {
	case !d.Approve:
		return refuse("a denial grants nothing; deny without grant options")
	case !t.grantsOn:
		return refuse(fmt.Sprintf("task %s started before approval grants; approve this call once, without grant options", t.in.TaskID))
	}
	if msg := ar.MaxGrant.Check(ar.Tool, g); msg != "" {
		return refuse(msg)
	}
	return nil
}

// noteGrant records the grant a vote asked for and says so in the
// decision's message.
func (t *task) noteGrant(ar *api.ApprovalRequest, d api.DecideRequest) string {
	if d.Grant.Empty() || len(ar.Votes) == 0 {
		return ""
	}
	ar.Votes[len(ar.Votes)-1].Grant = d.Grant
	return "; with a grant of " + d.Grant.String() + " of " + ar.Tool
}

func (t *task) grant(id string) *api.Grant { return findGrant(t.grants, id) }

// validateRevokeGrant refuses revocations that would change nothing.
func (t *task) validateRevokeGrant(ctx workflow.Context, r api.RevokeGrantRequest) error {
	refuse := func(msg string) error { return temporal.NewApplicationError(msg, api.ErrTypeGrantRefused) }
	g := t.grant(r.GrantID)
	switch {
	case len(r.GrantID) > api.MaxReasonBytes || len(r.By) > api.MaxReasonBytes || len(r.Reason) > api.MaxReasonBytes:
		return refuse(fmt.Sprintf("revoke: keep the grant ID, name and reason under %d bytes", api.MaxReasonBytes))
	case strings.TrimSpace(r.By) == "":
		return refuse("the revocation names nobody (By)")
	case g == nil:
		return refuse(fmt.Sprintf("task %s has no grant %q; airlock tasks show %s lists its grants", t.in.TaskID, r.GrantID, t.in.TaskID))
	}
	return revokeRefusal(g, r.By)
}

// revokeGrant ends a grant: later calls ask for approval again.
func (t *task) revokeGrant(ctx workflow.Context, r api.RevokeGrantRequest) (api.Grant, error) {
	return revoke(ctx, t.grant(r.GrantID), r), nil
}

// grantsCopy is the task's grants, for the status query and continue-as-new.
func (t *task) grantsCopy() []api.Grant { return copyGrants(t.grants) }

// grantNote is what a vote granted, for notices ("" for none).
func grantNote(g *api.GrantAsk) string {
	if g.Empty() {
		return ""
	}
	return g.String()
}
