package auditstream

// EventEgressRefused is a connection a sandboxed stdio server asked its
// egress proxy for and did not get (issue 32): a host not in its
// allowlist, a name resolving to a loopback, private or metadata
// address, too many connections at once.
const EventEgressRefused = "egress_refused"

// EgressRefusal is one egress_refused line.
type EgressRefusal struct {
	Server string
	// Host is what the server asked for (host:port), Kind the refusal's
	// class (not_allowed, address, resolve, protocol, limit).
	Host, Kind, Reason string
	// Suppressed counts the refusals of the server not written since the
	// last line (the proxy writes a few per second at most).
	Suppressed int
}

// EgressRefused writes an egress_refused line.
func (a *Log) EgressRefused(r EgressRefusal) {
	e := a.event(EventEgressRefused)
	if e == nil {
		return
	}
	e = e.Str("server", r.Server).Str("host", truncate(r.Host)).Str("kind", r.Kind).Str("reason", truncate(r.Reason))
	if r.Suppressed > 0 {
		e = e.Int("suppressed", r.Suppressed)
	}
	e.Send()
}
