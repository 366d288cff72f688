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

// principalGrantsLinger is how long a principal's grants workflow waits
// for a new grant once none is active, before it ends (the next grant
// starts it again).
const principalGrantsLinger = time.Minute

// principalGrantsCANAfter is the history length after which the workflow
// continues as new with its active grants.
const principalGrantsCANAfter = 2000

// PrincipalGrants holds the grants that span a principal's tasks
// (api.GrantScopePrincipal): tasks add them (AddPrincipalGrant) and ask
// them (UsePrincipalGrant) through Updates, which count and expire them on
// this workflow's time, so two tasks never use the same last call of a
// grant. People revoke them with the revoke_grant Update, as a task's.
// Every such grant has an expiry; the workflow ends once none is active.
func PrincipalGrants(ctx workflow.Context, in api.PrincipalGrantsInput) error {
	s := &principalGrants{principal: in.Principal}
	for _, g := range in.Grants {
		s.grants = append(s.grants, &g)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateAddGrant, s.add,
		workflow.UpdateHandlerOptions{Validator: s.validateAdd}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, api.UpdateUseGrant, s.use); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRevokeGrant, s.revoke,
		workflow.UpdateHandlerOptions{Validator: s.validateRevoke}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryGrants, func() ([]api.Grant, error) { return copyGrants(s.grants), nil }); err != nil {
		return err
	}
	for {
		now := workflow.Now(ctx)
		wait, active := principalGrantsLinger, s.lastExpiry(now)
		if !active.IsZero() {
			wait = active.Sub(now)
		}
		changed, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return s.changed })
		if err != nil {
			return err
		}
		s.changed = false
		now = workflow.Now(ctx)
		if !changed && active.IsZero() && s.lastExpiry(now).IsZero() {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			if s.lastExpiry(workflow.Now(ctx)).IsZero() {
				return nil
			}
			continue
		}
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() > principalGrantsCANAfter || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			next := api.PrincipalGrantsInput{Principal: s.principal}
			for _, g := range s.grants {
				if g.Active(workflow.Now(ctx)) {
					next.Grants = append(next.Grants, *g)
				}
			}
			return workflow.NewContinueAsNewError(ctx, api.PrincipalGrantsName, next)
		}
	}
}

type principalGrants struct {
	principal string
	grants    []*api.Grant
	changed   bool
}

// lastExpiry is when the last active grant expires (zero: none active).
func (s *principalGrants) lastExpiry(now time.Time) time.Time {
	var last time.Time
	for _, g := range s.grants {
		if g.Active(now) && g.ExpiresAt.After(last) {
			last = g.ExpiresAt
		}
	}
	return last
}

func (s *principalGrants) grant(id string) *api.Grant { return findGrant(s.grants, id) }

func (s *principalGrants) validateAdd(ctx workflow.Context, g api.Grant) error {
	refuse := func(msg string) error { return temporal.NewApplicationError(msg, api.ErrTypeGrantRefused) }
	switch {
	case g.Principal != s.principal || g.Scope != api.GrantScopePrincipal:
		return refuse(fmt.Sprintf("grant %s is not a grant of %s across tasks", g.ID, s.principal))
	case g.ExpiresAt.IsZero() || !workflow.Now(ctx).Before(g.ExpiresAt):
		return refuse(fmt.Sprintf("grant %s has no expiry in the future; a grant across tasks must end", g.ID))
	case s.grant(g.ID) != nil:
		return refuse(fmt.Sprintf("grant %s is already recorded", g.ID))
	}
	return nil
}

func (s *principalGrants) add(ctx workflow.Context, g api.Grant) (api.Grant, error) {
	s.grants = append(s.grants, &g)
	s.changed = true
	now := workflow.Now(ctx)
	for len(s.grants) > grantsKept {
		i := slices.IndexFunc(s.grants, func(g *api.Grant) bool { return !g.Active(now) })
		if i < 0 {
			i = 0
		}
		s.grants = slices.Delete(s.grants, i, i+1)
	}
	return g, nil
}

// use counts a call against the first active grant that covers it.
func (s *principalGrants) use(ctx workflow.Context, r api.UseGrantRequest) (api.UseGrantResult, error) {
	now := workflow.Now(ctx)
	for _, g := range s.grants {
		if r.Principal == s.principal && g.Active(now) && g.Covers(r.Tool, r.Arguments) {
			g.Used++
			s.changed = true
			out := *g
			return api.UseGrantResult{Grant: &out}, nil
		}
	}
	return api.UseGrantResult{}, nil
}

func (s *principalGrants) validateRevoke(ctx workflow.Context, r api.RevokeGrantRequest) error {
	refuse := func(msg string) error { return temporal.NewApplicationError(msg, api.ErrTypeGrantRefused) }
	g := s.grant(r.GrantID)
	switch {
	case strings.TrimSpace(r.By) == "" || len(r.By) > api.MaxReasonBytes || len(r.Reason) > api.MaxReasonBytes:
		return refuse("the revocation names nobody (By), or its name or reason is too long")
	case g == nil:
		return refuse(fmt.Sprintf("%s has no grant %q across tasks", s.principal, r.GrantID))
	}
	return revokeRefusal(g, r.By)
}

func (s *principalGrants) revoke(ctx workflow.Context, r api.RevokeGrantRequest) (api.Grant, error) {
	s.changed = true
	return revoke(ctx, s.grant(r.GrantID), r), nil
}

// The helpers below serve both a task's grants and a principal's grants
// across tasks, so the two keep the same rules.

func findGrant(gs []*api.Grant, id string) *api.Grant {
	for _, g := range gs {
		if g.ID == id {
			return g
		}
	}
	return nil
}

// revokeRefusal refuses revoking grant g again, or by someone who is neither
// its principal nor one of its approvers.
func revokeRefusal(g *api.Grant, by string) error {
	refuse := func(msg string) error { return temporal.NewApplicationError(msg, api.ErrTypeGrantRefused) }
	switch {
	case !g.RevokedAt.IsZero():
		return refuse(fmt.Sprintf("grant %s was already revoked by %s at %s", g.ID, g.RevokedBy, g.RevokedAt.UTC().Format(time.RFC3339)))
	case by != g.Principal && !slices.Contains(g.Approvers, by):
		return refuse(fmt.Sprintf("%s may not revoke grant %s: only its principal (%s) and the approvers of group %q may", by, g.ID, g.Principal, g.Group))
	}
	return nil
}

// revoke ends grant g (validated first) and returns a copy of it.
func revoke(ctx workflow.Context, g *api.Grant, r api.RevokeGrantRequest) api.Grant {
	g.RevokedAt, g.RevokedBy, g.Reason = workflow.Now(ctx), r.By, r.Reason
	return *g
}

// copyGrants is a deep copy, for queries and continue-as-new.
func copyGrants(gs []*api.Grant) []api.Grant {
	if len(gs) == 0 {
		return nil
	}
	out := make([]api.Grant, len(gs))
	for i, g := range gs {
		out[i] = *g
		out[i].GrantedBy = slices.Clone(g.GrantedBy)
		out[i].Args = slices.Clone(g.Args)
		out[i].Approvers = slices.Clone(g.Approvers)
	}
	return out
}
