package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

func TestLevelCovers(t *testing.T) {
	for _, tc := range []struct {
		have, need manifests.DataLevel
		want       bool
	}{
		{"public", "public", true},
		{"public", "internal", false},
		{"internal", "public", true},
		{"confidential", "sensitive", false},
		{"restricted", "sensitive", true},
		{"restricted", "restricted", true},
		{"", "public", false},
		{"top-secret", "public", false},
		{"restricted", "weird", false},
	} {
		if got := levelCovers(tc.have, tc.need); got != tc.want {
			t.Errorf("levelCovers(%q, %q) = %v, want %v", tc.have, tc.need, got, tc.want)
		}
	}
}

// resUpstream is an in-process upstream served over streamable HTTP.
type resUpstream struct {
	srv  *mcp.Server
	url  string
	mu   sync.Mutex
	subs map[string]int
}

func (u *resUpstream) subscribers(uri string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.subs[uri]
}

func newResUpstream(t *testing.T, build func(*mcp.Server)) *resUpstream {
	t.Helper()
	u := &resUpstream{subs: map[string]int{}}
	count := func(uri string, d int) error {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.subs[uri] += d
		return nil
	}
	u.srv = mcp.NewServer(&mcp.Implementation{Name: "res-upstream", Version: "1"}, &mcp.ServerOptions{
		SubscribeHandler:   func(_ context.Context, r *mcp.SubscribeRequest) error { return count(r.Params.URI, 1) },
		UnsubscribeHandler: func(_ context.Context, r *mcp.UnsubscribeRequest) error { return count(r.Params.URI, -1) },
		// Completions say what they were asked, as the upstream saw it.
		CompletionHandler: func(_ context.Context, r *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			ref := r.Params.Ref
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{
				Values: []string{ref.Type + " " + ref.Name + ref.URI + " " + r.Params.Argument.Name + "=" + r.Params.Argument.Value}}}, nil
		},
	})
	build(u.srv)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.srv }, nil))
	t.Cleanup(hs.Close)
	u.url = hs.URL
	return u
}

func resTextResource(s *mcp.Server, uri, text string) {
	s.AddResource(&mcp.Resource{URI: uri, Name: uri, MIMEType: "text/plain"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: text}}}, nil
	})
}

func resManifest(name, url string, resources, prompts manifests.DataLevel) *manifests.Manifest {
	m := &manifests.Manifest{File: name + ".yaml", Server: manifests.Server{Name: name, HTTP: &manifests.HTTPServer{URL: url}}}
	if resources != "" {
		m.Resources = &manifests.Passthrough{DataAccessLevel: resources}
	}
	if prompts != "" {
		m.Prompts = &manifests.Passthrough{DataAccessLevel: prompts}
	}
	return m
}

// resLevelsDirectory has one principal per level, each with the key
// "<name>-key".
func resLevelsDirectory() *identity.Directory {
	c := &config.Config{Roles: map[string]*config.Role{}}
	for _, l := range []manifests.DataLevel{manifests.DataPublic, manifests.DataInternal, manifests.DataRestricted} {
		c.Roles[string(l)] = &config.Role{Permissions: []string{"*"}, DataAccessLevel: l, Tools: []string{"*"}}
		c.Principals = append(c.Principals, config.Principal{Name: string(l), Roles: []string{string(l)}, APIKeySHA256: []string{identity.HashKey(string(l) + "-key")}})
	}
	return identity.New(c)
}

type resBearerRT struct{ key string }

