package gateway

// Resources, resource templates and prompts of upstreams.
//
// A manifest's resources and prompts blocks say that the upstream's
// resources (with their templates) and prompts pass through, and which data
// access level a principal needs to see them; without a block they are not
// exposed. Resource URIs are global identifiers and pass unchanged (when two
// upstreams offer the same URI or URI template, the first server in name
// order owns it); prompts are renamed like tools (server.prefix + name,
// by default "<server>__<prompt>").
// Reads and prompt gets go straight to the owning upstream over the pool,
// not through a task workflow: they have no side effects to approve or undo.
//
// A principal below a block's level does not see its entries in
// resources/list, resources/templates/list and prompts/list (filtered in
// resourceMiddleware) and gets an error naming the level needed when it
// reads, gets or subscribes. Subscriptions are forwarded to the upstream
// (counted, so one upstream subscription serves every session), and the
// upstream's notifications/resources/updated are re-emitted to the
// subscribed sessions.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/yosida95/uritemplate/v3"

	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/pin"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// CodeAccessDenied is the JSON-RPC error code of a resources/read,
// prompts/get or resources/subscribe refused because the caller's data
// access level is below what the upstream's manifest requires. It is in
// the implementation-defined range and clear of the codes the go-sdk gives
// meaning to (-32001 to -32005 are its transport's, -32002 is "resource
// not found", -32020 to -32022 and -32042 are MCP's).
const CodeAccessDenied = -32030

// dataLevels in increasing order of sensitivity.
var dataLevels = []manifests.DataLevel{manifests.DataPublic, manifests.DataInternal,
	manifests.DataConfidential, manifests.DataSensitive, manifests.DataRestricted}

// levelCovers reports whether a principal cleared for have may see data of
// level need. An unknown level on either side covers nothing.
func levelCovers(have, need manifests.DataLevel) bool {
	h, n := slices.Index(dataLevels, have), slices.Index(dataLevels, need)
	return h >= 0 && n >= 0 && h >= n
}

// resourceState is the gateway's part of this file; the zero value is
// ready.
type resourceState struct {
	watch sync.Once
	// refresh serialises refreshResources, which reads the upstreams'
	// catalogs and then publishes: two refreshes interleaved could publish
	// the older catalogs last (a resource of an upstream that connected
	// meanwhile would stay unpublished until its next change).
	refresh sync.Mutex

	mu        sync.Mutex
	resources map[string]*resourceEntry // URI -> published resource
	templates map[string]*resourceEntry // URI template -> published template
	prompts   map[string]*promptEntry   // exposed name -> published prompt
	conflicts map[string]bool           // conflicts logged already
	// subs holds each session's subscriptions: URI -> the server that got
	// the upstream subscription.
	subs map[*mcp.ServerSession]map[string]string
}

type resourceEntry struct {
	server string
	level  manifests.DataLevel
	res    *mcp.Resource         // a resource, or
	tmpl   *mcp.ResourceTemplate // a template
	match  *regexp.Regexp        // the template's URIs
}

type promptEntry struct {
	server   string
	upstream string
	level    manifests.DataLevel
	def      *mcp.Prompt // as listed: named m.Exposed(name)
	src      *mcp.Prompt // as the pool listed it
}

func (e *resourceEntry) same(o *resourceEntry) bool {
	if e.server != o.server || e.level != o.level {
		return false
	}
	if e.res == o.res && e.tmpl == o.tmpl {
		return true // the pool's catalog entry itself: Refresh runs on every tools/list
	}
	if e.res != nil {
		return o.res != nil && sameJSON(e.res, o.res)
	}
	return o.tmpl != nil && sameJSON(e.tmpl, o.tmpl)
}

func sameJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// refreshResources publishes the resources, templates and prompts of every
// upstream whose manifest exposes them, from the pool's last known
// catalogs. The first call also subscribes the gateway to the pool's
// resource events.
func (g *Gateway) refreshResources() {
	if g.opts.Upstreams == nil {
		return
	}
	g.res.watch.Do(func() {
		g.opts.Upstreams.WatchResources(upstream.ResourceWatcher{
			Updated: g.upstreamResourceUpdated,
			Changed: func(string) { g.refreshResources() },
		})
	})
	g.res.refresh.Lock()
	defer g.res.refresh.Unlock()

	ms := slices.Clone(g.cur().Manifests)
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Server.Name < ms[j].Server.Name })
	want := &offered{res: map[string]*resourceEntry{}, tmpl: map[string]*resourceEntry{}, prompts: map[string]*promptEntry{}}
	for _, m := range ms {
		if m == nil || (m.Resources == nil && m.Prompts == nil) {
			continue
		}
		cat := g.opts.Upstreams.Catalog(m.Server.Name)
		if m.Resources != nil {
			want.addResources(m, cat)
		}
		if m.Prompts != nil {
			want.addPrompts(m, cat)
		}
	}

	g.res.mu.Lock()
	defer g.res.mu.Unlock()
	if g.res.conflicts == nil {
		g.res.conflicts = map[string]bool{}
	}
	for _, c := range want.conflicts {
		if !g.res.conflicts[c] {
			g.res.conflicts[c] = true
			g.log.Warn().Msg(c)
		}
	}
	g.res.resources = g.publish(g.res.resources, want.res, "resource",
		func(keys ...string) { g.server.RemoveResources(keys...) },
		func(e *resourceEntry) { g.server.AddResource(e.res, g.readHandler(e)) })
	g.res.templates = g.publish(g.res.templates, want.tmpl, "resource template",
		func(keys ...string) { g.server.RemoveResourceTemplates(keys...) },
		func(e *resourceEntry) { g.server.AddResourceTemplate(e.tmpl, g.readHandler(e)) })
	g.publishPromptsLocked(want.prompts)
}

// offered is what the upstreams' catalogs offer to publish, by URI (by
// exposed name for prompts), and the conflicts found among them: the
// first server in name order keeps what two offer.
type offered struct {
	res, tmpl map[string]*resourceEntry
	prompts   map[string]*promptEntry
	conflicts []string
}

// addResources adds the resources and templates of m's upstream.
func (o *offered) addResources(m *manifests.Manifest, cat upstream.Catalog) {
	server, level := m.Server.Name, m.Resources.DataAccessLevel
	for _, r := range cat.Resources {
		if first, dup := o.res[r.URI]; dup {
			if first.server != server {
				o.conflicts = append(o.conflicts, fmt.Sprintf("resource %s is offered by upstreams %s and %s; %s serves it", r.URI, first.server, server, first.server))
			}
			continue
		}
		o.res[r.URI] = &resourceEntry{server: server, level: level, res: r}
	}
	for _, t := range cat.Templates {
		if first, dup := o.tmpl[t.URITemplate]; dup {
			if first.server != server {
				o.conflicts = append(o.conflicts, fmt.Sprintf("resource template %s is offered by upstreams %s and %s; %s serves it", t.URITemplate, first.server, server, first.server))
			}
			continue
		}
		tmpl, err := uritemplate.New(t.URITemplate)
		if err != nil {
			o.conflicts = append(o.conflicts, fmt.Sprintf("upstream %s offers resource template %q, which is not a valid URI template (%v); not published", server, t.URITemplate, err))
			continue
		}
		o.tmpl[t.URITemplate] = &resourceEntry{server: server, level: level, tmpl: t, match: tmpl.Regexp()}
	}
}

// addPrompts adds the prompts of m's upstream, under their exposed names.
func (o *offered) addPrompts(m *manifests.Manifest, cat upstream.Catalog) {
	server := m.Server.Name
	for _, p := range cat.Prompts {
		def := *p
		def.Name = m.Exposed(p.Name)
		if first, dup := o.prompts[def.Name]; dup {
			// Possible with server.prefix: the first server in name
			// order keeps it, as with resources.
			o.conflicts = append(o.conflicts, fmt.Sprintf("prompt %s is offered by upstreams %s and %s; %s serves it (set a server.prefix to expose both)", def.Name, first.server, server, first.server))
			continue
		}
		o.prompts[def.Name] = &promptEntry{server: server, upstream: p.Name, level: m.Prompts.DataAccessLevel, def: &def, src: p}
	}
}

