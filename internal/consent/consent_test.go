package consent_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/blob"
	"github.com/airlock-run/airlock/internal/consent"
	"github.com/airlock-run/airlock/internal/consent/consenttest"
	"github.com/airlock-run/airlock/internal/credstore"
	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/manifests"
)

type fixture struct {
	p     *consenttest.Provider
	flow  *consent.Flow
	store *credstore.Store
	srv   *httptest.Server
	audit *bytes.Buffer
	cfg   *manifests.UserOAuth
	url   string // the store's
	keys  *credstore.Keyring
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	fx := &fixture{audit: &bytes.Buffer{}}
	var h http.Handler
	fx.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(fx.srv.Close)
	fx.p = consenttest.Start("airlock", "client-secret", fx.srv.URL+manifests.ConsentCallbackPath)
	t.Cleanup(fx.p.Close)
	t.Setenv("CODE_SECRET", "client-secret")
	fx.cfg = &manifests.UserOAuth{AuthorizeURL: fx.p.URL + "/authorize", TokenURL: fx.p.URL + "/token", RevocationURL: fx.p.URL + "/revoke",
		ClientID: "airlock", ClientSecretEnv: "CODE_SECRET", RedirectURL: fx.p.RedirectURL, Scopes: []string{"repo", "read:user"}}
	k, err := credstore.ParseKeys("k1:" + credstore.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	fx.url, fx.keys = blob.FileURL(t.TempDir()), k
	if fx.store, err = credstore.Open(context.Background(), fx.url, k); err != nil {
		t.Fatal(err)
	}
	fx.flow = consent.New(consent.Options{Store: fx.store, Audit: auditstream.New(fx.audit),
		Upstreams: func(s string) *manifests.UserOAuth {
			if s == "code" {
				return fx.cfg
			}
			return nil
		}})
	h = fx.flow.Handler()
	return fx
}

// browser is a user's browser: its own cookies, signed in at the
// provider as user.
func browser(user string) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Transport: userRT{user}}
}

type userRT struct{ user string }

func (u userRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-User", u.user)
	return http.DefaultTransport.RoundTrip(r)
}

func get(t *testing.T, c *http.Client, u string) (int, string, *url.URL) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Request.URL
}

// callbackURL follows the link in b up to the provider's redirect back
// to airlock, without following that one: the callback URL with code and
// state.
func callbackURL(t *testing.T, b *http.Client, link string) string {
	t.Helper()
	c := *b
	c.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		if r.URL.Path == manifests.ConsentCallbackPath {
			return http.ErrUseLastResponse
		}
		return nil
	}
	resp, err := c.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("following %s: %s", link, resp.Status)
	}
	return resp.Header.Get("Location")
}

