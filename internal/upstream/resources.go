package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Resources, resource templates and prompts of upstreams, and resource
// subscriptions.
//
// The pool lists a server's resources, templates and prompts when it
// connects and again after a list_changed notification, and keeps the last
// known lists (its [Catalog]) across reconnects, as it does for tools.
// Reads, prompt gets and subscriptions go over the server's shared session
// with the same waiting, retrying and error classification as
// [Pool.CallTool]. Subscriptions are counted per URI: the upstream is
// subscribed once however many callers subscribe, is unsubscribed when the
// last one leaves, and is subscribed again on every new session after a
// reconnect.
//
// On protocol 2026-07-28 a subscription is a subscriptions/listen stream.
// A go-sdk v1.8.0 upstream drops a session's list_changed subscriptions
// whenever any of its listen streams ends (server.go, subscriptionsListen
// deletes them unconditionally), so the pool never ends one while the
// session lives: the last Unsubscribe only stops delivering the URI's
// updates. A subscription the upstream refuses ends its stream anyway; the
// session then re-lists its tools and catalog every listPollInterval
// instead of waiting for list_changed.

// ackTimeout bounds how long Subscribe waits for an upstream on protocol
// 2026-07-28 to acknowledge a subscription (the SDK sends it on a
// subscriptions/listen stream and does not wait). A variable for tests.
var ackTimeout = 5 * time.Second

// protocolListen is the first protocol version on which resource
// subscriptions are subscriptions/listen streams (SEP-2575).
const protocolListen = "2026-07-28"

// listPollInterval is how often a session that may have lost its
// list_changed subscriptions re-lists (see above). A variable for tests.
var listPollInterval = 30 * time.Second

// methodSubscriptionsAck is the notification that acknowledges a
// subscriptions/listen request.
const methodSubscriptionsAck = "notifications/subscriptions/acknowledged"

// Catalog is the last known resources, resource templates and prompts of
// one server. Treat it as read-only.
type Catalog struct {
	Resources []*mcp.Resource
	Templates []*mcp.ResourceTemplate
	Prompts   []*mcp.Prompt
	// Subscribe reports that the server accepts resource subscriptions.
	Subscribe bool
}

// ResourceWatcher receives a pool's resource events; see
// [Pool.WatchResources]. Either function may be nil.
type ResourceWatcher struct {
	// Updated is called when a server reports that a resource changed
	// (notifications/resources/updated). It runs on the session's
	// notification handler and must not block.
	Updated func(server, uri string)
	// Changed is called, from the server's supervisor, when its catalog
	// changed; read it with [Pool.Catalog]. It should return quickly.
	Changed func(server string)
}

// catalog is the per-upstream state of this file.
type catalog struct {
	mu       sync.Mutex
	cur      Catalog
	refresh  chan struct{}
	watchers map[int]ResourceWatcher
	nextID   int
	acks     map[string][]chan struct{} // URI -> waiters for a subscription ack
	// live counts the subscribers of each URI (a copy of subs' counts that
	// the notification handler can read without waiting for subMu).
	live map[string]int
	// deaf is a session that may no longer get list_changed notifications.
	deaf *session

	// subMu serializes subscribing and unsubscribing, including the
	// re-subscribing after a reconnect.
	subMu sync.Mutex
	subs  map[string]*subscription // URI -> subscription; guarded by subMu
}

type subscription struct {
	count int
	// on is the session holding the upstream subscription; a new session
	// needs it made again. On protocol 2026-07-28 it outlives count
	// reaching 0 (see the top of this file).
	on *session
}

// setCount records the subscriber count of uri; call it with subMu held.
func (c *catalog) setCount(uri string, sub *subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live == nil {
		c.live = map[string]int{}
	}
	if sub == nil || sub.count <= 0 {
		delete(c.live, uri)
		return
	}
	c.live[uri] = sub.count
}

func (c *catalog) subscribed(uri string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live[uri] > 0
}

func (c *catalog) markDeaf(s *session) {
	c.mu.Lock()
	c.deaf = s
	c.mu.Unlock()
	c.signal() // wakes catalogLoop, which starts polling
}

func (c *catalog) isDeaf(s *session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deaf == s
}

func (c *catalog) refreshChan() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refresh == nil {
		c.refresh = make(chan struct{}, 1)
	}
	return c.refresh
}

