package auditstream

// GrantRevocation is a revocation of an approval grant (airlock approvals
// revoke): done, or refused with the reason. The revoker's own reason is
// left out, as a decision's comment is: it is in the task's history.
type GrantRevocation struct {
	Grant, By, Via string
	Refused        string
}

// GrantRevoked writes a grant_revoked line (with refused when it did not
// count).
func (a *Log) GrantRevoked(r GrantRevocation) {
	e := a.event(EventGrantRevoked).Str("grant", r.Grant).Str("by", r.By).Str("via", r.Via)
	if r.Refused != "" {
		e = e.Str("refused", truncate(r.Refused))
	}
	e.Send()
}