// publishPromptsLocked brings the published prompts to want (g.res.mu
// held); the SDK panics on prompts it cannot take, which must not bring
// the gateway down.
func (g *Gateway) publishPromptsLocked(want map[string]*promptEntry) {
	var remove []string
	for name := range g.res.prompts {
		if _, ok := want[name]; !ok {
			remove = append(remove, name)
		}
	}
	if len(remove) > 0 {
		sort.Strings(remove)
		g.server.RemovePrompts(remove...)
	}
	published := map[string]*promptEntry{}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		e := want[name]
		if old, ok := g.res.prompts[name]; ok && old.server == e.server && old.level == e.level && (old.src == e.src || sameJSON(old.def, e.def)) {
			published[name] = old
			continue
		}
		if err := recovered(func() { g.server.AddPrompt(e.def, g.promptHandler(e)) }); err != nil {
			g.log.Error().Str("prompt", name).Msgf("upstream %s offers prompt %s with a definition the MCP SDK refuses: %v", e.server, e.upstream, err)
			continue
		}
		published[name] = e
	}
	g.res.prompts = published
}

// publish brings the published resources (or templates) from have to want
// and returns what is published now. The SDK panics on URIs it cannot
// take, which must not bring the gateway down.
func (g *Gateway) publish(have, want map[string]*resourceEntry, what string, remove func(...string), add func(*resourceEntry)) map[string]*resourceEntry {
	var stale []string
	for key := range have {
		if _, ok := want[key]; !ok {
			stale = append(stale, key)
		}
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		remove(stale...)
	}
	out := map[string]*resourceEntry{}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		e := want[key]
		if old, ok := have[key]; ok && old.same(e) {
			out[key] = old
			continue
		}
		if err := recovered(func() { add(e) }); err != nil {
			g.log.Error().Str(strings.ReplaceAll(what, " ", "_"), key).Msgf("upstream %s offers %s %s, which the MCP SDK refuses: %v", e.server, what, key, err)
			if _, ok := have[key]; ok {
				remove(key) // the old one is no longer what the upstream offers
			}
			continue
		}
		out[key] = e
	}
	return out
}

func recovered(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	f()
	return nil
}

// resourceOwner finds the published resource or template that serves uri,
// the way the SDK routes resources/read: the resource with that URI, else
// the first matching template in URI template order.
func (g *Gateway) resourceOwner(uri string) *resourceEntry {
	g.res.mu.Lock()
	defer g.res.mu.Unlock()
	return g.resourceOwnerLocked(uri)
}

func (g *Gateway) resourceOwnerLocked(uri string) *resourceEntry {
	if e, ok := g.res.resources[uri]; ok {
		return e
	}
	for _, key := range slices.Sorted(maps.Keys(g.res.templates)) {
		if e := g.res.templates[key]; e.match.MatchString(uri) {
			return e
		}
	}
	return nil
}

// accessDenied is the error for a principal below level.
func accessDenied(pr *identity.Principal, server string, level manifests.DataLevel, what string) error {
	cleared := string(pr.DataLevel)
	if cleared == "" {
		cleared = "no level"
	}
	return &jsonrpc.Error{Code: CodeAccessDenied, Message: fmt.Sprintf(
		"access denied: %s of upstream %s needs data access level %s, and principal %q is cleared for %s; ask an operator to raise the principal's data access level",
		what, server, level, pr.Name, cleared)}
}