func (c *catalog) signal() {
	select {
	case c.refreshChan() <- struct{}{}:
	default:
	}
}

func (c *catalog) watcherList() []ResourceWatcher {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]int, 0, len(c.watchers))
	for id := range c.watchers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]ResourceWatcher, 0, len(ids))
	for _, id := range ids {
		out = append(out, c.watchers[id])
	}
	return out
}

// Catalog returns the last known resources, templates and prompts of
// server (empty for an unknown server or one that offers none).
func (p *Pool) Catalog(server string) Catalog {
	u := p.get(server)
	if u == nil {
		return Catalog{}
	}
	u.cat.mu.Lock()
	defer u.cat.mu.Unlock()
	c := u.cat.cur
	c.Resources = slices.Clone(c.Resources)
	c.Templates = slices.Clone(c.Templates)
	c.Prompts = slices.Clone(c.Prompts)
	return c
}

// WatchResources registers w for every server of the pool, in addition to
// Options.OnResourceUpdated and Options.OnResourcesChanged: a consumer built
// after the pool (the gateway) subscribes itself. stop unregisters it.
func (p *Pool) WatchResources(w ResourceWatcher) (stop func()) {
	order := p.list()
	ids := make(map[*upstream]int, len(order))
	for _, u := range order {
		u.cat.mu.Lock()
		if u.cat.watchers == nil {
			u.cat.watchers = map[int]ResourceWatcher{}
		}
		u.cat.nextID++
		ids[u] = u.cat.nextID
		u.cat.watchers[u.cat.nextID] = w
		u.cat.mu.Unlock()
	}
	return func() {
		for u, id := range ids {
			u.cat.mu.Lock()
			delete(u.cat.watchers, id)
			u.cat.mu.Unlock()
		}
	}
}

// ListResources lists server's resources over its session, every page.
// A server without the resources capability has none.
func (p *Pool) ListResources(ctx context.Context, server string) ([]*mcp.Resource, error) {
	var out []*mcp.Resource
	err := p.request(ctx, server, "resources/list", func(ctx context.Context, s *session) (err error) {
		out, err = listResources(ctx, s.cs)
		return err
	})
	return out, err
}

// ListResourceTemplates lists server's resource templates, every page.
func (p *Pool) ListResourceTemplates(ctx context.Context, server string) ([]*mcp.ResourceTemplate, error) {
	var out []*mcp.ResourceTemplate
	err := p.request(ctx, server, "resources/templates/list", func(ctx context.Context, s *session) (err error) {
		out, err = listTemplates(ctx, s.cs)
		return err
	})
	return out, err
}

// ListPrompts lists server's prompts, every page.
func (p *Pool) ListPrompts(ctx context.Context, server string) ([]*mcp.Prompt, error) {
	var out []*mcp.Prompt
	err := p.request(ctx, server, "prompts/list", func(ctx context.Context, s *session) (err error) {
		out, err = listPrompts(ctx, s.cs)
		return err
	})
	return out, err
}

