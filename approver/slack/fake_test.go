package slack

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/internal/testenv"
)

// slackFake is a Slack Web API that records chat.postMessage, chat.update
// and chat.postEphemeral, and can fail the next calls of a method.
type slackFake struct {
	srv *httptest.Server

	mu     sync.Mutex
	calls  []slackCall
	faults map[string][]slackFault
	seq    int
}

type slackCall struct {
	Method string
	Form   url.Values // without the token
	Status int        // what the fake answered
	// JSON is the body of a method slack-go posts as JSON (views.open).
	JSON []byte
}

type slackFault struct {
	status     int
	retryAfter string
	slackErr   string // {"ok":false,"error":...} with 200
}

func newSlackFake(t testing.TB) *slackFake {
	f := &slackFake{faults: map[string][]slackFault{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *slackFake) url() string { return f.srv.URL + "/" }

func (f *slackFake) client() *slack.Client {
	return slack.New("xoxb-test-token", slack.OptionAPIURL(f.url()))
}

// fail makes the next calls of method fail, one fault per call.
func (f *slackFake) fail(method string, faults ...slackFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[method] = append(f.faults[method], faults...)
}

func (f *slackFake) serve(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/")
	var body []byte
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		body, _ = io.ReadAll(r.Body)
	}
	_ = r.ParseForm()
	form := url.Values{}
	for k, v := range r.Form {
		if k != "token" {
			form[k] = v
		}
	}
	f.mu.Lock()
	call := slackCall{Method: method, Form: form, Status: http.StatusOK, JSON: body}
	var flt *slackFault
	if q := f.faults[method]; len(q) > 0 {
		flt = &q[0]
		f.faults[method] = q[1:]
	}
	f.seq++
	ts := fmt.Sprintf("%d.%06d", time.Now().Unix(), f.seq)
	if flt != nil && flt.status != 0 {
		call.Status = flt.status
	}
	f.calls = append(f.calls, call)
	f.mu.Unlock()

	if flt != nil && flt.status != 0 {
		if flt.retryAfter != "" {
			w.Header().Set("Retry-After", flt.retryAfter)
		}
		w.WriteHeader(flt.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if flt != nil && flt.slackErr != "" {
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": flt.slackErr})
		return
	}
	switch method {
	case "chat.postMessage":
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": form.Get("channel"), "ts": ts})
	case "chat.update":
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": form.Get("channel"), "ts": form.Get("ts"), "text": form.Get("text")})
	case "views.open":
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "view": map[string]any{"id": "V_EDIT", "type": "modal"}})
	case "chat.postEphemeral":
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "message_ts": ts})
	case "auth.test":
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "team": "Example", "team_id": "T1", "user": "airlock", "user_id": "U_AIRLOCK", "bot_id": "B1"})
	case "apps.connections.open":
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "url": "wss://example.invalid/link"})
	case "conversations.info":
		ch, ok := slackFakeChannels[form.Get("channel")]
		if !ok {
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "channel_not_found"})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": ch})
	case "users.info":
		u, ok := slackFakeUsers[form.Get("user")]
		if !ok {
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "user_not_found"})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "user": u})
	default:
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "unknown_method"})
	}
}

// ok returns the successful calls of method.
func (f *slackFake) ok(method string) []slackCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []slackCall
	for _, c := range f.calls {
		if c.Method == method && c.Status == http.StatusOK {
			out = append(out, c)
		}
	}
	return out
}

func (f *slackFake) all() []slackCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]slackCall(nil), f.calls...)
}

// waitFor waits (testenv.WaitFor) until n successful calls of method were made.
func (f *slackFake) waitFor(t testing.TB, method string, n int) []slackCall {
	t.Helper()
	var got []slackCall
	testenv.WaitFor(t, fmt.Sprintf("%d successful Slack %s calls", n, method), 20*time.Second, func() bool {
		got = f.ok(method)
		return len(got) >= n
	})
	return got
}

// blocks decodes the call's Block Kit blocks.
func (c slackCall) blocks(t testing.TB) []map[string]any {
	t.Helper()
	var b []map[string]any
	if err := json.Unmarshal([]byte(c.Form.Get("blocks")), &b); err != nil {
		t.Fatalf("blocks of %s: %v (%q)", c.Method, err, c.Form.Get("blocks"))
	}
	return b
}

// shown is the call's text and blocks as one string, JSON without HTML
// escapes, for looking for what people would read.
func (c slackCall) shown(t testing.TB) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if blocks := c.Form.Get("blocks"); blocks != "" {
		if err := enc.Encode(c.blocks(t)); err != nil {
			t.Fatal(err)
		}
	}
	return c.Form.Get("text") + "\n" + b.String()
}

// actions returns the call's actions block, if any.
func (c slackCall) actions(t testing.TB) map[string]any {
	for _, b := range c.blocks(t) {
		if b["type"] == "actions" {
			return b
		}
	}
	return nil
}

// slackSign signs an interaction body the way Slack does.
func slackSign(secret string, ts time.Time, body string) http.Header {
	stamp := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:%s", stamp, body)
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", stamp)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	return h
}

// slackClickBody is the form body Slack posts when user clicks action on an
// airlock message.
func slackClickBody(user, action, requestID, digest, actionTS string) string {
	p := map[string]any{
		"type":       "block_actions",
		"user":       map[string]any{"id": user, "username": strings.ToLower(user), "team_id": "T1"},
		"api_app_id": "A1",
		"team":       map[string]any{"id": "T1", "domain": "example"},
		"channel":    map[string]any{"id": "C_OPS", "name": "ops"},
		"container":  map[string]any{"type": "message", "message_ts": "1700000000.000100", "channel_id": "C_OPS"},
		"trigger_id": "1.2.abc",
		"actions": []any{map[string]any{
			"type": "button", "action_id": action, "block_id": BlockIDPrefix + digest, "value": requestID,
			"action_ts": actionTS, "text": map[string]any{"type": "plain_text", "text": action},
		}},
	}
	b, _ := json.Marshal(p)
	return "payload=" + url.QueryEscape(string(b))
}

// The fake workspace's channels and users, for conversations.info and
// users.info.
var (
	slackFakeChannels = map[string]map[string]any{
		"C_OPS":  {"id": "C_OPS", "name": "ops", "is_channel": true, "is_member": true},
		"C_OUT":  {"id": "C_OUT", "name": "security", "is_channel": true, "is_member": false},
		"C_GONE": {"id": "C_GONE", "name": "old-ops", "is_channel": true, "is_member": true, "is_archived": true},
	}
	slackFakeUsers = map[string]map[string]any{
		"U_BOB":   {"id": "U_BOB", "name": "bob"},
		"U_CAROL": {"id": "U_CAROL", "name": "carol"},
		"U_BOT":   {"id": "U_BOT", "name": "somebot", "is_bot": true},
		"U_LEFT":  {"id": "U_LEFT", "name": "dave", "deleted": true},
	}
)