// TestConsentFlow: alice follows her link in her browser, authorizes at
// the provider, and her credential is stored (encrypted, without the
// token in the audit stream); calls of her task then get her access
// token, refreshed when it nears its expiry. A callback replayed, one
// from a browser that did not start the flow, an expired link and
// malformed requests are refused; bob's calls never get alice's token.
func TestConsentFlow(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	link, eid, err := fx.flow.Begin(ctx, "alice", "code", "task-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link, fx.srv.URL+manifests.ConsentStartPath+"?id=") || !strings.HasPrefix(eid, "consent-") || strings.Contains(link, eid[len("consent-"):]) {
		t.Fatalf("link %s, elicitation %s", link, eid)
	}
	alice, bob := browser("alice"), browser("bob")

	// Bob's browser presenting alice's state (a link forwarded, a callback
	// URL planted) is refused, and alice's link still works.
	cb := callbackURL(t, alice, link)
	if st, body, _ := get(t, bob, cb); st != http.StatusForbidden || !strings.Contains(body, "did not open this consent link") {
		t.Fatalf("bob's browser on alice's callback: %d %s", st, body)
	}
	if ok, _ := fx.store.Has(ctx, "alice", "code"); ok {
		t.Fatal("stored before the callback")
	}
	if st, body, _ := get(t, alice, cb); st != 200 || !strings.Contains(body, "may now call code as alice") {
		t.Fatalf("alice's callback: %d %s", st, body)
	}
	// Replayed: the link and its state work once.
	if st, body, _ := get(t, alice, cb); st == 200 || !strings.Contains(body, "not") {
		t.Fatalf("replayed callback: %d %s", st, body)
	}
	if st, _, _ := get(t, alice, link); st != http.StatusGone {
		t.Fatalf("used link: %d", st)
	}
	if redeemed, _, _, _ := fx.p.Counts(); redeemed != 1 {
		t.Fatalf("the provider redeemed %d codes, want 1", redeemed)
	}

	// alice's calls of task-1 get her token; a binding edited to another
	// task, user or upstream opens nothing; bob has none.
	sub, err := fx.flow.Subject("task-1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	tok, rec, err := fx.flow.Token(ctx, "task-1", "code", sub)
	if err != nil {
		t.Fatal(err)
	}
	if who, ok := fx.p.Who(tok); !ok || who != "alice" || rec.Principal != "alice" || strings.Join(rec.Scopes, " ") != "repo read:user" {
		t.Fatalf("token for %q %v, record %+v", who, ok, rec)
	}
	edited := *sub
	edited.Principal = "bob"
	if _, _, err := fx.flow.Token(ctx, "task-2", "code", sub); !errors.Is(err, consent.ErrBinding) {
		t.Fatalf("another task: %v", err)
	}
	if _, _, err := fx.flow.Token(ctx, "task-1", "code", &edited); !errors.Is(err, consent.ErrBinding) {
		t.Fatalf("another user: %v", err)
	}
	bobSub, _ := fx.flow.Subject("task-9", "bob")
	var ge *exchange.GrantError
	if _, _, err := fx.flow.Token(ctx, "task-9", "code", bobSub); !errors.As(err, &ge) || !errors.Is(err, consent.ErrNotAuthorized) || !strings.Contains(err.Error(), "nothing ran") {
		t.Fatalf("bob: %v", err)
	}

	// Refreshed when it nears expiry; the refresh token rotates.
	fx.p.AccessTTL = 2 * time.Second
	st2, body2 := func() (int, string) {
		l, _, _ := fx.flow.Begin(ctx, "carol", "code", "task-3")
		s, b, _ := get(t, browser("carol"), l)
		return s, b
	}()
	if st2 != 200 {
		t.Fatalf("carol: %d %s", st2, body2)
	}
	cs, _ := fx.flow.Subject("task-3", "carol")
	t1, _, err := fx.flow.Token(ctx, "task-3", "code", cs)
	if err != nil {
		t.Fatal(err)
	}
	t2, rec2, err := fx.flow.Token(ctx, "task-3", "code", cs)
	if err != nil || t2 == t1 || rec2.Refreshed.IsZero() {
		t.Fatalf("no refresh: %v %v", err, rec2)
	}
	if who, ok := fx.p.Who(t2); !ok || who != "carol" {
		t.Fatalf("refreshed token for %q", who)
	}
	// Carol revokes the app at the provider: the refresh is refused, the
	// credential goes, and her next call will ask for consent again.
	fx.p.Disable("carol")
	if _, _, err := fx.flow.Token(ctx, "task-3", "code", cs); !errors.Is(err, consent.ErrGrantGone) {
		t.Fatalf("disabled: %v", err)
	}
	if ok, _ := fx.store.Has(ctx, "carol", "code"); ok {
		t.Fatal("a refused credential is kept")
	}

	// Declined at the provider: nothing stored, audited.
	l3, _, _ := fx.flow.Begin(ctx, "dave", "code", "task-4")
	if st, body, _ := get(t, browser("nobody"), l3); st != 200 || !strings.Contains(body, "Nothing was stored") {
		t.Fatalf("declined: %d %s", st, body)
	}

	// Revoke: at the provider, then deleted.
	rv, err := fx.flow.Revoke(ctx, "alice", "code", "operator")
	if err != nil || !rv.Deleted || rv.Provider != "revoked at the provider" {
		t.Fatalf("revoke: %+v %v", rv, err)
	}
	if _, ok := fx.p.Who(tok); ok {
		t.Fatal("the provider still accepts alice's token after revoke")
	}
	if _, _, err := fx.flow.Token(ctx, "task-1", "code", sub); !errors.Is(err, consent.ErrNotAuthorized) {
		t.Fatalf("after revoke: %v", err)
	}
	if _, err := fx.flow.Revoke(ctx, "alice", "code", "operator"); err == nil {
		t.Fatal("second revoke succeeded")
	}

	a := fx.audit.String()
	for _, want := range []string{`"event":"credential_stored","principal":"alice","upstream":"code","via":"consent"`, `"event":"credential_refused","principal":"dave"`,
		`"event":"credential_revoked","principal":"carol"`, `"event":"credential_revoked","principal":"alice","upstream":"code","via":"cli","by":"operator"`} {
		if !strings.Contains(a, want) {
			t.Errorf("audit lacks %s:\n%s", want, a)
		}
	}
	for _, sec := range fx.p.Issued() {
		if strings.Contains(a, sec) {
			t.Fatalf("the audit stream holds a token or code (%.8s…)", sec)
		}
	}
}

// TestConsentHostileRequests: the start and callback endpoints refuse
// what airlock never sends, before any lookup, and an expired link.
func TestConsentHostileRequests(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	link, _, _ := fx.flow.Begin(ctx, "alice", "code", "t")
	id := strings.SplitN(link, "id=", 2)[1]
	b := browser("alice")
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{manifests.ConsentStartPath + "?id=" + id + "&id=" + id, 400, "given 2 times"},
		{manifests.ConsentStartPath + "?id=../../x", 410, "not known"},
		{manifests.ConsentStartPath, 410, "not known"},
		{manifests.ConsentCallbackPath + "?state=" + id + "&state=x&code=c", 400, "given 2 times"},
		{manifests.ConsentCallbackPath + "?state=short&code=c", 400, "state parameter"},
		{manifests.ConsentCallbackPath + "?state=" + id + "&code=" + strings.Repeat("c", 5000), 400, "longer than"},
		{manifests.ConsentCallbackPath + "?state=" + id + "&code=c", 403, "did not open"},
	} {
		if st, body, _ := get(t, b, fx.srv.URL+c.path); st != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%.80s: %d %s; want %d %q", c.path, st, body, c.code, c.want)
		}
	}
	resp, err := b.Post(fx.srv.URL+manifests.ConsentCallbackPath, "text/plain", nil)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %v %v", resp.Status, err)
	}
	resp.Body.Close()
	// The link still works after all that; then it expires.
	fx.store.SetClock(func() time.Time { return time.Now().Add(consent.DefaultTTL + time.Second) })
	if st, body, _ := get(t, b, link); st != http.StatusGone || !strings.Contains(body, "expired") {
		t.Fatalf("expired link: %d %s", st, body)
	}
	if _, _, _, refused := fx.p.Counts(); refused != 0 {
		t.Fatalf("the provider refused %d requests", refused)
	}
}

