package web

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/redact"
)

type webEnv struct {
	t   *testing.T
	ft  *approvertest.FakeTemporal
	srv *httptest.Server
	now time.Time
}

func newWebEnv(t *testing.T) *webEnv { return newWebEnvWith(t, nil) }

// newWebEnvWith is newWebEnv with options changed by edit (nil: none).
func newWebEnvWith(t *testing.T, edit func(*Options)) *webEnv {
	t.Helper()
	e := &webEnv{t: t, now: time.Now()}
	e.ft = &approvertest.FakeTemporal{Reqs: []api.ApprovalRequest{approvertest.Request("task-1", e.now)}}
	o := Options{Temporal: e.ft, Namespace: "default", Directory: approvertest.Directory(), Now: func() time.Time { return e.now }}
	if edit != nil {
		edit(&o)
	}
	h, err := Handler(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/approvals", h)
	mux.Handle("/approvals/", h)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

// browser is an HTTP client with its own cookies that does not follow
// redirects (so the tests see each 303).
func (e *webEnv) browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (e *webEnv) do(c *http.Client, method, path string, form url.Values, header map[string]string) (*http.Response, string) {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// login logs c in with key and returns the session cookie.
func (e *webEnv) login(c *http.Client, key string) *http.Cookie {
	e.t.Helper()
	resp, body := e.do(c, "POST", "/approvals/login", url.Values{"key": {key}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == SessionCookie {
			return ck
		}
	}
	e.t.Fatal("login set no session cookie")
	return nil
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (e *webEnv) page(c *http.Client) (int, string, string) {
	e.t.Helper()
	resp, body := e.do(c, "GET", "/approvals", nil, nil)
	token := ""
	if m := csrfRE.FindStringSubmatch(body); m != nil {
		token = m[1]
	}
	return resp.StatusCode, body, token
}

func TestWebLoginSessionCookie(t *testing.T) {
	e := newWebEnv(t)
	bob := e.browser()
	ck := e.login(bob, "bob-key")
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/approvals" || ck.MaxAge <= 0 {
		t.Errorf("session cookie attributes: %+v", ck)
	}
	payload, _, _ := strings.Cut(ck.Value, ".")
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || strings.Contains(string(raw), "bob-key") || strings.Contains(ck.Value, "bob-key") || strings.Contains(string(raw), identity.HashKey("bob-key")) {
		t.Fatalf("session cookie holds the key, or is not base64: %q (%v)", raw, err)
	}
	code, body, token := e.page(bob)
	if code != 200 || !strings.Contains(body, "logged in as bob") || !strings.Contains(body, "task-1~call-1") || token == "" {
		t.Fatalf("page after login: %d token %q\n%s", code, token, body)
	}
	// The arguments are shown masked.
	if strings.Contains(body, "s3cret") || !strings.Contains(body, redact.Mask) {
		t.Errorf("arguments not masked:\n%s", body)
	}
	// The flash shows once.
	if _, body, _ := e.page(bob); strings.Contains(body, "logged in as bob") {
		t.Error("flash shown twice")
	}
}

func TestWebSessionTamperingAndExpiry(t *testing.T) {
	e := newWebEnv(t)
	ck := e.login(e.browser(), "mallory-key")
	payload, mac, _ := strings.Cut(ck.Value, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(payload)
	var s session
	if err := json.Unmarshal(raw, &s); err != nil || s.Principal != "mallory" {
		t.Fatalf("session payload %q: %v", raw, err)
	}
	s.Principal = "bob"
	forged, _ := json.Marshal(s)
	cases := map[string]string{
		"principal changed, old MAC": base64.RawURLEncoding.EncodeToString(forged) + "." + mac,
		"MAC changed":                payload + "." + flip(mac),
		"no MAC":                     payload,
		"garbage":                    "x.y",
	}
	for name, value := range cases {
		c := e.browser()
		u, _ := url.Parse(e.srv.URL + "/approvals")
		c.Jar.SetCookies(u, []*http.Cookie{{Name: SessionCookie, Value: value, Path: "/approvals"}})
		_, body, token := e.page(c)
		if token != "" || strings.Contains(body, "task-1~call-1") || !strings.Contains(body, `name="key"`) {
			t.Errorf("%s: admitted\n%s", name, body)
		}
	}

	// A session ends at its expiry.
	bob := e.browser()
	e.login(bob, "bob-key")
	if _, _, token := e.page(bob); token == "" {
		t.Fatal("not logged in")
	}
	e.now = e.now.Add(8*time.Hour + time.Second)
	_, body, token := e.page(bob)
	if token != "" || !strings.Contains(body, "session has expired") {
		t.Errorf("expired session admitted:\n%s", body)
	}
}

func TestWebLoginBadKey(t *testing.T) {
	e := newWebEnv(t)
	for key, want := range map[string]string{"wrong-key": "not recognised", "": "enter your API key"} {
		c := e.browser()
		resp, body := e.do(c, "POST", "/approvals/login", url.Values{"key": {key}}, nil)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, want) {
			t.Errorf("key %q: %d, want 401 with %q\n%s", key, resp.StatusCode, want, body)
		}
		for _, ck := range resp.Cookies() {
			if ck.Name == SessionCookie {
				t.Errorf("key %q: session cookie set", key)
			}
		}
	}
	// A login posted from another site is refused.
	resp, _ := e.do(e.browser(), "POST", "/approvals/login", url.Values{"key": {"bob-key"}}, map[string]string{"Origin": "https://evil.example"})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site login: %d", resp.StatusCode)
	}
}

func TestWebCSRF(t *testing.T) {
	e := newWebEnv(t)
	bob := e.browser()
	e.login(bob, "bob-key")
	_, _, token := e.page(bob)
	mallory := e.browser()
	e.login(mallory, "mallory-key")
	_, _, malloryToken := e.page(mallory)
	if token == "" || malloryToken == "" || token == malloryToken {
		t.Fatalf("tokens %q %q", token, malloryToken)
	}
	form := func(csrf string) url.Values {
		v := url.Values{"id": {"task-1~call-1"}, "digest": {"0123456789abcdef0123456789abcdef"}, "action": {"approve"}}
		if csrf != "" {
			v.Set("csrf", csrf)
		}
		return v
	}
	cases := []struct {
		name   string
		form   url.Values
		header map[string]string
	}{
		{"no token", form(""), nil},
		{"wrong token", form(flip(token)), nil},
		{"another session's token", form(malloryToken), nil},
		{"cross-site Origin", form(token), map[string]string{"Origin": "https://evil.example"}},
		{"null Origin", form(token), map[string]string{"Origin": "null"}},
		{"cross-site Referer", form(token), map[string]string{"Referer": "https://evil.example/page"}},
		{"Sec-Fetch-Site cross-site", form(token), map[string]string{"Sec-Fetch-Site": "cross-site"}},
	}
	for _, c := range cases {
		resp, body := e.do(bob, "POST", "/approvals/decide", c.form, c.header)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403\n%s", c.name, resp.StatusCode, body)
		}
	}
	// Logout needs the token too.
	if resp, _ := e.do(bob, "POST", "/approvals/logout", url.Values{}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout without token: %d", resp.StatusCode)
	}
	// Without a session, a post is not admitted either.
	if resp, _ := e.do(e.browser(), "POST", "/approvals/decide", form(token), nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("post without session: %d", resp.StatusCode)
	}
	if n := len(e.ft.Sent()); n != 0 {
		t.Fatalf("%d decisions delivered from rejected posts", n)
	}

	// The real form, same origin: delivered as bob, via web, bound to the digest.
	resp, body := e.do(bob, "POST", "/approvals/decide", form(token), map[string]string{"Origin": e.srv.URL, "Sec-Fetch-Site": "same-origin"})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/approvals" {
		t.Fatalf("decide: %d %s", resp.StatusCode, body)
	}
	sent := e.ft.Sent()
	if len(sent) != 1 {
		t.Fatalf("%d updates", len(sent))
	}
	d := sent[0].Args[0].(api.DecideRequest)
	if sent[0].UpdateID != "web:task-1~call-1:bob:approve" || d.Approver != "bob" || d.Via != "web" || !d.Approve || d.Digest != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("update %+v %+v", sent[0], d)
	}
	if _, body, _ := e.page(bob); !strings.Contains(body, "approved: 1 of 1 approvals") || strings.Contains(body, `value="task-1~call-1"`) {
		t.Errorf("page after approving:\n%s", body)
	} else {
		// The notice names the call that was decided (tool, task, masked
		// arguments) and what happens to it, not only the request ID.
		for _, want := range []string{"Your approval of counter__append", "k1", "task task-1", "The call runs now"} {
			if !strings.Contains(body, want) {
				t.Errorf("notice lacks %q:\n%s", want, body)
			}
		}
		if strings.Contains(body, "s3cret") {
			t.Errorf("notice shows a masked argument:\n%s", body)
		}
	}

	// The form submitted again (a second tab, the back button): already
	// decided, nothing delivered or audited again (issue 25 §9).
	_, _, token = e.page(bob)
	e.do(bob, "POST", "/approvals/decide", form(token), map[string]string{"Origin": e.srv.URL, "Sec-Fetch-Site": "same-origin"})
	if _, body, _ := e.page(bob); !strings.Contains(body, "Already decided: bob already approved request task-1~call-1 via web") ||
		strings.Contains(body, "Your approval of") || len(e.ft.Sent()) != 1 {
		t.Errorf("page after approving again (%d updates):\n%s", len(e.ft.Sent()), body)
	}

	// Logout ends the session.
	_, _, token = e.page(bob)
	if resp, _ := e.do(bob, "POST", "/approvals/logout", url.Values{"csrf": {token}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if _, body, token := e.page(bob); token != "" || !strings.Contains(body, "logged out") {
		t.Errorf("after logout:\n%s", body)
	}
}

func TestWebShowsOnlyDecidableAndRefusals(t *testing.T) {
	e := newWebEnv(t)
	// alice asked: her own request is not offered to her; mallory is not in ops.
	for _, key := range []string{"alice-key", "mallory-key"} {
		c := e.browser()
		e.login(c, key)
		_, body, _ := e.page(c)
		if strings.Contains(body, `value="task-1~call-1"`) || !strings.Contains(body, "Nothing waits for your decision") {
			t.Errorf("%s is offered the request:\n%s", key, body)
		}
	}
	// A refusal from the workflow is shown on the page.
	e.ft.Refuse = func(api.DecideRequest) error {
		return errImmutable("request task-1~call-1 expired at 2026-01-01T00:00:00Z")
	}
	bob := e.browser()
	e.login(bob, "bob-key")
	_, _, token := e.page(bob)
	resp, _ := e.do(bob, "POST", "/approvals/decide", url.Values{"csrf": {token}, "id": {"task-1~call-1"},
		"digest": {"0123456789abcdef0123456789abcdef"}, "action": {"deny"}, "comment": {"no"}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("decide: %d", resp.StatusCode)
	}
	if _, body, _ := e.page(bob); !strings.Contains(body, "Refused: request task-1~call-1 expired at") {
		t.Errorf("refusal not shown:\n%s", body)
	}
	// A digest the request does not have is refused without delivering.
	n := len(e.ft.Sent())
	_, _, token = e.page(bob)
	e.do(bob, "POST", "/approvals/decide", url.Values{"csrf": {token}, "id": {"task-1~call-1"}, "digest": {"ffffffffffffffff"}, "action": {"approve"}}, nil)
	if _, body, _ := e.page(bob); !strings.Contains(body, "it is not the call you saw") || len(e.ft.Sent()) != n {
		t.Errorf("digest mismatch:\n%s", body)
	}
}

// flip changes the first character of a base64url string.
func flip(s string) string {
	c := byte('A')
	if s[0] == 'A' {
		c = 'B'
	}
	return string(c) + s[1:]
}

type errImmutable string

func (e errImmutable) Error() string { return string(e) }

// TestWebApproveWithEdits: the page offers "Edit arguments" prefilled with
// the masked arguments, delivers the edit (masked values restored) under
// its own Update ID, and offers nothing to edit when the tool forbids it.
func TestWebApproveWithEdits(t *testing.T) {
	e := newWebEnv(t)
	bob := e.browser()
	e.login(bob, "bob-key")
	_, body, token := e.page(bob)
	if !strings.Contains(body, `name="arguments"`) || !strings.Contains(body, "[redacted]") || strings.Contains(body, "s3cret") ||
		!strings.Contains(body, `value="approve-edits"`) {
		t.Fatalf("page lacks Edit arguments, or shows the secret:\n%s", body)
	}
	r := e.ft.Reqs[0]
	resp, _ := e.do(bob, "POST", "/approvals/decide", url.Values{"csrf": {token}, "id": {r.ID}, "digest": {r.Digest},
		"action": {"approve-edits"}, "arguments": {`{"key": "k2", "auth": {"token": "[redacted]"}}`}}, map[string]string{"Origin": e.srv.URL})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("decide: %d", resp.StatusCode)
	}
	sent := e.ft.Sent()
	if len(sent) != 1 {
		t.Fatalf("delivered %d updates", len(sent))
	}
	d := sent[0].Args[0].(api.DecideRequest)
	if !d.Approve || d.Arguments != `{"auth":{"token":"s3cret"},"key":"k2"}` || d.Via != "web" ||
		!strings.HasPrefix(sent[0].UpdateID, "web:"+r.ID+":bob:approve:edit-") {
		t.Errorf("delivered %+v as %s", d, sent[0].UpdateID)
	}

	e2 := newWebEnv(t)
	e2.ft.Reqs[0].NoEdits = true
	c := e2.browser()
	e2.login(c, "bob-key")
	if _, body, _ := e2.page(c); strings.Contains(body, `name="arguments"`) || !strings.Contains(body, `value="approve"`) {
		t.Errorf("a request that may not be edited offers Edit arguments:\n%s", body)
	}
}

// TestWebGrantForm: the page offers the grant fields a request's
// max_grant allows, and an approval sends what was filled in; a bad value
// is not delivered, and a denial carries no grant.
func TestWebGrantForm(t *testing.T) {
	e := newWebEnvWith(t, nil)
	e.ft.Reqs[0].MaxGrant = &api.GrantBound{Calls: 3, Duration: time.Hour}
	e.ft.Reqs = append(e.ft.Reqs, approvertest.Request("task-2", e.now)) // no max_grant
	bob := e.browser()
	e.login(bob, "bob-key")
	_, body, token := e.page(bob)
	if strings.Count(body, `name="grant_calls"`) != 1 || !strings.Contains(body, `max="3"`) || !strings.Contains(body, `name="grant_for"`) ||
		strings.Contains(body, `name="grant_principal"`) || !strings.Contains(body, "at most 3 calls, 1h0m0s") {
		t.Fatalf("grant fields (only task-1's request allows grants, not across tasks):\n%s", body)
	}
	post := func(id, action string, extra url.Values) {
		t.Helper()
		form := url.Values{"csrf": {token}, "id": {id}, "digest": {"0123456789abcdef"}, "action": {action}}
		for k, v := range extra {
			form[k] = v
		}
		if resp, _ := e.do(bob, "POST", "/approvals/decide", form, nil); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("decide: %d", resp.StatusCode)
		}
	}
	post("task-1~call-1", "approve", url.Values{"grant_calls": {"x"}})
	if _, body, _ := e.page(bob); !strings.Contains(body, `Not recorded: grant calls &#34;x&#34;`) || len(e.ft.Sent()) != 0 {
		t.Fatalf("bad grant_calls delivered or not explained (%d sent):\n%s", len(e.ft.Sent()), body)
	}
	post("task-1~call-1", "approve", url.Values{"grant_calls": {"2"}, "grant_for": {"30m"}})
	post("task-2~call-1", "deny", url.Values{"grant_calls": {"2"}})
	sent := e.ft.Sent()
	if len(sent) != 2 {
		t.Fatalf("%d decisions sent, want 2", len(sent))
	}
	if g := sent[0].Args[0].(api.DecideRequest).Grant; g == nil || *g != (api.GrantAsk{Calls: 2, For: 30 * time.Minute}) ||
		!strings.HasSuffix(sent[0].UpdateID, ":grant:2:30m0s") {
		t.Errorf("approval sent grant %+v update %s", g, sent[0].UpdateID)
	}
	if g := sent[1].Args[0].(api.DecideRequest).Grant; g != nil {
		t.Errorf("a denial sent grant %+v", g)
	}
}

// TestEditRefusedIsNotReportedApproved (issue 25 §8): an approval whose
// edit policy refused is reported on the page as "edit refused, nothing
// ran", never as approved (slack's and webhook's tests of the name cover
// the message and approval_closed).
func TestEditRefusedIsNotReportedApproved(t *testing.T) {
	msg := decidedNotice(true, api.DecideResult{RequestID: "task-1~c1", State: api.ApprovalApproved, Message: "approved with edited arguments, but the edit was refused",
		EditDigest: "abcdef0123456789", EditEffect: "deny", EditRefused: "policy denies the edited call (check rule): no env files"}, api.ApprovalRequest{})
	if !strings.Contains(msg, "refused by policy") || !strings.Contains(msg, "Nothing ran") || strings.Contains(msg, "it is what runs") {
		t.Errorf("page notice %q", msg)
	}
}
