package gateway

// User consent for third-party upstreams (server.http.auth.user_oauth,
// issue 31 §3): a call of a principal who has not authorized airlock at
// the upstream's provider does not enter its task; it is answered with a
// URL elicitation that sends the user to airlock's consent start endpoint
// (internal/consent): the -32042 URLElicitationRequired error for a
// 2025-11-25 client, an input-required result (its URL-mode elicitation,
// whose answer the client sends back with the retried call) for a
// 2026-07-28 one. A call of a principal who has carries a binding of the
// call to them (consent.Flow.Subject), by which the worker finds their
// credential when the call runs.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/consent"
	"github.com/airlock-run/airlock/internal/identity"
)

// consentInput names the consent elicitation in an input-required result.
const consentInput = "airlock-consent"

// usesUserOAuth reports whether server acts as the user with their own
// authorization at its provider.
func (g *Gateway) usesUserOAuth(server string) bool {
	for _, m := range g.cur().Manifests {
		if m.Server.Name == server {
			return m.Server.UsesUserOAuth()
		}
	}
	return false
}

// userConsent binds c to its caller's stored credential for its
// upstream, or answers it with the consent elicitation (a refusal, or a
// URLElicitationRequired error). Calls to other upstreams pass.
func (g *Gateway) userConsent(ctx context.Context, req *mcp.CallToolRequest, c *preparedCall) (*mcp.CallToolResult, error) {
	server := c.e.server
	if !g.usesUserOAuth(server) {
		return nil, nil
	}
	f := g.opts.Consent
	if f == nil {
		return errorResult(c.taskID, c.callID, server+" acts as the calling user with their own authorization (server.http.auth.user_oauth), and this gateway has no credential store: set AIRLOCK_CREDENTIAL_KEYS (`airlock credentials key` makes one). Nothing ran"), nil
	}
	// A 2026-07-28 client's retry answers the consent elicitation: nothing
	// waits for that answer but this check (mrtr.go delivers the others).
	if c.resume != nil && slices.Contains(c.resume.Asks, consentInput) {
		c.resume.Asks = slices.DeleteFunc(slices.Clone(c.resume.Asks), func(id string) bool { return id == consentInput })
		if len(c.resume.Asks) == 0 {
			c.resume = nil // the call (its ID kept) starts afresh
		}
	}
	// A 2026-07-28 client that declined the consent says so in its retry.
	if r, ok := req.Params.InputResponses[consentInput].(*mcp.ElicitResult); ok && r != nil && r.Action != "accept" {
		return errorResult(c.taskID, c.callID, fmt.Sprintf("%s did not run: the user did not authorize airlock at %s (%s). Call again to be asked again.", c.e.exposed, server, r.Action)), nil
	}
	name := c.pr.Name
	has, err := f.Has(ctx, name, server)
	if err != nil {
		c.log.Error().Err(err).Msg("call refused: the credential store cannot be read")
		return errorResult(c.taskID, c.callID, fmt.Sprintf("%s did not run: airlock cannot read the credential store (%v); try again later. Nothing ran", c.e.exposed, err)), nil
	}
	if has {
		b, err := f.Subject(c.taskID, name)
		if err != nil {
			return errorResult(c.taskID, c.callID, fmt.Sprintf("%s did not run: %v. Nothing ran", c.e.exposed, err)), nil
		}
		c.creq.Subject = bindingSubject(b)
		return nil, nil
	}
	link, eid, err := f.Begin(ctx, name, server, c.taskID)
	if err != nil {
		c.log.Error().Err(err).Msg("call refused: cannot start the consent flow")
		return errorResult(c.taskID, c.callID, fmt.Sprintf("%s did not run: airlock cannot start the authorization at %s (%v). Nothing ran", c.e.exposed, server, err)), nil
	}
	// The link is the flow's secret: it goes to the caller only.
	c.log.Info().Str("server", server).Str("elicitation", eid).Msg("call not run: the caller has not authorized airlock upstream; sent to consent")
	g.opts.Audit.Credential(auditstream.Credential{Event: auditstream.EventConsentRequested, Principal: name, Upstream: server, Via: "consent", Detail: eid})
	p := &mcp.ElicitParams{Mode: "url", URL: link, ElicitationID: eid,
		Message: fmt.Sprintf("%s acts as you at %s, and you have not authorized airlock there yet. Open the link to authorize (it works once, for a few minutes); then the call can be made again. Nothing ran.", c.e.exposed, server)}
	if !urlElicitation(req.Session) {
		// A client that cannot open links itself: the words carry it.
		return errorResult(c.taskID, c.callID, p.Message+" Link: "+link), nil
	}
	if multiRoundTrip(req.Session) {
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{consentInput: p},
			RequestState: g.encodeAskState(askState{Task: c.taskID, Call: c.callID, Principal: name, Tool: req.Params.Name, Asks: []string{consentInput}}),
			Meta:         mcp.Meta{MetaTask: c.taskID, MetaCall: c.callID}}, nil
	}
	g.consentWaits.add(eid, req.Session)
	return nil, mcp.URLElicitationRequiredError([]*mcp.ElicitParams{p})
}