// upstreamError turns a pool error into the JSON-RPC error the client
// gets: an upstream's refusal keeps its code.
func upstreamError(err error) error {
	var wire *jsonrpc.Error
	if errors.Is(err, upstream.ErrRejected) && errors.As(err, &wire) {
		return &jsonrpc.Error{Code: wire.Code, Message: err.Error(), Data: wire.Data}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

func (g *Gateway) readHandler(e *resourceEntry) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		uri := req.Params.URI
		pr, err := g.principalFor(req.Extra)
		if err != nil {
			return nil, err
		}
		log := g.log.With().Str("principal", pr.Name).Str("server", e.server).Str("uri", uri).Logger()
		if !levelCovers(pr.DataLevel, e.level) {
			log.Info().Msg("resource read denied: data access level")
			return nil, accessDenied(pr, e.server, e.level, "resource "+uri)
		}
		res, err := g.opts.Upstreams.ReadResource(ctx, e.server, uri)
		if err != nil {
			log.Warn().Err(err).Msg("resource read failed")
			return nil, upstreamError(err)
		}
		if err := g.pinUIResource(e.server, uri, res.Contents, log); err != nil {
			return nil, err
		}
		log.Info().Msg("resource read")
		// The pool may hand out a cached result, and the SDK fills in empty
		// URIs and MIME types: give it copies.
		out := *res
		out.Contents = make([]*mcp.ResourceContents, 0, len(res.Contents))
		var texts []guardText
		for _, c := range res.Contents {
			if c != nil {
				cc := *c
				out.Contents = append(out.Contents, &cc)
				if cc.Text != "" {
					texts = append(texts, guardText{path: "contents[" + strconv.Itoa(len(out.Contents)-1) + "].text", text: &cc.Text})
				}
			}
		}
		// The content guard, as for a tool's result (passthrough_guard.go).
		meta, err := g.guardPassthrough(e.server, "resource "+uri, pr.Roles, texts, log)
		if err != nil {
			return nil, err
		}
		out.Meta = guardMeta(out.Meta, meta)
		return &out, nil
	}
}

// CodePinBlocked is the JSON-RPC error code of a resources/read of a UI
// resource (MCP Apps, ui://) whose contents changed since they were
// pinned: a host must not render the new ones before an operator has
// reviewed them (`airlock manifests pin SERVER URI`).
const CodePinBlocked = -32031

// pinUIResource checks a UI resource's contents against its pin (the
// first read pins them, as a tool's first listing pins its definition),
// and refuses changed ones. Other resources are data, not code a host
// runs, and are not pinned.
func (g *Gateway) pinUIResource(server, uri string, contents []*mcp.ResourceContents, log zerolog.Logger) error {
	if g.opts.Pins == nil || !pin.IsUIResource(uri) {
		return nil
	}
	r := g.opts.Pins.Inspect(server, pin.UIResource(uri, contents))
	if r.Verdict != pin.Changed {
		return nil
	}
	if r.Transition {
		log.Warn().Msg(r.Reason)
	}
	return &jsonrpc.Error{Code: CodePinBlocked, Message: r.Reason}
}

func (g *Gateway) promptHandler(e *promptEntry) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		pr, err := g.principalFor(req.Extra)
		if err != nil {
			return nil, err
		}
		log := g.log.With().Str("principal", pr.Name).Str("server", e.server).Str("prompt", e.def.Name).Logger()
		if !levelCovers(pr.DataLevel, e.level) {
			log.Info().Msg("prompt get denied: data access level")
			return nil, accessDenied(pr, e.server, e.level, "prompt "+e.def.Name)
		}
		res, err := g.opts.Upstreams.GetPrompt(ctx, e.server, e.upstream, req.Params.Arguments)
		if err != nil {
			log.Warn().Err(err).Msg("prompt get failed")
			return nil, upstreamError(err)
		}
		log.Info().Msg("prompt get")
		// The content guard, as for a tool's result (passthrough_guard.go),
		// on a copy: the pool may hand out a cached result.
		out := *res
		out.Messages = make([]*mcp.PromptMessage, 0, len(res.Messages))
		texts := []guardText{{path: "description", text: &out.Description}}
		for _, m := range res.Messages {
			if m == nil {
				continue
			}
			mm := *m
			at := "messages[" + strconv.Itoa(len(out.Messages)) + "].content"
			switch c := m.Content.(type) {
			case *mcp.TextContent:
				cc := *c
				mm.Content = &cc
				texts = append(texts, guardText{path: at + ".text", text: &cc.Text})
			case *mcp.EmbeddedResource:
				if c.Resource != nil {
					r := *c.Resource
					cc := *c
					cc.Resource = &r
					mm.Content = &cc
					texts = append(texts, guardText{path: at + ".resource.text", text: &r.Text})
				}
			}
			out.Messages = append(out.Messages, &mm)
		}
		meta, err := g.guardPassthrough(e.server, "prompt "+e.def.Name, pr.Roles, texts, log)
		if err != nil {
			return nil, err
		}
		out.Meta = guardMeta(out.Meta, meta)
		return &out, nil
	}
}