// ReadResource reads uri from server. Errors are classified as for
// [Pool.CallTool]; an upstream's "resource not found" is ErrRejected and
// wraps its *jsonrpc.Error.
func (p *Pool) ReadResource(ctx context.Context, server, uri string) (*mcp.ReadResourceResult, error) {
	if uri == "" {
		return nil, newCallError(ErrNotSent, nil, "upstream %s: resources/read: empty resource URI", server)
	}
	var res *mcp.ReadResourceResult
	err := p.request(ctx, server, "resources/read "+uri, func(ctx context.Context, s *session) (err error) {
		if caps := serverCaps(s.cs); caps.Resources == nil {
			return newCallError(ErrNotSent, nil, "upstream %s offers no resources", server)
		}
		res, err = s.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// GetPrompt gets prompt name from server with args.
func (p *Pool) GetPrompt(ctx context.Context, server, name string, args map[string]string) (*mcp.GetPromptResult, error) {
	var res *mcp.GetPromptResult
	err := p.request(ctx, server, "prompts/get "+name, func(ctx context.Context, s *session) (err error) {
		if caps := serverCaps(s.cs); caps.Prompts == nil {
			return newCallError(ErrNotSent, nil, "upstream %s offers no prompts", server)
		}
		res, err = s.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: args})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Complete asks server for completions of a prompt's or resource
// template's argument (completion/complete). The caller maps names: params
// must name the prompt as the upstream does.
func (p *Pool) Complete(ctx context.Context, server string, params *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	var res *mcp.CompleteResult
	err := p.request(ctx, server, "completion/complete", func(ctx context.Context, s *session) (err error) {
		if caps := serverCaps(s.cs); caps.Completions == nil {
			return newCallError(ErrNotSent, nil, "upstream %s offers no completions", server)
		}
		res, err = s.cs.Complete(ctx, params)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Subscribe asks server for notifications/resources/updated about uri
// (delivered to Options.OnResourceUpdated and the watchers). Subscriptions
// are counted: only the first for a URI reaches the upstream, and each
// needs its own [Pool.Unsubscribe]. After a reconnect the pool subscribes
// the new session again by itself.
func (p *Pool) Subscribe(ctx context.Context, server, uri string) error {
	if err := p.usable(server); err != nil {
		return err
	}
	if uri == "" {
		return newCallError(ErrNotSent, nil, "upstream %s: resources/subscribe: empty resource URI", server)
	}
	u := p.get(server)
	u.cat.subMu.Lock()
	defer u.cat.subMu.Unlock()
	if sub := u.cat.subs[uri]; sub != nil && (sub.count > 0 || u.holds(sub.on)) {
		// Subscribed already, or still subscribed upstream on this session.
		sub.count++
		u.cat.setCount(uri, sub)
		return nil
	}
	var on *session
	err := p.request(ctx, server, "resources/subscribe "+uri, func(ctx context.Context, s *session) error {
		if err := u.subscribeOn(ctx, s, uri); err != nil {
			return err
		}
		on = s
		return nil
	})
	if err != nil {
		return err
	}
	if u.cat.subs == nil {
		u.cat.subs = map[string]*subscription{}
	}
	sub := &subscription{count: 1, on: on}
	u.cat.subs[uri] = sub
	u.cat.setCount(uri, sub)
	u.log.Debug().Str("uri", uri).Msg("subscribed to upstream resource")
	return nil
}

// Unsubscribe undoes one [Pool.Subscribe]; the last one for a URI
// unsubscribes the upstream. Unsubscribing a URI that is not subscribed
// does nothing.
func (p *Pool) Unsubscribe(ctx context.Context, server, uri string) error {
	u := p.get(server)
	if u == nil {
		return newCallError(ErrNotSent, nil, "unknown upstream %q", server)
	}
	u.cat.subMu.Lock()
	defer u.cat.subMu.Unlock()
	sub := u.cat.subs[uri]
	if sub == nil || sub.count <= 0 {
		return nil
	}
	sub.count--
	u.cat.setCount(uri, sub)
	if sub.count > 0 {
		return nil
	}
	if !u.holds(sub.on) {
		delete(u.cat.subs, uri) // the session it was made on is gone, and the subscription with it
		return nil
	}
	if protocolVersion(sub.on.cs) >= protocolListen {
		return nil // keep the listen stream (see the top of this file)
	}
	delete(u.cat.subs, uri)
	err := u.once(ctx, sub.on, "resources/unsubscribe "+uri, func(ctx context.Context, s *session) error {
		return s.cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
	})
	if err == nil {
		u.log.Debug().Str("uri", uri).Msg("unsubscribed from upstream resource")
	}
	return err
}

// holds reports whether s is the connected session.
func (u *upstream) holds(s *session) bool {
	if s == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sess == s && s.ctx.Err() == nil
}

// subscribeOn subscribes s to uri. On protocol 2026-07-28 the SDK opens a
// subscriptions/listen stream and returns at once, so this waits for the
// upstream's acknowledgement, which names the URIs it agreed to.
func (u *upstream) subscribeOn(ctx context.Context, s *session, uri string) error {
	caps := serverCaps(s.cs)
	if caps.Resources == nil || !caps.Resources.Subscribe {
		return newCallError(ErrRejected, nil, "upstream %s does not support resource subscriptions", u.name)
	}
	params := &mcp.SubscribeParams{URI: uri}
	if protocolVersion(s.cs) < protocolListen {
		return s.cs.Subscribe(ctx, params)
	}
	ack := u.cat.awaitAck(uri)
	defer u.cat.dropAck(uri, ack)
	if err := s.cs.Subscribe(ctx, params); err != nil {
		return err
	}
	t := time.NewTimer(ackTimeout)
	defer t.Stop()
	var err error
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = newCallError(ErrRejected, nil, "upstream %s did not acknowledge the subscription to %s within %s; it may have refused it", u.name, uri, ackTimeout)
	}
	// The stream has ended or will be abandoned: release it, so that a later
	// Subscribe opens a new one, and stop relying on list_changed.
	_ = s.cs.Unsubscribe(context.WithoutCancel(ctx), &mcp.UnsubscribeParams{URI: uri})
	u.log.Warn().Str("uri", uri).Msg("upstream subscription not acknowledged; re-listing tools, resources and prompts periodically for this session")
	u.cat.markDeaf(s)
	return err
}

func (c *catalog) awaitAck(uri string) chan struct{} {
	ch := make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.acks == nil {
		c.acks = map[string][]chan struct{}{}
	}
	c.acks[uri] = append(c.acks[uri], ch)
	return ch
}

func (c *catalog) dropAck(uri string, ch chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acks[uri] = slices.DeleteFunc(c.acks[uri], func(x chan struct{}) bool { return x == ch })
	if len(c.acks[uri]) == 0 {
		delete(c.acks, uri)
	}
}

func (c *catalog) acked(uris []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, uri := range uris {
		for _, ch := range c.acks[uri] {
			close(ch)
		}
		delete(c.acks, uri)
	}
}

// ackMiddleware sees the acknowledgements of subscriptions/listen streams,
// which the SDK offers no handler for.
func (u *upstream) ackMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == methodSubscriptionsAck {
			if p, ok := req.GetParams().(*mcp.SubscriptionsAcknowledgedParams); ok && p != nil {
				u.cat.acked(p.Notifications.ResourceSubscriptions)
			}
		}
		return next(ctx, method, req)
	}
}

// resubscribe makes the subscriptions again on a new session.
func (u *upstream) resubscribe(s *session) {
	u.cat.subMu.Lock()
	defer u.cat.subMu.Unlock()
	uris := make([]string, 0, len(u.cat.subs))
	for uri, sub := range u.cat.subs {
		switch {
		case sub.count <= 0 && sub.on != s:
			delete(u.cat.subs, uri) // kept for an earlier session only
		case sub.on != s:
			uris = append(uris, uri)
		}
	}
	sort.Strings(uris)
	for _, uri := range uris {
		if s.ctx.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, refreshTimeout)
		err := u.once(ctx, s, "resources/subscribe "+uri, func(ctx context.Context, s *session) error {
			return u.subscribeOn(ctx, s, uri)
		})
		cancel()
		if err != nil {
			if s.ctx.Err() == nil {
				u.log.Warn().Str("uri", uri).Err(err).Msg("re-subscribing to an upstream resource after reconnecting failed; updates for it are lost until the next reconnect")
			}
			continue
		}
		u.cat.subs[uri].on = s
	}
}

// isCurrent reports whether cs is the session being set up or in use.
func (u *upstream) isCurrent(cs *mcp.ClientSession) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.current != nil && u.current.cs == cs
}

func (u *upstream) resourceUpdated(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
	if req.Params == nil || req.Params.URI == "" || !u.isCurrent(req.Session) {
		return
	}
	uri := req.Params.URI
	if !u.cat.subscribed(uri) {
		return // unsubscribed since, or never asked for
	}
	u.log.Debug().Str("uri", uri).Msg("upstream resource updated")
	if f := u.pool.opts.OnResourceUpdated; f != nil {
		u.safely("OnResourceUpdated", func() { f(u.name, uri) })
	}
	for _, w := range u.cat.watcherList() {
		if w.Updated != nil {
			u.safely("ResourceWatcher.Updated", func() { w.Updated(u.name, uri) })
		}
	}
}

func (u *upstream) resourceListChanged(_ context.Context, req *mcp.ResourceListChangedRequest) {
	if u.isCurrent(req.Session) {
		u.cat.signal() // listed by catalogLoop, never on the handler queue
	}
}

func (u *upstream) promptListChanged(_ context.Context, req *mcp.PromptListChangedRequest) {
	if u.isCurrent(req.Session) {
		u.cat.signal()
	}
}

func (u *upstream) safely(what string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			u.log.Error().Interface("panic", r).Msg(what + " panicked")
		}
	}()
	f()
}

