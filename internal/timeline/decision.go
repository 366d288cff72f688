package timeline

import (
	"fmt"

	"github.com/airlock-run/airlock/api"
)

// assignDecision makes a recorded decision the call's.
func (b *builder) assignDecision(cs *callState, d *decideMarker) {
	d.used = true
	if d.err != "" {
		cs.decideError = d.err
	}
	cs.c.Decision = decisionOf(d)
	if d.err == "" { // the content guard's findings in the arguments
		cs.c.Findings = append(cs.c.Findings, d.out.Findings...)
	}
	if o := d.out; d.err == "" && o.Approval != nil {
		cs.redact = append(cs.redact, o.Approval.Redact...)
	}
}

// decisionOf is the Decision a decide marker recorded.
func decisionOf(d *decideMarker) *Decision {
	at := d.at
	if d.err != "" {
		return &Decision{At: &at, Effect: api.Deny, Check: api.CheckError,
			Reason: fmt.Sprintf("denied: the policy could not be evaluated (%s); nothing ran", d.err)}
	}
	o := d.out
	return &Decision{At: &at, Effect: o.Effect, Check: o.Check, Rule: o.Rule, Reason: o.Reason,
		PolicyVersion: o.Version, Group: o.Group, Quorum: o.Quorum, External: o.External}
}

// finishRejudged shows the second decision recorded for a call that was
// not edited: the re-judgement of an approved call before it ran (the
// workflow's changeApprovalRecheck). An edited call's second decision is
// its edit's (Edit.Effect).
func finishRejudged(cs *callState) {
	if cs.rejudge == nil || cs.edit != nil {
		return
	}
	cs.rejudge.used = true
	cs.c.Rejudged = decisionOf(cs.rejudge)
}

// matchDecisions gives each agent call its recorded policy decision. The
// decision marker does not name its call, and concurrent calls may decide
// in any order, so a call takes the first unused decision recorded while
// it ran that equals the decision in its result.
func (b *builder) matchDecisions() {
	for _, pass := range []bool{true, false} {
		for _, cs := range b.order {
			if cs.plan || cs.prog != nil || cs.c.Decision != nil || cs.c.Repeat {
				continue
			}
			if cs.recorded == nil && cs.done != 0 {
				continue // a limit, or a history from before policy
			}
			for _, d := range b.decides {
				if d.used || d.seq < cs.accepted || (cs.done != 0 && d.seq > cs.done) {
					continue
				}
				if pass && !sameDecision(d, cs.recorded) {
					continue
				}
				b.assignDecision(cs, d)
				break
			}
		}
	}
}

func sameDecision(d *decideMarker, r *api.Decision) bool {
	if r == nil {
		return false
	}
	if d.err != "" {
		return r.Check == api.CheckError
	}
	o := d.out
	return o.Effect == r.Effect && o.Check == r.Check && o.Rule == r.Rule && o.Reason == r.Reason && o.Version == r.PolicyVersion
}
