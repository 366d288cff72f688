package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/blob"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/consent"
	"github.com/airlock-run/airlock/internal/consent/consenttest"
	"github.com/airlock-run/airlock/internal/credstore"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/manifests"
)

// codeUpstream is an MCP server over HTTP that accepts a tool call only
// with a bearer the fake provider issued and still honours, and answers
// with the user it names; airlock's session traffic carries none.
type codeUpstream struct {
	url string
	mu  sync.Mutex
	ran []string
}

func startCodeUpstream(t *testing.T, p *consenttest.Provider) *codeUpstream {
	u := &codeUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "code", Version: "1"}, nil)
	for _, name := range []string{"whoami", "merge"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name, Description: name}, func(_ context.Context, req *mcp.CallToolRequest, in struct {
			N int `json:"n"`
		}) (*mcp.CallToolResult, any, error) {
			who, _ := req.Extra.TokenInfo.Extra["user"].(string)
			if who == "" {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no user"}}}, nil, nil
			}
			u.mu.Lock()
			u.ran = append(u.ran, name+":"+who)
			u.mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s #%d as %s", name, in.N, who)}}}, nil, nil
		})
	}
	verify := func(_ context.Context, tok string, r *http.Request) (*auth.TokenInfo, error) {
		if tok == "airlock-session" {
			return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour), Extra: map[string]any{}}, nil
		}
		who, ok := p.Who(tok)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Minute), Extra: map[string]any{"user": who}}, nil
	}
	h := auth.RequireBearerToken(verify, nil)(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer airlock-session")
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	u.url = hs.URL
	return u
}

func (u *codeUpstream) runs() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.ran...)
}

// consentBrowser is a user's browser, signed in at the provider as user.
func consentBrowser(user string) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Transport: userHeaderRT{user}}
}

type userHeaderRT struct{ user string }

func (u userHeaderRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-User", u.user)
	return http.DefaultTransport.RoundTrip(r)
}

// authorize follows a consent link in b to the end, as the user
// authorizing at the provider, and returns the page airlock shows.
func authorize(b *http.Client, link string) (int, string, error) {
	resp, err := b.Get(link)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

// consentLink is the URL of the URL-mode elicitation a 2025-11-25 call
// was answered with (the -32042 error), or fails.
func consentLink(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	var re *jsonrpc.Error
	if !errors.As(err, &re) || re.Code != mcp.CodeURLElicitationRequired {
		if res != nil {
			t.Fatalf("call of %s: %v %s; want a URL elicitation", tool, err, text(res))
		}
		t.Fatalf("call of %s: %v; want a URL elicitation", tool, err)
	}
	var data struct{ Elicitations []*mcp.ElicitParams }
	if err := json.Unmarshal(re.Data, &data); err != nil || len(data.Elicitations) != 1 {
		t.Fatalf("elicitation data %s: %v", re.Data, err)
	}
	e := data.Elicitations[0]
	if e.Mode != "url" || e.ElicitationID == "" || !strings.Contains(e.Message, "Nothing ran") {
		t.Fatalf("elicitation %+v", e)
	}
	return e.URL, e.ElicitationID
}

// connectConsent connects with a client that takes URL elicitations; at
// 2026-07-28 (stateless) when stateless, its handler being onURL.
func connectConsent(t *testing.T, url, key string, stateless bool, onURL func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error), completed ...chan string) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: headerRT{headers: map[string]string{"Authorization": "Bearer " + key}}}
	co := &mcp.ClientOptions{
		ElicitationHandler: onURL,
		Capabilities:       &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}}}
	if len(completed) > 0 {
		co.ElicitationCompleteHandler = func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			completed[0] <- r.Params.ElicitationID
		}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "consent-test", Version: "1"}, co)
	opts := sessionProtocol
	if stateless {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: gateway.StatelessProtocol}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestUserConsent: through the real stack, an upstream with user_oauth