// catalogLoop lists the catalog of a new session, subscribes it again, and
// re-lists after list_changed notifications until the session ends.
func (u *upstream) catalogLoop(s *session) {
	refresh := u.cat.refreshChan()
	select {
	case <-refresh: // left over from an earlier session; listing now anyway
	default:
	}
	u.relist(s)
	u.resubscribe(s)
	var poll <-chan time.Time
	for {
		if poll == nil && u.cat.isDeaf(s) {
			t := time.NewTicker(listPollInterval)
			defer t.Stop()
			poll = t.C
		}
		select {
		case <-s.ctx.Done():
			return
		case <-refresh:
			u.relist(s)
		case <-poll:
			u.relist(s)
			select {
			case s.refresh <- struct{}{}: // tools too
			default:
			}
		}
	}
}

func (u *upstream) relist(s *session) {
	ctx, cancel := context.WithTimeout(s.ctx, refreshTimeout)
	c, err := listCatalog(ctx, s.cs)
	cancel()
	if err != nil {
		if s.ctx.Err() == nil {
			u.log.Warn().Err(err).Msg("listing upstream resources and prompts failed; keeping the last known ones")
		}
		return
	}
	if !u.isCurrent(s.cs) {
		return
	}
	u.cat.mu.Lock()
	changed := !sameCatalog(u.cat.cur, c)
	if changed {
		u.cat.cur = c
	}
	u.cat.mu.Unlock()
	if !changed {
		return
	}
	u.log.Info().Int("resources", len(c.Resources)).Int("templates", len(c.Templates)).Int("prompts", len(c.Prompts)).
		Msg("upstream resources and prompts listed")
	if f := u.pool.opts.OnResourcesChanged; f != nil {
		u.safely("OnResourcesChanged", func() { f(u.name) })
	}
	for _, w := range u.cat.watcherList() {
		if w.Changed != nil {
			u.safely("ResourceWatcher.Changed", func() { w.Changed(u.name) })
		}
	}
}

