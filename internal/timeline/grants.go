package timeline

import (
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
)

// Revocation is an approval grant revoked (the revoke_grant Update).
type Revocation struct {
	Grant  string    `json:"grant"`
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	// Used is how many calls the grant had allowed; Refused says why the
	// revocation failed (then nothing changed).
	Used    int    `json:"used"`
	Refused string `json:"refused,omitempty"`
	// Workflow is the workflow whose history recorded the revocation when
	// it is not the task's: a grant across the principal's tasks is
	// revoked in the principal's grants workflow (AddPrincipalRevocations).
	Workflow string `json:"workflow,omitempty"`
}

// AddPrincipalRevocations adds to tl the revocations of the grants across
// the principal's tasks that tl's task made, as hists (the runs of the
// principal's grants workflow, api.PrincipalGrantsID) recorded them:
// such a grant lives, and is revoked, in that workflow, so the task's own
// history never sees its revocation.
func AddPrincipalRevocations(tl *Timeline, hists []*historypb.History) {
	if tl == nil || tl.Principal == "" {
		return
	}
	b := &builder{dc: converter.GetDefaultDataConverter(), opts: &Options{}, tl: &Timeline{Task: tl.Task},
		updates: map[string]*updateRef{}}
	for _, h := range hists {
		for _, ev := range h.GetEvents() {
			at := ev.GetEventTime().AsTime().UTC()
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
				a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes()
				if a.GetAcceptedRequest().GetInput().GetName() == api.UpdateRevokeGrant {
					b.updateAccepted(at, a)
				}
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
				b.updateCompleted(at, ev.GetWorkflowExecutionUpdateCompletedEventAttributes())
			}
		}
	}
	// Grant IDs of the task's principal grants: grants-<principal>~grant-<task>~<call>.
	prefix := api.PrincipalGrantIDOf(tl.Principal, tl.Task, "")
	for _, r := range b.tl.Revocations {
		if strings.HasPrefix(r.Grant, prefix) {
			r.Workflow = api.PrincipalGrantsID(tl.Principal)
			tl.Revocations = append(tl.Revocations, r)
		}
	}
	tl.Problems = append(tl.Problems, b.tl.Problems...)
}

func (b *builder) revokeRequested(id string, args *commonpb.Payloads, at time.Time) {
	var r api.RevokeGrantRequest
	if err := b.decode(args, &r); err != nil {
		b.problem("revoke_grant update %s: %v", id, err)
	}
	b.tl.Revocations = append(b.tl.Revocations, Revocation{Grant: r.GrantID, By: r.By, Reason: r.Reason, At: at})
	b.updates[id] = &updateRef{kind: "revoke", rollback: len(b.tl.Revocations) - 1}
}

func (b *builder) revokeCompleted(ref *updateRef, fail *failurepb.Failure, success *commonpb.Payloads) {
	rv := &b.tl.Revocations[ref.rollback]
	if fail != nil {
		rv.Refused = fail.GetMessage()
		return
	}
	var g api.Grant
	if err := b.decode(success, &g); err == nil {
		rv.Used = g.Used
	}
}

func revocationBlocks(tl *Timeline) []block {
	var out []block
	for _, r := range tl.Revocations {
		f := map[string]any{"grant": r.Grant, "by": r.By}
		text := fmt.Sprintf("grant %s revoked by %s", r.Grant, r.By)
		if r.Reason != "" {
			f["reason"] = r.Reason
			text += fmt.Sprintf(" (%q)", r.Reason)
		}
		if r.Refused != "" {
			f["refused"] = r.Refused
			text += "; refused: " + r.Refused
		}
		if r.Workflow != "" {
			f["workflow"] = r.Workflow
			text += " (a grant across the principal's tasks, recorded in " + r.Workflow + ")"
		}
		out = append(out, block{at: r.At, events: []event{{at: r.At, typ: EventGrantRevoked, run: runAt(tl, r.At), text: text, fields: f}}})
	}
	return out
}

// grantDecisions makes a call that a grant allowed show the task's
// decision (allow, check grant, naming the grant) rather than the policy's
// require_approval recorded before it.
func (b *builder) grantDecisions() {
	for _, cs := range b.order {
		r := cs.recorded
		if r == nil || r.Check != api.CheckGrant {
			continue
		}
		d := &Decision{Effect: r.Effect, Check: r.Check, Rule: r.Rule, Reason: r.Reason,
			PolicyVersion: r.PolicyVersion, Group: r.Group, Quorum: r.Quorum, Grant: r.Grant}
		if cs.c.Decision != nil {
			d.At = cs.c.Decision.At
		}
		cs.c.Decision = d
	}
}