// resourceMiddleware filters list results by the caller's data access
// level, and records the caller of subscription requests.
func (g *Gateway) resourceMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "resources/subscribe", "resources/unsubscribe", "subscriptions/listen":
			pr, err := g.principalFor(req.GetExtra())
			return next(context.WithValue(ctx, callerKey{}, caller{pr: pr, err: err}), method, req)
		case "resources/list", "resources/templates/list", "prompts/list":
		default:
			return next(ctx, method, req)
		}
		res, err := next(ctx, method, req)
		if err != nil {
			return res, err
		}
		pr, err := g.principalFor(req.GetExtra())
		if err != nil {
			return nil, err
		}
		g.filterList(res, pr)
		return res, nil
	}
}

// filterList removes from a list result what pr may not see. Entries the
// gateway did not publish from an upstream stay.
func (g *Gateway) filterList(res mcp.Result, pr *identity.Principal) {
	g.res.mu.Lock()
	defer g.res.mu.Unlock()
	hidden := func(e interface{ lvl() manifests.DataLevel }, ok bool) bool {
		return ok && !levelCovers(pr.DataLevel, e.lvl())
	}
	switch r := res.(type) {
	case *mcp.ListResourcesResult:
		r.Resources = without(r.Resources, func(x *mcp.Resource) bool {
			e, ok := g.res.resources[x.URI]
			return hidden(e, ok)
		})
	case *mcp.ListResourceTemplatesResult:
		r.ResourceTemplates = without(r.ResourceTemplates, func(x *mcp.ResourceTemplate) bool {
			e, ok := g.res.templates[x.URITemplate]
			return hidden(e, ok)
		})
	case *mcp.ListPromptsResult:
		r.Prompts = without(r.Prompts, func(x *mcp.Prompt) bool {
			e, ok := g.res.prompts[x.Name]
			return hidden(e, ok)
		})
	}
}

// without returns a new slice of the elements of xs that drop rejects
// (the SDK's list slices may be shared, so they are not filtered in place).
func without[T any](xs []T, drop func(T) bool) []T {
	out := make([]T, 0, len(xs))
	for _, x := range xs {
		if !drop(x) {
			out = append(out, x)
		}
	}
	return out
}

func (e *resourceEntry) lvl() manifests.DataLevel { return e.level }
func (e *promptEntry) lvl() manifests.DataLevel   { return e.level }

// complete forwards completion/complete to the upstream that owns the
// prompt (named as the upstream names it: the exposed name maps back
// through the published entry, never by cutting a prefix) or the resource
// template, for callers cleared for the block's data access level, like
// prompts/get and resources/read.
func (g *Gateway) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	pr, err := g.principalFor(req.Extra)
	if err != nil {
		return nil, err
	}
	params := *req.Params
	params.Meta = upstreamMeta(params.Meta)
	ref := *params.Ref // the SDK rejects a request without one
	var (
		server string
		level  manifests.DataLevel
		what   string
	)
	g.res.mu.Lock()
	switch ref.Type {
	case "ref/prompt":
		if e := g.res.prompts[ref.Name]; e != nil {
			server, level, what = e.server, e.level, "prompt "+ref.Name
			ref.Name = e.upstream
		}
	case "ref/resource":
		e := g.res.templates[ref.URI]
		if e == nil {
			e = g.resourceOwnerLocked(ref.URI)
		}
		if e != nil {
			server, level, what = e.server, e.level, "resource "+ref.URI
		}
	default:
		g.res.mu.Unlock()
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("completion/complete: unknown ref type %q; use ref/prompt or ref/resource", ref.Type)}
	}
	g.res.mu.Unlock()
	if server == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("completion/complete: no %s %q is served here", strings.TrimPrefix(ref.Type, "ref/"), ref.Name+ref.URI)}
	}
	log := g.log.With().Str("principal", pr.Name).Str("server", server).Str("ref", what).Logger()
	if !levelCovers(pr.DataLevel, level) {
		log.Info().Msg("completion denied: data access level")
		return nil, accessDenied(pr, server, level, what)
	}
	params.Ref = &ref
	res, err := g.opts.Upstreams.Complete(ctx, server, &params)
	if err != nil {
		log.Warn().Err(err).Msg("completion failed")
		return nil, upstreamError(err)
	}
	return res, nil
}
