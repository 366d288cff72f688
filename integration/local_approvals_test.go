package integration

import (
	"context"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/approver/web"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/redact"
	"github.com/airlock-run/airlock/manifests"
)

// TestLocalApprovals decides approval requests without Slack, through the
// functions behind `airlock approvals` and through the /approvals page, on
// the real stack: bob's approval lets alice's call run exactly once; his
// denial on the page comes back to alice as an error with his reason; alice
// may not approve her own call and mallory (not in ops) may not decide; a
// page post without the CSRF token is refused and records nothing.
func TestLocalApprovals(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, appendNeedsOps)
	dir := allGrants(nil, "alice", "bob", "mallory")
	// alice is in ops too, so only the self-approval rule stops her.
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir,
		groups: map[string][]string{"ops": {"alice", "bob"}}, inlineWait: 2 * time.Minute})
	local := approver.Local{Temporal: s.client, Namespace: s.srv.Namespace()}
	ctx := context.Background()

	cs := connectURL(t, s.url, bearer("alice-key"))
	waitTools(t, cs, "counter__append")

	// 1. The CLI path: list, show, refusals, approve.
	first := callAsync(cs, "counter__append", map[string]any{"key": "launch-codes-1"})
	r1 := waitPending(t, local, "launch-codes-1", nil)
	var out strings.Builder
	if err := approver.WriteList(&out, mustList(t, local), time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{r1.ID, r1.TaskID, "counter__append", "alice", "ops", "0/1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("approvals list lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	shown, err := local.Show(ctx, r1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := approver.WriteRequest(&out, shown, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), r1.Digest) || !strings.Contains(out.String(), redact.Mask) || strings.Contains(out.String(), "launch-codes-1") {
		t.Errorf("approvals show: want the digest and the key masked:\n%s", out.String())
	}

	as := func(key string) string {
		p, err := approver.AuthenticateKey(dir, key)
		if err != nil {
			t.Fatalf("key %s: %v", key, err)
		}
		return p.Name
	}
	if _, err := approver.AuthenticateKey(dir, "stolen-key"); !errors.Is(err, identity.ErrUnknownKey) {
		t.Errorf("unknown key: %v", err)
	}
	refusals := []struct {
		who, digest, want string
	}{
		{as("alice-key"), "", "alice asked for this call and may not approve it"},
		{as("mallory-key"), "", `mallory is not in approver group "ops"`},
		{as("bob-key"), "00000000", "it is not the call you saw"},
	}
	for _, c := range refusals {
		_, err := local.Decide(ctx, approver.Decision{RequestID: r1.ID, Approver: c.who, Approve: true, Via: "cli", Digest: c.digest})
		var ref *approver.Refusal
		if !errors.As(err, &ref) || !strings.Contains(ref.Reason, c.want) {
			t.Errorf("%s approving: %v; want a refusal saying %q", c.who, err, c.want)
		}
	}
	if got, _ := local.Show(ctx, r1.ID); got.State != api.ApprovalPending || len(got.Votes) != 0 {
		t.Fatalf("refused decisions changed the request: %+v", got)
	}

	bob := approver.Decision{RequestID: r1.ID, Approver: as("bob-key"), Approve: true, Via: "cli", Digest: r1.Digest[:12]}
	res, err := local.Decide(ctx, bob)
	if err != nil || res.State != api.ApprovalApproved || !strings.Contains(res.Message, "1 of 1") {
		t.Fatalf("bob approving: %+v %v", res, err)
	}
	// Running the same command again records nothing and says so.
	var rep *approver.Refusal
	if again, err := local.Decide(ctx, bob); !errors.As(err, &rep) || !rep.Repeat || !strings.Contains(rep.Reason, "bob already approved") {
		t.Errorf("repeated approve: %+v %v, want already decided", again, err)
	}
	r := <-first
	if r.err != nil || r.res.IsError || !strings.Contains(mustJSON(t, r.res.StructuredContent), `"count":1`) {
		t.Fatalf("approved call: %v %+v", r.err, r.res)
	}
	if n := sideEffects(t, effects, "append", "launch-codes-1"); n != 1 {
		t.Fatalf("the approved call ran %d times, want 1", n)
	}
	if got, _ := local.Show(ctx, r1.ID); got.State != api.ApprovalApproved || len(got.Votes) != 1 || got.Votes[0].Via != "cli" {
		t.Errorf("request after approval: %+v", got)
	}

	// 2. The web page: bob logs in with his key and denies the next one.
	h, err := web.Handler(web.Options{Temporal: s.client, Namespace: s.srv.Namespace(), Directory: dir})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/approvals", h)
	mux.Handle("/approvals/", h)
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)

	second := callAsync(cs, "counter__append", map[string]any{"key": "launch-codes-2"})
	r2 := waitPending(t, local, "launch-codes-2", map[string]bool{r1.ID: true})

	// alice sees nothing to decide: the only request is her own.
	alice := newBrowser(t, site.URL)
	alice.login("alice-key")
	if body := alice.get(); strings.Contains(body, r2.ID) || !strings.Contains(body, "Nothing waits for your decision") {
		t.Errorf("alice is offered her own request:\n%s", body)
	}
	if code, body := newBrowser(t, site.URL).post("/approvals/login", url.Values{"key": {"stolen-key"}}); code != http.StatusUnauthorized || !strings.Contains(body, "not recognised") {
		t.Errorf("login with a bad key: %d\n%s", code, body)
	}

	b := newBrowser(t, site.URL)
	b.login("bob-key")
	page := b.get()
	form := formFor(t, page, r2.ID)
	if form.Get("digest") != r2.Digest || form.Get("csrf") == "" {
		t.Fatalf("the page's form for %s: %v", r2.ID, form)
	}
	if strings.Contains(page, "launch-codes-2") || !strings.Contains(page, redact.Mask) {
		t.Errorf("the page shows the redacted key:\n%s", page)
	}

	// Without the CSRF token: 403, and nothing is recorded.
	noToken := url.Values{"id": {r2.ID}, "digest": {r2.Digest}, "action": {"deny"}}
	if code, body := b.post("/approvals/decide", noToken); code != http.StatusForbidden {
		t.Fatalf("post without CSRF token: %d\n%s", code, body)
	}
	// ... nor from another site with it.
	crossSite := url.Values{"csrf": {form.Get("csrf")}, "id": {r2.ID}, "digest": {r2.Digest}, "action": {"deny"}}
	if code, _ := b.postWith("/approvals/decide", crossSite, map[string]string{"Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Fatalf("cross-site post: %d", code)
	}
	if got, err := local.Show(ctx, r2.ID); err != nil || got.State != api.ApprovalPending || len(got.Votes) != 0 {
		t.Fatalf("a refused post changed the request: %+v %v", got, err)
	}

	form.Set("action", "deny")
	form.Set("comment", "not during the freeze")
	if code, body := b.post("/approvals/decide", form); code != http.StatusSeeOther {
		t.Fatalf("deny: %d\n%s", code, body)
	}
	if body := b.get(); !strings.Contains(body, "denied: 0 of 1 approvals") || strings.Contains(body, `value="`+r2.ID+`"`) {
		t.Errorf("page after the denial:\n%s", body)
	}
	r = <-second
	if r.err != nil || !r.res.IsError || !strings.Contains(text(r.res), "bob denied counter__append: not during the freeze") {
		t.Fatalf("denied call: %v isError=%v %q", r.err, r.res.IsError, text(r.res))
	}
	if n := sideEffects(t, effects, "append", "launch-codes-2"); n != 0 {
		t.Fatalf("the denied call ran %d times", n)
	}
	if got, _ := local.Show(ctx, r2.ID); got.State != api.ApprovalDenied || len(got.Votes) != 1 || got.Votes[0].Via != "web" || got.Votes[0].Approver != "bob" {
		t.Errorf("request after the denial: %+v", got)
	}
}

type asyncResult struct {
	res *mcp.CallToolResult
	err error
}

// callAsync calls a tool in the background: a call waiting for approval
// blocks until someone decides.
func callAsync(cs *mcp.ClientSession, name string, args map[string]any) <-chan asyncResult {
	ch := make(chan asyncResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		ch <- asyncResult{res, err}
	}()
	return ch
}

func mustList(t *testing.T, l approver.Local) []api.ApprovalRequest {
	t.Helper()
	reqs, err := l.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// waitPending waits until a pending request for the key appears in the list
// (visibility lags a little), ignoring the requests in skip.
func waitPending(t *testing.T, l approver.Local, key string, skip map[string]bool) api.ApprovalRequest {
	t.Helper()
	var found api.ApprovalRequest
	waitFor(t, "a pending request for "+key, 60*time.Second, func() bool {
		reqs, err := l.List(context.Background())
		if err != nil {
			return false
		}
		for _, r := range reqs {
			if !skip[r.ID] && strings.Contains(string(r.Arguments), key) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// browser is a cookie-keeping HTTP client for the approvals page that
// does not follow redirects, so each 303 is seen.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) get() string {
	b.t.Helper()
	resp, err := b.c.Get(b.base + "/approvals")
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("GET /approvals: %d\n%s", resp.StatusCode, body)
	}
	return string(body)
}

func (b *browser) post(path string, form url.Values) (int, string) {
	b.t.Helper()
	// What a browser sends with a form on the page.
	return b.postWith(path, form, map[string]string{"Origin": b.base, "Sec-Fetch-Site": "same-origin"})
}

func (b *browser) postWith(path string, form url.Values, header map[string]string) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest("POST", b.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (b *browser) login(key string) {
	b.t.Helper()
	if code, body := b.post("/approvals/login", url.Values{"key": {key}}); code != http.StatusSeeOther {
		b.t.Fatalf("login with %s: %d\n%s", key, code, body)
	}
}

var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`)

// formFor returns the hidden fields of the decision form of request id.
func formFor(t *testing.T, page, id string) url.Values {
	t.Helper()
	for _, f := range strings.Split(page, `<form method="post" action="/approvals/decide">`)[1:] {
		f, _, _ = strings.Cut(f, "</form>")
		v := url.Values{}
		for _, m := range hiddenRE.FindAllStringSubmatch(f, -1) {
			v.Set(m[1], html.UnescapeString(m[2]))
		}
		if v.Get("id") == id {
			return v
		}
	}
	t.Fatalf("the page has no form for %s:\n%s", id, page)
	return nil
}