func (b resBearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// resFixture: three upstreams behind one gateway.
//   - alpha (resources: internal) offers mem://shared and mem://a;
//   - beta (resources and prompts: confidential) offers mem://shared too
//     (alpha owns it: first in name order), mem://b, the template
//     mem://items/{id} and the prompt hello;
//   - gamma offers mem://g, but its manifest has no resources block.
type resFixture struct {
	alpha, beta, gamma *resUpstream
	pool               *upstream.Pool
	gw                 *Gateway
	url                string
	logs               *resLogBuffer
}

type resLogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *resLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *resLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newResFixture(t *testing.T) *resFixture {
	t.Helper()
	return newResFixtureWith(t, nil)
}

// newResFixtureWith is newResFixture with the gateway's options changed by
// opt (nil: none).
func newResFixtureWith(t *testing.T, opt func(*Options)) *resFixture {
	t.Helper()
	f := &resFixture{logs: &resLogBuffer{}}
	f.alpha = newResUpstream(t, func(s *mcp.Server) {
		resTextResource(s, "mem://shared", "alpha's shared")
		resTextResource(s, "mem://a", "alpha a")
	})
	f.beta = newResUpstream(t, func(s *mcp.Server) {
		resTextResource(s, "mem://shared", "beta's shared")
		resTextResource(s, "mem://b", "beta b")
		s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "mem://items/{id}", Name: "item"},
			func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				if req.Params.URI == "mem://items/missing" {
					return nil, mcp.ResourceNotFoundError(req.Params.URI)
				}
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "item " + strings.TrimPrefix(req.Params.URI, "mem://items/")}}}, nil
			})
		s.AddPrompt(&mcp.Prompt{Name: "hello", Arguments: []*mcp.PromptArgument{{Name: "who", Required: true}}},
			func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Description: "says hello", Messages: []*mcp.PromptMessage{
					{Role: "user", Content: &mcp.TextContent{Text: "Hello, " + req.Params.Arguments["who"]}}}}, nil
			})
	})
	f.gamma = newResUpstream(t, func(s *mcp.Server) { resTextResource(s, "mem://g", "gamma") })

	ms := []*manifests.Manifest{
		resManifest("beta", f.beta.url, manifests.DataConfidential, manifests.DataConfidential),
		resManifest("gamma", f.gamma.url, "", ""),
		resManifest("alpha", f.alpha.url, manifests.DataInternal, ""),
	}
	var servers []manifests.Server
	for _, m := range ms {
		servers = append(servers, m.Server)
	}
	f.pool = upstream.New(servers, upstream.Options{MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	o := Options{Manifests: ms, Upstreams: f.pool, Directory: resLevelsDirectory(), Logger: zerolog.New(f.logs)}
	if opt != nil {
		opt(&o)
	}
	f.gw = New(o)
	f.pool.Start(context.Background())
	t.Cleanup(func() { _ = f.pool.Close() })
	hs := httptest.NewServer(f.gw.Handler())
	t.Cleanup(hs.Close)
	f.url = hs.URL
	return f
}

func (f *resFixture) connect(t *testing.T, level string) *mcp.ClientSession {
	t.Helper()
	return f.connectWith(t, level, nil)
}

func (f *resFixture) connectWith(t *testing.T, level string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: f.url, HTTPClient: &http.Client{Transport: resBearerRT{key: level + "-key"}}},
		&mcp.ClientSessionOptions{ProtocolVersion: legacyProtocol})
	if err != nil {
		t.Fatalf("connecting as %s: %v", level, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

type resListing struct {
	resources, templates, prompts []string
}

func resList(t *testing.T, cs *mcp.ClientSession) resListing {
	t.Helper()
	ctx := context.Background()
	var l resListing
	rs, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatalf("resources/list: %v", err)
	}
	for _, r := range rs.Resources {
		l.resources = append(l.resources, r.URI)
	}
	ts, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil {
		t.Fatalf("resources/templates/list: %v", err)
	}
	for _, r := range ts.ResourceTemplates {
		l.templates = append(l.templates, r.URITemplate)
	}
	ps, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatalf("prompts/list: %v", err)
	}
	for _, p := range ps.Prompts {
		l.prompts = append(l.prompts, p.Name)
	}
	slices.Sort(l.resources)
	return l
}

func waitResListing(t *testing.T, cs *mcp.ClientSession, want resListing) {
	t.Helper()
	var diff string
	defer func() {
		if diff != "" { // WaitFor gave up: show how the listing differs
			t.Logf("resListing (-want +got):\n%s", diff)
		}
	}()
	testenv.WaitFor(t, "the resource listing", 10*time.Second, func() bool {
		diff = cmp.Diff(want, resList(t, cs), cmp.AllowUnexported(resListing{}))
		return diff == ""
	})
}

