package web

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/approver/internal/approvertest"
	"github.com/airlock-run/airlock/internal/auditstream"
)

// auditLines decodes the audit stream's JSON lines.
func TestWebFailedLoginsAuditedAndLimited(t *testing.T) {
	var buf bytes.Buffer
	e := newWebEnvWith(t, func(o *Options) {
		o.Audit = auditstream.New(&buf)
		o.FailedLogins, o.FailedLoginEvery = 3, time.Minute
	})
	c := e.browser()
	for i := range 3 {
		resp, body := e.do(c, "POST", "/approvals/login", url.Values{"key": {"wrong-key-" + string(rune('a'+i))}}, nil)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not recognised") {
			t.Fatalf("failed login %d: %d\n%s", i, resp.StatusCode, body)
		}
	}
	// The fourth attempt from the same address is refused before the key
	// is looked at, even the right key: a guesser learns nothing.
	resp, body := e.do(c, "POST", "/approvals/login", url.Values{"key": {"bob-key"}}, nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "too many failed logins") {
		t.Fatalf("over the limit: %d Retry-After=%q\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// A token comes back after the refill interval: the right key works.
	e.now = e.now.Add(time.Minute + time.Second)
	e.login(c, "bob-key")

	lines := approvertest.AuditLines(t, &buf)
	var statuses []float64
	for _, l := range lines {
		if l["event"] != auditstream.EventAuthFailed {
			continue
		}
		if l["channel"] != "web" || l["path"] != "/approvals/login" || l["method"] != "POST" {
			t.Errorf("auth_failed line %v", l)
		}
		statuses = append(statuses, l["status"].(float64))
	}
	if want := []float64{401, 401, 401, 429}; len(statuses) != len(want) || statuses[0] != 401 || statuses[3] != 429 {
		t.Errorf("auth_failed statuses %v, want %v", statuses, want)
	}
	if strings.Contains(buf.String(), "wrong-key") || strings.Contains(buf.String(), "bob-key") {
		t.Errorf("the audit stream holds a key:\n%s", buf.String())
	}
}

// Guesses from another browser behind the same address (a NAT, a proxy)
// lock that address out, but not a browser that has logged in before: its
// owner's right key still works, and its own bad attempts are limited on
// their own.
func TestWebFailedLoginsDoNotLockOutAKnownBrowser(t *testing.T) {
	e := newWebEnvWith(t, func(o *Options) { o.FailedLogins, o.FailedLoginEvery = 3, time.Minute })
	bob := e.browser()
	e.login(bob, "bob-key")
	_, _, token := e.page(bob)
	if resp, body := e.do(bob, "POST", "/approvals/logout", url.Values{"csrf": {token}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d %s", resp.StatusCode, body)
	}

	guesser := e.browser()
	for i := range 3 {
		resp, body := e.do(guesser, "POST", "/approvals/login", url.Values{"key": {"guess-" + string(rune('a'+i))}}, nil)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d\n%s", i, resp.StatusCode, body)
		}
	}
	// The guesser is limited, even with the right key: it learns nothing.
	if resp, body := e.do(guesser, "POST", "/approvals/login", url.Values{"key": {"alice-key"}}, nil); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "too many failed logins") {
		t.Fatalf("guesser over the limit: %d\n%s", resp.StatusCode, body)
	}
	// Bob, from the same address, still gets in with his key.
	e.login(bob, "bob-key")

	// Bob's own bad attempts are limited too, in his browser's bucket.
	for i := range 3 {
		if resp, body := e.do(bob, "POST", "/approvals/login", url.Values{"key": {"typo-" + string(rune('a'+i))}}, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("typo %d: %d\n%s", i, resp.StatusCode, body)
		}
	}
	if resp, body := e.do(bob, "POST", "/approvals/login", url.Values{"key": {"bob-key"}}, nil); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "too many failed logins from this browser") {
		t.Fatalf("known browser over its own limit: %d\n%s", resp.StatusCode, body)
	}
	// A forged device cookie is no way around the address's limit.
	forged := e.browser()
	u, _ := url.Parse(e.srv.URL + "/approvals")
	forged.Jar.SetCookies(u, []*http.Cookie{{Name: "airlock_approvals_device", Value: "eyJwIjoiYm9iIiwiZSI6OTk5OTk5OTk5OSwibiI6IngifQ.AAAA", Path: "/approvals"}})
	if resp, body := e.do(forged, "POST", "/approvals/login", url.Values{"key": {"bob-key"}}, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("forged device cookie: %d\n%s", resp.StatusCode, body)
	}
}

func TestWebFormAddressReloadShowsThePage(t *testing.T) {
	e := newWebEnv(t)
	for _, p := range []string{"/approvals/login", "/approvals/decide", "/approvals/logout/"} {
		resp, body := e.do(e.browser(), "GET", p, nil, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/approvals" {
			t.Errorf("GET %s: %d Location=%q\n%s", p, resp.StatusCode, resp.Header.Get("Location"), body)
		}
	}
	if resp, _ := e.do(e.browser(), "PUT", "/approvals/login", url.Values{}, nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("PUT /approvals/login: %d", resp.StatusCode)
	}
}

func TestWebTellsAPrincipalInNoGroup(t *testing.T) {
	e := newWebEnvWith(t, func(o *Options) {
		o.Groups = map[string][]string{"ops": {"bob", "carol"}}
	})
	m := e.browser()
	e.login(m, "mallory-key")
	_, body, _ := e.page(m)
	if !strings.Contains(body, "in no approver group") || strings.Contains(body, "Nothing waits for your decision") {
		t.Errorf("mallory is not told she is in no group:\n%s", body)
	}
	b := e.browser()
	e.login(b, "bob-key")
	_, body, _ = e.page(b)
	if strings.Contains(body, "in no approver group") || !strings.Contains(body, `value="task-1~call-1"`) {
		t.Errorf("bob's page:\n%s", body)
	}
}

func TestWebShowsRequestTimeAndAbsoluteExpiry(t *testing.T) {
	e := newWebEnv(t)
	b := e.browser()
	e.login(b, "bob-key")
	_, body, _ := e.page(b)
	req := e.ft.Reqs[0]
	for _, want := range []string{stamp(req.RequestedAt), "1m ago", stamp(req.ExpiresAt), "in 1h"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
}
