package gateway

// Resource subscriptions: a session's resources/subscribe is forwarded to
// the upstream that owns the URI (counted, so one upstream subscription
// serves every session), dropped when the session unsubscribes, ends or
// goes idle, and the upstream's notifications/resources/updated are
// re-emitted to the subscribed sessions (resources.go publishes what may
// be subscribed to).

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/identity"
)

// subscriber returns the caller of a subscription request.
func (g *Gateway) subscriber(ctx context.Context, extra *mcp.RequestExtra) (*identity.Principal, error) {
	if c, ok := ctx.Value(callerKey{}).(caller); ok {
		return c.pr, c.err
	}
	return g.principalFor(extra)
}

// subscribe is the server's SubscribeHandler: it checks the caller may see
// the resource and subscribes the owning upstream (once per session and
// URI).
func (g *Gateway) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	pr, err := g.subscriber(ctx, req.Extra)
	if err != nil {
		return err
	}
	e := g.resourceOwner(uri)
	if e == nil {
		return mcp.ResourceNotFoundError(uri)
	}
	if !levelCovers(pr.DataLevel, e.level) {
		g.log.Info().Str("principal", pr.Name).Str("server", e.server).Str("uri", uri).Msg("resource subscription denied: data access level")
		return accessDenied(pr, e.server, e.level, "resource "+uri)
	}
	ss := req.Session
	g.res.mu.Lock()
	_, dup := g.res.subs[ss][uri]
	g.res.mu.Unlock()
	if dup {
		return nil
	}
	if err := g.opts.Upstreams.Subscribe(ctx, e.server, uri); err != nil {
		g.log.Warn().Err(err).Str("principal", pr.Name).Str("uri", uri).Msg("resource subscription failed")
		return upstreamError(err)
	}
	g.res.mu.Lock()
	if g.res.subs == nil {
		g.res.subs = map[*mcp.ServerSession]map[string]string{}
	}
	first := g.res.subs[ss] == nil
	if first {
		g.res.subs[ss] = map[string]string{}
	}
	_, dup = g.res.subs[ss][uri]
	if !dup {
		g.res.subs[ss][uri] = e.server
	}
	g.res.mu.Unlock()
	if dup { // a concurrent subscribe of the same session won
		g.unsubscribeUpstream(e.server, uri)
		return nil
	}
	if first && ss != nil {
		ended := make(chan struct{})
		go func() {
			_ = ss.Wait()
			close(ended)
			g.dropSubscriptions(ss)
		}()
		go g.expireIdleSubscriber(ss, ended)
	}
	g.log.Info().Str("principal", pr.Name).Str("server", e.server).Str("uri", uri).Msg("resource subscribed")
	return nil
}

// expireIdleSubscriber closes an HTTP session that holds subscriptions and
// has made no request for the session idle time (Options.SessionIdle),
// which releases its subscriptions (dropSubscriptions). The go-sdk's own
// idle timeout does not end such a session while its client keeps the
// standalone SSE stream open, so an abandoned client that left its stream
// open would otherwise hold its upstream subscriptions, and have updates
// sent to it, for ever. A client that only listens must ping (any request
// counts) within the idle time. A request still open since before the idle
// time (a parked stream) does not keep the session: every tools/call
// answers within the inline wait, far shorter. It returns when the session
// ends.
func (g *Gateway) expireIdleSubscriber(ss *mcp.ServerSession, ended <-chan struct{}) {
	if ss.ID() == "" {
		return // not an HTTP session: it ends with its connection
	}
	idle := g.sessionIdle()
	since := time.Now()
	check := time.NewTicker(max(idle/4, 10*time.Millisecond))
	defer check.Stop()
	for {
		select {
		case <-ended:
			return
		case <-check.C:
		}
		g.mu.Lock()
		last := since
		if s := g.sessions[ss]; s != nil && s.last.After(last) {
			last = s.last
		}
		g.mu.Unlock()
		g.res.mu.Lock()
		n := len(g.res.subs[ss])
		g.res.mu.Unlock()
		if time.Since(last) < idle {
			continue
		}
		if n > 0 {
			g.log.Info().Str("session", ss.ID()).Int("subscriptions", n).Dur("idle", time.Since(last).Round(time.Second)).
				Msg("session idle with resource subscriptions: closed, its subscriptions released")
		}
		// Released now: Close waits for the session's requests in flight,
		// and a parked one may never end.
		g.dropSubscriptions(ss)
		go func() { _ = ss.Close() }()
		return
	}
}

// unsubscribe is the server's UnsubscribeHandler.
func (g *Gateway) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	uri := req.Params.URI
	g.res.mu.Lock()
	server, ok := g.res.subs[req.Session][uri]
	if ok {
		delete(g.res.subs[req.Session], uri)
	}
	g.res.mu.Unlock()
	if ok {
		g.unsubscribeUpstream(server, uri)
	}
	return nil
}

// dropSubscriptions releases the subscriptions of a session that ended.
func (g *Gateway) dropSubscriptions(ss *mcp.ServerSession) {
	g.res.mu.Lock()
	subs := g.res.subs[ss]
	delete(g.res.subs, ss)
	g.res.mu.Unlock()
	for _, uri := range slices.Sorted(maps.Keys(subs)) {
		g.unsubscribeUpstream(subs[uri], uri)
	}
}

// unsubscribeUpstream undoes one pool subscription. It does not use the
// request's context: a subscriptions/listen stream unsubscribes when it has
// already ended.
func (g *Gateway) unsubscribeUpstream(server, uri string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.opts.Upstreams.Unsubscribe(ctx, server, uri); err != nil {
		g.log.Warn().Err(err).Str("server", server).Str("uri", uri).Msg("unsubscribing the upstream failed")
	}
}

// upstreamResourceUpdated re-emits an upstream's resources/updated to the
// sessions subscribed to the URI, when that upstream serves the URI here.
// It runs on the pool's notification handler, so it sends asynchronously.
func (g *Gateway) upstreamResourceUpdated(server, uri string) {
	if e := g.resourceOwner(uri); e == nil || e.server != server {
		g.log.Debug().Str("server", server).Str("uri", uri).Msg("resource update from an upstream that does not serve the URI here; dropped")
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
			g.log.Warn().Err(err).Str("uri", uri).Msg("relaying resources/updated failed")
		}
	}()
}

// callerKey carries the caller of a subscription request in its context:
// on protocol 2026-07-28 the SDK calls SubscribeHandler from
// subscriptions/listen with a request that has no headers.
type callerKey struct{}

type caller struct {
	pr  *identity.Principal
	err error
}
