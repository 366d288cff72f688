package approver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/auditstream"
)

// auditLines decodes the audit stream's JSON lines.
func auditLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestWebFailedLoginsAuditedAndLimited(t *testing.T) {
	var buf bytes.Buffer
	e := newWebEnvWith(t, func(o *WebOptions) {
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

	lines := auditLines(t, &buf)
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
	e := newWebEnvWith(t, func(o *WebOptions) {
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
	req := e.ft.reqs[0]
	for _, want := range []string{stamp(req.RequestedAt), "1m ago", stamp(req.ExpiresAt), "in 1h"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
}