func resReadText(t *testing.T, cs *mcp.ClientSession, uri string) string {
	t.Helper()
	res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatalf("reading %s: %v", uri, err)
	}
	if len(res.Contents) != 1 {
		t.Fatalf("reading %s: %d contents", uri, len(res.Contents))
	}
	return res.Contents[0].Text
}

func resWireCode(err error) int64 {
	var w *jsonrpc.Error
	if errors.As(err, &w) {
		return w.Code
	}
	return 0
}

func TestResourcesAndPromptsPassThrough(t *testing.T) {
	f := newResFixture(t)
	high := f.connect(t, "restricted")
	waitResListing(t, high, resListing{
		resources: []string{"mem://a", "mem://b", "mem://shared"},
		templates: []string{"mem://items/{id}"},
		prompts:   []string{"beta__hello"},
	})

	t.Run("reads go to the owning upstream", func(t *testing.T) {
		for uri, want := range map[string]string{
			"mem://shared":  "alpha's shared", // alpha comes first in name order
			"mem://a":       "alpha a",
			"mem://b":       "beta b",
			"mem://items/7": "item 7",
		} {
			if got := resReadText(t, high, uri); got != want {
				t.Errorf("read %s = %q, want %q", uri, got, want)
			}
		}
		if !strings.Contains(f.logs.String(), "resource mem://shared is offered by upstreams alpha and beta; alpha serves it") {
			t.Errorf("the URI conflict was not logged:\n%s", f.logs.String())
		}
	})

	t.Run("read results are the upstream's", func(t *testing.T) {
		direct, err := f.pool.ReadResource(context.Background(), "beta", "mem://b")
		if err != nil {
			t.Fatal(err)
		}
		got, err := high.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mem://b"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(direct.Contents, got.Contents); diff != "" {
			t.Errorf("contents through the gateway (-direct +gateway):\n%s", diff)
		}
	})

	t.Run("upstream errors keep their code", func(t *testing.T) {
		_, err := high.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mem://items/missing"})
		if resWireCode(err) != mcp.CodeResourceNotFound || !strings.Contains(err.Error(), "upstream beta") {
			t.Errorf("missing item: %v (code %d), want code %d naming upstream beta", err, resWireCode(err), mcp.CodeResourceNotFound)
		}
		_, err = high.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mem://g"})
		if resWireCode(err) != mcp.CodeResourceNotFound {
			t.Errorf("gamma's resource (no resources block): %v, want not found", err)
		}
	})

	t.Run("prompts are renamed and forwarded", func(t *testing.T) {
		res, err := high.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "beta__hello", Arguments: map[string]string{"who": "Ada"}})
		if err != nil {
			t.Fatal(err)
		}
		direct, err := f.pool.GetPrompt(context.Background(), "beta", "hello", map[string]string{"who": "Ada"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(mustJSON(t, direct), mustJSON(t, res)); diff != "" {
			t.Errorf("prompt through the gateway (-direct +gateway):\n%s", diff)
		}
		if _, err := high.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "hello"}); err == nil {
			t.Error("the upstream's own prompt name is exposed")
		}
	})
}