// TestConsentHostileProvider: what a token endpoint answers is checked
// before anything is stored: a token type that is not Bearer, a token too
// large or not sendable in a header, an answer that is not a token, and a
// refusal with a description of 10 KB (clipped in the page and the
// audit line); an expires_in past 2^53 is stored as a bounded expiry.
func TestConsentHostileProvider(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	var body string
	status := 200
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(hostile.Close)
	fx.cfg.TokenURL = hostile.URL
	long := strings.Repeat("x", 20<<10)
	for _, c := range []struct {
		status     int
		body, want string
	}{
		{200, `{"access_token":"a1","token_type":"mac"}`, "only Bearer"},
		{200, `{"access_token":"` + long + `","token_type":"Bearer"}`, "larger than"},
		{200, `{"access_token":"a b\u0001","token_type":"Bearer"}`, "characters a header"},
		{200, `{"token_type":"Bearer"}`, "did not accept"},
		{200, `not json`, "did not accept"},
		{400, `{"error":"invalid_grant","error_description":"` + long + `"}`, "invalid_grant"},
	} {
		status, body = c.status, c.body
		link, _, err := fx.flow.Begin(ctx, "mallory", "code", "t")
		if err != nil {
			t.Fatal(err)
		}
		st, page, _ := get(t, browser("mallory"), link)
		if st != http.StatusBadGateway || !strings.Contains(page, c.want) || len(page) > 2000 {
			t.Errorf("%.60s: %d %.300s; want 502 and %q", c.body, st, page, c.want)
		}
		if ok, _ := fx.store.Has(ctx, "mallory", "code"); ok {
			t.Fatalf("%.60s: stored", c.body)
		}
	}
	if strings.Contains(fx.audit.String(), long[:300]) {
		t.Fatal("the audit stream holds the provider's whole description")
	}
	status, body = 200, `{"access_token":"a2","token_type":"Bearer","expires_in":9007199254740993}`
	link, _, _ := fx.flow.Begin(ctx, "mallory", "code", "t")
	if st, page, _ := get(t, browser("mallory"), link); st != 200 {
		t.Fatalf("expires_in past 2^53: %d %s", st, page)
	}
	rec, _, err := fx.store.Get(ctx, "mallory", "code")
	if err != nil || rec.Expiry.Before(time.Now()) || rec.Expiry.After(time.Now().AddDate(70, 0, 0)) {
		t.Fatalf("expiry %v %v", rec.Expiry, err)
	}
}