// consentWaits remembers which 2025-11-25 session was sent to which
// consent, so that the session is told when the user has authorized
// (notifications/elicitation/complete), if the callback reaches this
// replica; a client told nothing calls again. Entries expire with the
// link.
type consentWaits struct {
	mu sync.Mutex
	m  map[string]consentWait
}

type consentWait struct {
	ss  *mcp.ServerSession
	exp time.Time
}

// maxConsentWaits bounds the sessions remembered.
const maxConsentWaits = 10000

func (w *consentWaits) add(eid string, ss *mcp.ServerSession) {
	if ss == nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]consentWait{}
	}
	if len(w.m) >= maxConsentWaits {
		for k, v := range w.m {
			if now.After(v.exp) {
				delete(w.m, k)
			}
		}
	}
	if len(w.m) < maxConsentWaits {
		w.m[eid] = consentWait{ss: ss, exp: now.Add(consent.DefaultTTL)}
	}
}

func (w *consentWaits) take(eid string) *mcp.ServerSession {
	w.mu.Lock()
	defer w.mu.Unlock()
	cw, ok := w.m[eid]
	delete(w.m, eid)
	if !ok || time.Now().After(cw.exp) {
		return nil
	}
	return cw.ss
}

// watchConsent tells the sessions waiting for a consent that it is done.
func (g *Gateway) watchConsent() {
	if g.opts.Consent == nil {
		return
	}
	g.opts.Consent.OnComplete(func(eid string) {
		ss := g.consentWaits.take(eid)
		if ss == nil {
			return
		}
		go func() { // not holding the user's callback page
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := ss.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: eid}); err != nil {
				g.log.Debug().Err(err).Str("elicitation", eid).Msg("could not tell the session its consent is done")
			}
		}()
	})
}

// urlElicitation reports whether the client of ss takes URL-mode
// elicitations: as it declared at initialize (a stateless 2026-07-28
// client declares per request, and the SDK checks it there).
func urlElicitation(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	if p == nil {
		return true
	}
	return p.Capabilities != nil && p.Capabilities.Elicitation != nil && p.Capabilities.Elicitation.URL != nil
}

// programConsent is what a program carries for its calls to upstreams
// with user_oauth: its caller's binding, when a tool of its table is on
// one (and no upstream of the table exchanges tokens, whose sealed token
// the program carries instead: its user_oauth calls then fail closed).
// A call to an upstream its user has not authorized fails "did not run"
// and says to call a tool of it directly, which elicits.
func (g *Gateway) programConsent(taskID string, tools []api.ProgramTool, pr *identity.Principal) *api.Subject {
	if g.opts.Consent == nil {
		return nil
	}
	for _, tl := range tools {
		if g.usesUserOAuth(tl.Server) {
			b, err := g.opts.Consent.Subject(taskID, pr.Name)
			if err != nil {
				return nil // its calls fail closed in the pool
			}
			return bindingSubject(b)
		}
	}
	return nil
}

// bindingSubject is a consent binding as the task records it.
func bindingSubject(b *consent.Binding) *api.Subject {
	return &api.Subject{Principal: b.Principal, Issuer: consent.Issuer, Subject: b.Principal, KeyID: b.KeyID, Sealed: b.MAC}
}