func TestResourcesFilteredByDataLevel(t *testing.T) {
	f := newResFixture(t)
	waitResListing(t, f.connect(t, "restricted"), resListing{
		resources: []string{"mem://a", "mem://b", "mem://shared"}, templates: []string{"mem://items/{id}"}, prompts: []string{"beta__hello"},
	})
	ctx := context.Background()

	// internal sees alpha's (internal) resources, not beta's (confidential).
	mid := f.connect(t, "internal")
	if diff := cmp.Diff(resListing{resources: []string{"mem://a", "mem://shared"}}, resList(t, mid), cmp.AllowUnexported(resListing{})); diff != "" {
		t.Errorf("internal principal's resListing (-want +got):\n%s", diff)
	}
	if got := resReadText(t, mid, "mem://a"); got != "alpha a" {
		t.Errorf("internal reads mem://a = %q", got)
	}

	low := f.connect(t, "public")
	if diff := cmp.Diff(resListing{}, resList(t, low), cmp.AllowUnexported(resListing{})); diff != "" {
		t.Errorf("public principal's resListing (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name, wantMsg string
		do            func() error
	}{
		{"read a resource", `access denied: resource mem://b of upstream beta needs data access level confidential, and principal "public" is cleared for public`,
			func() error { _, err := low.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://b"}); return err }},
		{"read through a template", "resource mem://items/1 of upstream beta needs data access level confidential",
			func() error {
				_, err := low.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://items/1"})
				return err
			}},
		{"read an internal resource", "resource mem://a of upstream alpha needs data access level internal",
			func() error { _, err := low.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://a"}); return err }},
		{"get a prompt", "prompt beta__hello of upstream beta needs data access level confidential",
			func() error {
				_, err := low.GetPrompt(ctx, &mcp.GetPromptParams{Name: "beta__hello", Arguments: map[string]string{"who": "x"}})
				return err
			}},
		{"subscribe", "resource mem://b of upstream beta needs data access level confidential",
			func() error { return low.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://b"}) }},
		{"internal reads confidential", `principal "internal" is cleared for internal`,
			func() error { _, err := mid.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://b"}); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if resWireCode(err) != CodeAccessDenied || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %v (code %d), want code %d containing %q", err, resWireCode(err), CodeAccessDenied, tc.wantMsg)
			}
		})
	}
	if n := f.beta.subscribers("mem://b"); n != 0 {
		t.Errorf("a refused subscription reached the upstream (%d subscribers)", n)
	}
}

func TestResourceSubscriptionsRelayed(t *testing.T) {
	f := newResFixture(t)
	updates := make(chan string, 16)
	opts := &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
		updates <- r.Params.URI
	}}
	a := f.connectWith(t, "restricted", opts)
	waitResListing(t, a, resListing{
		resources: []string{"mem://a", "mem://b", "mem://shared"}, templates: []string{"mem://items/{id}"}, prompts: []string{"beta__hello"},
	})
	b := f.connectWith(t, "restricted", nil)
	ctx := context.Background()

	waitUpdate := func(uri string) {
		t.Helper()
		select {
		case got := <-updates:
			if got != uri {
				t.Fatalf("update for %s, want %s", got, uri)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no notifications/resources/updated for %s", uri)
		}
	}

	for _, cs := range []*mcp.ClientSession{a, a, b} { // a twice: idempotent
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://b"}); err != nil {
			t.Fatalf("subscribe: %v", err)
		}
	}
	if n := f.beta.subscribers("mem://b"); n != 1 {
		t.Errorf("upstream holds %d subscriptions for two sessions, want 1", n)
	}
	if err := f.beta.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "mem://b"}); err != nil {
		t.Fatal(err)
	}
	waitUpdate("mem://b")

	// A URI served through a template, and one nobody serves.
	if err := a.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://items/9"}); err != nil {
		t.Fatalf("subscribe through a template: %v", err)
	}
	if err := f.beta.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "mem://items/9"}); err != nil {
		t.Fatal(err)
	}
	waitUpdate("mem://items/9")
	if err := a.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://nowhere"}); resWireCode(err) != mcp.CodeResourceNotFound {
		t.Errorf("subscribing to an unknown URI: %v, want resource not found", err)
	}

	// beta's copy of alpha's URI: alpha serves it, so beta's update is not
	// relayed.
	if err := a.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://shared"}); err != nil {
		t.Fatal(err)
	}
	if f.alpha.subscribers("mem://shared") != 1 || f.beta.subscribers("mem://shared") != 0 {
		t.Errorf("mem://shared subscriptions: alpha %d, beta %d; want 1, 0", f.alpha.subscribers("mem://shared"), f.beta.subscribers("mem://shared"))
	}

	// a unsubscribes: b still holds the upstream subscription, and a no
	// longer gets updates.
	if err := a.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "mem://b"}); err != nil {
		t.Fatal(err)
	}
	if n := f.beta.subscribers("mem://b"); n != 1 {
		t.Errorf("after one of two sessions unsubscribed the upstream holds %d, want 1", n)
	}
	_ = f.beta.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "mem://b"})
	select {
	case got := <-updates:
		t.Errorf("update for %s after unsubscribing", got)
	case <-time.After(300 * time.Millisecond):
	}

	// b's session ends: its subscription is released upstream.
	_ = b.Close()
	testenv.WaitFor(t, "the upstream to release the subscription after the last session ended", 10*time.Second, func() bool {
		return f.beta.subscribers("mem://b") == 0
	})
}