type hookRT struct {
	before func()
	once   sync.Once
}

func (h *hookRT) RoundTrip(r *http.Request) (*http.Response, error) {
	h.once.Do(h.before)
	return http.DefaultTransport.RoundTrip(r)
}

// TestRefreshRaceAcrossReplicas: two replicas refresh one user's token at
// once and the provider rotates refresh tokens: the one whose old refresh
// token is refused uses what the other stored, rather than deleting the
// user's credential.
func TestRefreshRaceAcrossReplicas(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	fx.p.AccessTTL = 2 * time.Second // always within the refresh margin
	link, _, _ := fx.flow.Begin(ctx, "alice", "code", "t")
	if st, body, _ := get(t, browser("alice"), link); st != 200 {
		t.Fatalf("consent: %d %s", st, body)
	}
	b, _ := fx.flow.Subject("t", "alice")
	up := func(string) *manifests.UserOAuth { return fx.cfg }
	// Another replica: its own handle on the shared store.
	st2, err := credstore.Open(ctx, fx.url, fx.keys)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	other := consent.New(consent.Options{Store: st2, Upstreams: up})
	var otherTok string
	hook := &hookRT{before: func() {
		// The other replica refreshes (and rotates) while this one's
		// request, with the refresh token it read, is on its way.
		var err error
		if otherTok, _, err = other.Token(ctx, "t", "code", b); err != nil {
			t.Errorf("the other replica: %v", err)
		}
	}}
	slow := consent.New(consent.Options{Store: fx.store, Upstreams: up, HTTPClient: &http.Client{Transport: hook}})
	tok, _, err := slow.Token(ctx, "t", "code", b)
	if err != nil {
		t.Fatalf("the replica that lost the race: %v", err)
	}
	if tok != otherTok {
		t.Fatal("it did not use the token the other replica stored")
	}
	if who, ok := fx.p.Who(tok); !ok || who != "alice" {
		t.Fatalf("token for %q", who)
	}
	if ok, _ := fx.store.Has(ctx, "alice", "code"); !ok {
		t.Fatal("the credential was deleted")
	}
	if _, _, _, refused := fx.p.Counts(); refused != 1 {
		t.Fatalf("the provider refused %d refreshes, want 1 (the stale one)", refused)
	}
}
