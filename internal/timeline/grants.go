package timeline

import (
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"

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
