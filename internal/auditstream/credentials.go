package auditstream

// Credential events (issue 31 §3): a user's own credential for a
// third-party upstream stored after their consent, a consent declined or
// refused, a credential revoked. Never the token.
const (
	EventCredentialStored  = "credential_stored"
	EventCredentialRefused = "credential_refused"
	EventCredentialRevoked = "credential_revoked"
	// A call answered with a consent link (the link is never written).
	EventConsentRequested = "consent_requested"
)

// Credential is one credential event: whose, for which upstream, by whom
// and through what (consent, cli), and the reason when refused.
type Credential struct {
	Event               string // one of EventCredential…
	Principal, Upstream string
	By, Via             string
	Scopes              []string
	Detail              string // what happened at the provider (revocation), or why it was refused
}

// Credential writes a credential line.
func (a *Log) Credential(c Credential) {
	e := a.event(c.Event).Str("principal", c.Principal).Str("upstream", c.Upstream).Str("via", c.Via)
	if c.By != "" {
		e = e.Str("by", c.By)
	}
	if len(c.Scopes) > 0 {
		e = e.Strs("scopes", c.Scopes)
	}
	if c.Detail != "" {
		e = e.Str("detail", truncate(c.Detail))
	}
	e.Send()
}