func serverCaps(cs *mcp.ClientSession) *mcp.ServerCapabilities {
	if r := cs.InitializeResult(); r != nil && r.Capabilities != nil {
		return r.Capabilities
	}
	return &mcp.ServerCapabilities{}
}

// listCatalog lists what the server's capabilities say it offers. A list
// method the server does not implement counts as empty.
func listCatalog(ctx context.Context, cs *mcp.ClientSession) (Catalog, error) {
	var c Catalog
	caps := serverCaps(cs)
	var err error
	if caps.Resources != nil {
		c.Subscribe = caps.Resources.Subscribe
		if c.Resources, err = listResources(ctx, cs); err != nil {
			return Catalog{}, fmt.Errorf("resources/list: %w", err)
		}
		if c.Templates, err = listTemplates(ctx, cs); err != nil {
			return Catalog{}, fmt.Errorf("resources/templates/list: %w", err)
		}
	}
	if caps.Prompts != nil {
		if c.Prompts, err = listPrompts(ctx, cs); err != nil {
			return Catalog{}, fmt.Errorf("prompts/list: %w", err)
		}
	}
	return c, nil
}

func listResources(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Resource, error) {
	if serverCaps(cs).Resources == nil {
		return []*mcp.Resource{}, nil
	}
	return collect(cs.Resources(ctx, nil))
}

func listTemplates(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.ResourceTemplate, error) {
	if serverCaps(cs).Resources == nil {
		return []*mcp.ResourceTemplate{}, nil
	}
	return collect(cs.ResourceTemplates(ctx, nil))
}

func listPrompts(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Prompt, error) {
	if serverCaps(cs).Prompts == nil {
		return []*mcp.Prompt{}, nil
	}
	return collect(cs.Prompts(ctx, nil))
}