// against a fake authorization server (PKCE checked). alice's first call
// does not run and gets a URL elicitation to airlock's consent start;
// following it in her browser stores her credential; her next call
// reaches the upstream as alice. bob gets his own elicitation, never
// alice's credential, and under concurrency each call runs as its own
// user. A 2026-07-28 client is asked by input-required, authorizes in its
// elicitation handler, and its call runs in the same CallTool. The list
// shows credentials without tokens; revoking alice's makes her next call
// elicit again; a call approved after its user's credential was revoked
// does not run, and its history says so. No history, audit line or log
// line holds a token, a code or a consent link.
func TestUserConsent(t *testing.T) {
	ctx := context.Background()
	var front http.Handler
	fs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { front.ServeHTTP(w, r) }))
	t.Cleanup(fs.Close)
	p := consenttest.Start("airlock", "code-secret", fs.URL+manifests.ConsentCallbackPath)
	t.Cleanup(p.Close)
	up := startCodeUpstream(t, p)
	t.Setenv("CODE_CLIENT_SECRET", "code-secret")

	tool := func(risk manifests.Risk, approval *manifests.Approval) *manifests.Tool {
		return &manifests.Tool{Description: "x", SideEffects: []manifests.SideEffect{manifests.SideEffectWrite}, DataAccessLevel: manifests.DataPublic,
			Risk: risk, Idempotent: true, Timeout: manifests.Duration(20 * time.Second), Approval: approval}
	}
	m := &manifests.Manifest{File: "code.yaml",
		Server: manifests.Server{Name: "code", HTTP: &manifests.HTTPServer{URL: up.url, Auth: &manifests.UpstreamAuth{UserOAuth: &manifests.UserOAuth{
			AuthorizeURL: p.URL + "/authorize", TokenURL: p.URL + "/token", RevocationURL: p.URL + "/revoke",
			ClientID: "airlock", ClientSecretEnv: "CODE_CLIENT_SECRET", RedirectURL: p.RedirectURL, Scopes: []string{"repo"}}}}},
		Tools: map[string]*manifests.Tool{
			"whoami": tool(manifests.RiskLow, nil),
			"merge":  tool(manifests.RiskHigh, &manifests.Approval{Group: "ops", Timeout: manifests.Duration(10 * time.Minute)}),
		}}
	if ps := m.Validate(); len(ps) > 0 {
		t.Fatal(manifests.Problems(ps))
	}
	var principals []config.Principal
	for _, who := range []string{"alice", "bob", "carol", "dave"} {
		principals = append(principals, config.Principal{Name: who, Roles: []string{"all"}, APIKeySHA256: []string{identity.HashKey(who + "-key")}})
	}
	dir := identity.New(&config.Config{
		Roles:      map[string]*config.Role{"all": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}}},
		Principals: principals})

	keys, err := credstore.ParseKeys("k1:" + credstore.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	store, err := credstore.Open(ctx, blob.FileURL(filepath.Join(dataDir, "blobs")), keys)
	if err != nil {
		t.Fatal(err)
	}
	var logs, audit syncBuffer
	al := auditstream.New(&audit)
	flow := consent.New(consent.Options{Store: store, Audit: al, Upstreams: func(s string) *manifests.UserOAuth {
		if s == "code" {
			return m.Server.HTTP.Auth.UserOAuth
		}
		return nil
	}})
	front = flow.Handler()
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir, consent: flow, logs: &logs, dataDir: dataDir,
		audit: al, groups: map[string][]string{"ops": {"carol"}}, inlineWait: 2 * time.Minute, programs: &gateway.ProgramOptions{}})

	aliceDone := make(chan string, 4)
	alice := connectConsent(t, s.url, "alice-key", false, nil, aliceDone)
	bob := connectConsent(t, s.url, "bob-key", false, nil)
	waitTools(t, alice, "code__whoami", "code__merge")
	var links []string

	// 1. alice's first call does not run: a URL elicitation to airlock's
	// consent start.
	link, eid := consentLink(t, alice, "code__whoami", map[string]any{"n": 1})
	links = append(links, link)
	if !strings.HasPrefix(link, fs.URL+manifests.ConsentStartPath+"?id=") {
		t.Fatalf("link %s", link)
	}
	if n := len(up.runs()); n != 0 {
		t.Fatalf("the upstream ran %d calls before consent", n)
	}
	// 2. alice authorizes in her browser; her call then runs as alice.
	if st, body, err := authorize(consentBrowser("alice"), link); err != nil || st != 200 || !strings.Contains(body, "as alice") {
		t.Fatalf("alice's consent: %d %s %v", st, body, err)
	}
	// Her session is told (notifications/elicitation/complete).
	select {
	case got := <-aliceDone:
		if got != eid {
			t.Fatalf("elicitation %s completed, want %s", got, eid)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("alice's session was not told that her consent is done")
	}
	tasks := map[string]bool{}
	if res := call(t, alice, "code__whoami", map[string]any{"n": 2}, ""); res.IsError || text(res) != "whoami #2 as alice" {
		t.Fatalf("alice after consent: %s", text(res))
	} else {
		tasks[res.Meta[gateway.MetaTask].(string)] = true
	}
	// 3. bob cannot use alice's credential: his own elicitation.
	blink, beid := consentLink(t, bob, "code__whoami", map[string]any{"n": 3})
	links = append(links, blink)
	if blink == link || beid == eid {
		t.Fatal("bob was given alice's consent link")
	}
	if got := up.runs(); len(got) != 1 {
		t.Fatalf("runs %v", got)
	}
	if st, _, _ := authorize(consentBrowser("bob"), blink); st != 200 {
		t.Fatalf("bob's consent: %d", st)
	}
	// 4. Concurrent calls of both, never crossed.
	var wg sync.WaitGroup
	var tasksMu sync.Mutex
	errs := make(chan error, 20)
	for i := range 20 {
		who, cs := "alice", alice
		if i%2 == 1 {
			who, cs = "bob", bob
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "code__whoami", Arguments: map[string]any{"n": 100 + i}})
			if err != nil {
				errs <- err
				return
			}
			if want := fmt.Sprintf("whoami #%d as %s", 100+i, who); res.IsError || text(res) != want {
				errs <- fmt.Errorf("%s: %q, want %q", who, text(res), want)
				return
			}
			tasksMu.Lock()
			tasks[res.Meta[gateway.MetaTask].(string)] = true
			tasksMu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// 5. A 2026-07-28 client: input-required with the URL elicitation;
	// its handler authorizes, the SDK retries, and the call runs.
	var asked []string
	carol := connectConsent(t, s.url, "carol-key", true, func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked = append(asked, r.Params.Mode)
		links = append(links, r.Params.URL)
		st, body, err := authorize(consentBrowser("carol"), r.Params.URL)
		if err != nil || st != 200 {
			return nil, fmt.Errorf("consent: %d %s %v", st, body, err)
		}
		return &mcp.ElicitResult{Action: "accept"}, nil
	})
	if res := call(t, carol, "code__whoami", map[string]any{"n": 5}, ""); res.IsError || text(res) != "whoami #5 as carol" {
		t.Fatalf("carol (2026-07-28): %s", text(res))
	} else {
		tasks[res.Meta[gateway.MetaTask].(string)] = true
	}
	if len(asked) != 1 || asked[0] != "url" {
		t.Fatalf("carol was asked %v", asked)
	}

	// 5a. One that declines: nothing runs, nothing is stored.
	dave := connectConsent(t, s.url, "dave-key", true, func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		links = append(links, r.Params.URL)
		return &mcp.ElicitResult{Action: "decline"}, nil
	})
	if res := call(t, dave, "code__whoami", map[string]any{"n": 6}, ""); !res.IsError || !strings.Contains(text(res), "did not authorize airlock") {
		t.Fatalf("dave declined: %s", text(res))
	}

	// 5b. A program's calls act as the user who ran it; one of a user who
	// has not authorized does not run, and says how to authorize.
	res, _ := runProgram(t, bob, "def main():\n    return code.whoami(n=9)\n", false, "")
	if res.IsError || !strings.Contains(text(res)+mustJSON(t, res.StructuredContent), "whoami #9 as bob") {
		t.Fatalf("bob's program: %s %s", text(res), mustJSON(t, res.StructuredContent))
	}
	tasks[res.Meta[gateway.MetaTask].(string)] = true
	res, _ = runProgram(t, dave, "def main():\n    return code.whoami(n=10)\n", false, "")
	if out := text(res) + mustJSON(t, res.StructuredContent); !strings.Contains(out, "not authorized airlock") || !strings.Contains(out, "directly") {
		t.Fatalf("dave's program: %s", out)
	}

	// 6. The list: three credentials, no token.
	recs, bad, err := store.List(ctx)
	if err != nil || len(bad) > 0 || len(recs) != 3 || recs[0].Principal != "alice" || recs[1].Principal != "bob" || recs[0].Upstream != "code" || recs[0].Scopes[0] != "repo" {
		t.Fatalf("list: %+v %v %v", recs, bad, err)
	}
	listed, _ := json.Marshal(recs)

	// 7. Revoked while a call of alice waits for approval: it does not run,
	// and its history says so. Then her next call elicits again.
	local := approver.Local{Temporal: s.client, Namespace: s.srv.Namespace()}
	pending := callAsync(alice, "code__merge", map[string]any{"n": 7001})
	r := waitPending(t, local, "7001", nil)
	if r.ActsAs != "alice" {
		t.Fatalf("the approver is not told whom the call acts as: %q", r.ActsAs)
	}
	if rv, err := flow.Revoke(ctx, "alice", "code", "operator"); err != nil || !rv.Deleted || rv.Provider != "revoked at the provider" {
		t.Fatalf("revoke: %+v %v", rv, err)
	}
	if _, err := local.Decide(ctx, approver.Decision{RequestID: r.ID, Approver: "carol", Approve: true, Via: "cli", Digest: r.Digest[:12]}); err != nil {
		t.Fatal(err)
	}
	pr := <-pending
	if pr.err != nil || !pr.res.IsError || !strings.Contains(text(pr.res), "did not run") || !strings.Contains(text(pr.res), "not authorized") {
		t.Fatalf("merge after revoke: %v %s", pr.err, text(pr.res))
	}
	mergeTask := pr.res.Meta[gateway.MetaTask].(string)
	for _, r := range up.runs() {
		if strings.HasPrefix(r, "merge") {
			t.Fatalf("merge ran: %v", up.runs())
		}
	}
	link2, _ := consentLink(t, alice, "code__whoami", map[string]any{"n": 8})
	links = append(links, link2)

	// 8. Histories, the audit stream and the logs hold no token, code or
	// link; the merge's history names who it was to act as and why it did
	// not run.
	var hist strings.Builder
	tasks[mergeTask] = true
	for id := range tasks {
		it := s.client.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			hist.WriteString(ev.String())
		}
	}
	h := hist.String()
	for _, want := range []string{api.ErrTypeUserGrant, "not authorized airlock", `\"Principal\":\"alice\"`} {
		if !strings.Contains(h, want) {
			t.Errorf("the merge's history does not hold %s", want)
		}
	}
	a := audit.String()
	for _, want := range []string{`"event":"consent_requested","principal":"alice"`, `"event":"credential_stored","principal":"bob"`, `"event":"credential_revoked","principal":"alice"`} {
		if !strings.Contains(a, want) {
			t.Errorf("the audit stream lacks %s", want)
		}
	}
	secrets := append(p.Issued(), "code-secret")
	for _, l := range links {
		secrets = append(secrets, l[strings.Index(l, "id=")+3:])
	}
	for where, txt := range map[string]string{"history": h, "audit stream": a, "logs": logs.String(), "list": string(listed)} {
		for _, sec := range secrets {
			if strings.Contains(txt, sec) {
				t.Fatalf("the %s holds a secret (%.8s…)", where, sec)
			}
		}
	}
	if len(p.Issued()) < 6 {
		t.Fatalf("the provider issued %d codes and tokens", len(p.Issued()))
	}
}