// Resources an upstream adds later are published (list_changed), and a
// gateway without the manifest blocks publishes nothing.
func TestResourcesFollowTheUpstream(t *testing.T) {
	f := newResFixture(t)
	high := f.connect(t, "restricted")
	waitResListing(t, high, resListing{
		resources: []string{"mem://a", "mem://b", "mem://shared"}, templates: []string{"mem://items/{id}"}, prompts: []string{"beta__hello"},
	})
	resTextResource(f.beta.srv, "mem://late", "late")
	f.beta.srv.RemovePrompts("hello")
	waitResListing(t, high, resListing{
		resources: []string{"mem://a", "mem://b", "mem://late", "mem://shared"}, templates: []string{"mem://items/{id}"},
	})
	if got := resReadText(t, high, "mem://late"); got != "late" {
		t.Errorf("read mem://late = %q", got)
	}
	if _, err := high.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "beta__hello"}); err == nil {
		t.Error("a removed prompt can still be got")
	}
}

// completion/complete reaches the upstream that owns the prompt (under the
// upstream's own name) or the resource template, and is refused to a
// principal below the block's data access level.
func TestCompletionForwarded(t *testing.T) {
	f := newResFixture(t)
	high := f.connect(t, "restricted")
	waitResListing(t, high, resListing{
		resources: []string{"mem://a", "mem://b", "mem://shared"}, templates: []string{"mem://items/{id}"}, prompts: []string{"beta__hello"},
	})
	if caps := high.InitializeResult().Capabilities; caps.Completions == nil {
		t.Error("the gateway does not announce the completions capability")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		ref  *mcp.CompleteReference
		arg  string
		want string
	}{
		{&mcp.CompleteReference{Type: "ref/prompt", Name: "beta__hello"}, "who", "ref/prompt hello who=a"},
		{&mcp.CompleteReference{Type: "ref/resource", URI: "mem://items/{id}"}, "id", "ref/resource mem://items/{id} id=a"},
	} {
		res, err := high.Complete(ctx, &mcp.CompleteParams{Ref: tc.ref, Argument: mcp.CompleteParamsArgument{Name: tc.arg, Value: "a"}})
		if err != nil {
			t.Errorf("complete %s: %v", tc.ref.Name+tc.ref.URI, err)
			continue
		}
		if got := res.Completion.Values; len(got) != 1 || got[0] != tc.want {
			t.Errorf("complete %s = %q, want [%q]", tc.ref.Name+tc.ref.URI, got, tc.want)
		}
	}

	_, err := high.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "hello"}, Argument: mcp.CompleteParamsArgument{Name: "who"}})
	if resWireCode(err) != jsonrpc.CodeInvalidParams {
		t.Errorf("complete of the unexposed name hello: %v (code %d), want invalid params", err, resWireCode(err))
	}
	low := f.connect(t, "public")
	_, err = low.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "beta__hello"}, Argument: mcp.CompleteParamsArgument{Name: "who"}})
	if resWireCode(err) != CodeAccessDenied || !strings.Contains(err.Error(), "prompt beta__hello of upstream beta needs data access level confidential") {
		t.Errorf("public principal's completion: %v (code %d), want access denied", err, resWireCode(err))
	}
}