// collect drains a paginating iterator.
func collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	out := []T{}
	for x, err := range seq {
		if err != nil {
			var wire *jsonrpc.Error
			if errors.As(err, &wire) && wire.Code == jsonrpc.CodeMethodNotFound {
				return []T{}, nil
			}
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

func sameCatalog(a, b Catalog) bool {
	norm := func(c Catalog) Catalog {
		if len(c.Resources) == 0 {
			c.Resources = nil
		}
		if len(c.Templates) == 0 {
			c.Templates = nil
		}
		if len(c.Prompts) == 0 {
			c.Prompts = nil
		}
		return c
	}
	ja, err1 := json.Marshal(norm(a))
	jb, err2 := json.Marshal(norm(b))
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// usable reports, as a classified error, why requests to server cannot be
// made at all (unknown server, pool not started or closed).
func (p *Pool) usable(server string) error {
	if p.get(server) == nil {
		return newCallError(ErrNotSent, nil, "unknown upstream %q", server)
	}
	if started, closed := p.isStarted(); closed {
		return newCallError(ErrNotSent, nil, "upstream %s unavailable: pool closed", server)
	} else if !started {
		return newCallError(ErrNotSent, nil, "upstream %s unavailable: pool not started", server)
	}
	return nil
}

// request runs op over server's session the way CallTool sends a tool
// call: it waits up to 5s for a connection, re-sends on the next session a
// request that provably never left, and classifies failures. what names
// the request in errors ("resources/read mem://note"). op may return an
// error made by newCallError, which is passed on as it is.
func (p *Pool) request(ctx context.Context, server, what string, op func(context.Context, *session) error) error {
	if err := p.usable(server); err != nil {
		return err
	}
	u := p.get(server)
	if err := ctx.Err(); err != nil {
		return newCallError(ErrNotSent, err, "upstream %s: %s not sent: %v", server, what, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, maxCallWait)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s, _, err := u.await(waitCtx)
		if err != nil {
			return err
		}
		marker := &sendMarker{}
		cause, err := s.run(ctx, marker, op)
		if err == nil {
			return nil
		}
		cerr, broken := u.classifyRequest(ctx, s, what, err, cause, marker)
		if !broken {
			return cerr
		}
		u.markBroken(s, err.Error())
		if waitCtx.Err() != nil || attempt+1 >= maxSendAttempts {
			return cerr
		}
	}
}

// once runs op on s, without waiting or re-sending, and classifies a
// failure.
func (u *upstream) once(ctx context.Context, s *session, what string, op func(context.Context, *session) error) error {
	marker := &sendMarker{}
	cause, err := s.run(ctx, marker, op)
	if err == nil {
		return nil
	}
	cerr, broken := u.classifyRequest(ctx, s, what, err, cause, marker)
	if broken {
		u.markBroken(s, err.Error())
	}
	return cerr
}

// run calls op with a context that also ends when the session is
// abandoned. cause is non-nil when that context ended.
func (s *session) run(ctx context.Context, m *sendMarker, op func(context.Context, *session) error) (cause, err error) {
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.calls, func() { cancel(context.Cause(s.calls)) })
	defer stop()
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("mcp client panicked: %v", r)
			}
		}()
		err = op(withSendMarker(callCtx, m), s)
	}()
	if err != nil && callCtx.Err() != nil {
		cause = context.Cause(callCtx)
	}
	return cause, err
}

// classifyRequest is classify for requests other than tool calls, which
// have no side effects to warn about.
func (u *upstream) classifyRequest(ctx context.Context, s *session, what string, err, cause error, m *sendMarker) (_ error, broken bool) {
	var ce *callError
	if errors.As(err, &ce) {
		return err, false
	}
	var wireErr *jsonrpc.Error
	hasWire := errors.As(err, &wireErr)
	switch {
	case errors.Is(err, mcp.ErrConnectionClosed), errors.Is(err, mcp.ErrSessionMissing):
		return newCallError(ErrNotSent, err, "upstream %s: %s not sent: %v", u.name, what, err), true

	case cause != nil:
		if s.isHTTP && !m.wrote.Load() {
			return newCallError(ErrNotSent, cause, "upstream %s: %s not sent: %v", u.name, what, cause), false
		}
		if ctx.Err() != nil {
			return newCallError(ErrOutcomeUnknown, cause, "upstream %s: %s: no reply before %v", u.name, what, cause), false
		}
		return newCallError(ErrOutcomeUnknown, cause, "upstream %s: %s: connection lost while waiting for the reply (%v)", u.name, what, cause), false

	case hasWire && wireErr.Code != codeTransportRejected:
		return newCallError(ErrRejected, err, "upstream %s rejected %s: %s (code %d)", u.name, what, wireErr.Message, wireErr.Code), false

	case hasWire && s.isHTTP && !m.wrote.Load():
		return newCallError(ErrNotSent, err, "upstream %s: %s not sent: %v", u.name, what, err), true

	default:
		return newCallError(ErrOutcomeUnknown, err, "upstream %s: %s: %v", u.name, what, err), false
	}
}
