package integration

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	approverslack "github.com/airlock-run/airlock/approver/slack"
	"github.com/airlock-run/airlock/manifests"
)

// slackSecret is the fake Slack app's signing secret.
const slackSecret = "e2e-signing-secret-0123456789abcdef"

// fakeSlackAPI is a Slack Web API (httptest) that records
// chat.postMessage, chat.update and chat.postEphemeral and can fail the next
// calls of a method with 429 (Retry-After) or 5xx, so the real slack-go
// client and the real retry path run.
type fakeSlackAPI struct {
	srv *httptest.Server

	mu     sync.Mutex
	calls  []slackAPICall
	faults map[string][]slackAPIFault
	seq    int
}

type slackAPICall struct {
	Method string
	Form   url.Values // without the token
	Status int
	At     time.Time
	// JSON is the body of a method slack-go posts as JSON (views.open).
	JSON []byte
}

type slackAPIFault struct {
	status     int
	retryAfter string
}

func newFakeSlackAPI(t testing.TB) *fakeSlackAPI {
	f := &fakeSlackAPI{faults: map[string][]slackAPIFault{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSlackAPI) client() *slack.Client {
	return slack.New("xoxb-e2e", slack.OptionAPIURL(f.srv.URL+"/"))
}

func (f *fakeSlackAPI) fail(method string, faults ...slackAPIFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[method] = append(f.faults[method], faults...)
}

func (f *fakeSlackAPI) serve(w http.ResponseWriter, r *http.Request) {
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
	f.seq++
	ts := fmt.Sprintf("%d.%06d", time.Now().Unix(), f.seq)
	c := slackAPICall{Method: method, Form: form, Status: http.StatusOK, At: time.Now(), JSON: body}
	var flt *slackAPIFault
	if q := f.faults[method]; len(q) > 0 {
		flt, f.faults[method] = &q[0], q[1:]
		c.Status = flt.status
	}
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	if flt != nil {
		if flt.retryAfter != "" {
			w.Header().Set("Retry-After", flt.retryAfter)
		}
		w.WriteHeader(flt.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	var resp map[string]any
	switch method {
	case "chat.postMessage":
		resp = map[string]any{"ok": true, "channel": form.Get("channel"), "ts": ts}
	case "chat.update":
		resp = map[string]any{"ok": true, "channel": form.Get("channel"), "ts": form.Get("ts")}
	case "chat.postEphemeral":
		resp = map[string]any{"ok": true, "message_ts": ts}
	case "views.open":
		resp = map[string]any{"ok": true, "view": map[string]any{"id": "V" + ts, "type": "modal"}}
	default:
		resp = map[string]any{"ok": false, "error": "unknown_method"}
	}
	_ = json.NewEncoder(w).Encode(resp)
}

// list returns the calls of method; ok keeps the successful ones only.
func (f *fakeSlackAPI) list(method string, ok bool) []slackAPICall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []slackAPICall
	for _, c := range f.calls {
		if c.Method == method && (!ok || c.Status == http.StatusOK) {
			out = append(out, c)
		}
	}
	return out
}

// waitPost waits for the n-th successful chat.postMessage (1-based).
func (f *fakeSlackAPI) waitPost(t testing.TB, n int) slackAPICall {
	t.Helper()
	var got slackAPICall
	waitFor(t, fmt.Sprintf("Slack post #%d", n), 60*time.Second, func() bool {
		posts := f.list("chat.postMessage", true)
		if len(posts) >= n {
			got = posts[n-1]
			return true
		}
		return false
	})
	return got
}

// waitCall waits for a successful call of method matching ok.
func (f *fakeSlackAPI) waitCall(t testing.TB, method, what string, ok func(slackAPICall) bool) slackAPICall {
	t.Helper()
	var got slackAPICall
	waitFor(t, what, 60*time.Second, func() bool {
		for _, c := range f.list(method, true) {
			if ok(c) {
				got = c
				return true
			}
		}
		return false
	})
	return got
}

// ephemeral waits for an ephemeral reply to user containing want.
func (f *fakeSlackAPI) ephemeral(t testing.TB, user, want string) slackAPICall {
	t.Helper()
	return f.waitCall(t, "chat.postEphemeral", fmt.Sprintf("an ephemeral reply to %s saying %q", user, want), func(c slackAPICall) bool {
		return c.Form.Get("user") == user && strings.Contains(c.Form.Get("text"), want)
	})
}

// shown is what people read in a call: its text and blocks (JSON, without
// HTML escapes).
func (c slackAPICall) shown(t testing.TB) string {
	t.Helper()
	var blocks any
	if err := json.Unmarshal([]byte(c.Form.Get("blocks")), &blocks); err != nil {
		t.Fatalf("blocks of %s: %v", c.Method, err)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(blocks)
	return c.Form.Get("text") + "\n" + b.String()
}

// button is what a posted request's actions block carries: the request ID
// (the buttons' only value) and the digest (in the block ID).
type button struct {
	request, digest, channel string
	hasActions               bool
}

func buttonsOf(t testing.TB, c slackAPICall) button {
	t.Helper()
	var blocks []map[string]any
	if err := json.Unmarshal([]byte(c.Form.Get("blocks")), &blocks); err != nil {
		t.Fatal(err)
	}
	b := button{channel: c.Form.Get("channel")}
	for _, blk := range blocks {
		if blk["type"] != "actions" {
			continue
		}
		b.hasActions = true
		id, _ := blk["block_id"].(string)
		b.digest = strings.TrimPrefix(id, approverslack.BlockIDPrefix)
		els, _ := blk["elements"].([]any)
		for _, e := range els {
			m, _ := e.(map[string]any)
			v, _ := m["value"].(string)
			if b.request != "" && v != b.request {
				t.Fatalf("buttons carry different values %q and %q", b.request, v)
			}
			b.request = v
		}
	}
	return b
}

var actionSeq atomic.Int64

// signedClick is the request Slack sends when user clicks action on the
// message: body "payload=<JSON>", signed with "v0:{ts}:{body}".
func signedClick(user, action string, b button, at time.Time) (string, http.Header) {
	ts := fmt.Sprintf("%d.%06d", time.Now().Unix(), actionSeq.Add(1))
	p := map[string]any{
		"type":       "block_actions",
		"user":       map[string]any{"id": user, "username": strings.ToLower(user), "team_id": "T1"},
		"api_app_id": "A1",
		"team":       map[string]any{"id": "T1", "domain": "example"},
		"channel":    map[string]any{"id": b.channel},
		"container":  map[string]any{"type": "message", "message_ts": "1.1", "channel_id": b.channel},
		"trigger_id": "t-" + ts,
		"actions": []any{map[string]any{"type": "button", "action_id": action, "block_id": approverslack.BlockIDPrefix + b.digest,
			"value": b.request, "action_ts": ts}},
	}
	raw, _ := json.Marshal(p)
	body := "payload=" + url.QueryEscape(string(raw))
	return body, slackSignature(slackSecret, at, body)
}

func slackSignature(secret string, at time.Time, body string) http.Header {
	stamp := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:%s", stamp, body)
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", stamp)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	return h
}

// slackEnv is the stack with Slack: the gateway, the worker with the Slack
// notifier posting to the fake, and the interaction endpoint.
type slackEnv struct {
	s       *stack
	api     *fakeSlackAPI
	clicks  string // the interaction endpoint's URL
	h       *approverslack.Interactions
	effects string
	cs      *mcp.ClientSession
	posts   int // successful posts consumed so far
}

func newSlackEnv(t testing.TB) *slackEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test; skipped with -short")
	}
	m, effects := counterManifest(t, appendNeedsOps+`  put:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: true
    approval: {group: leads, quorum: 2, timeout: 10m}
`)
	dir := allGrants(map[string]string{"alice": "U_ALICE", "bob": "U_BOB", "carol": "U_CAROL", "dave": "U_DAVE", "eve": "U_EVE"},
		"alice", "bob", "carol", "dave", "eve")
	fake := newFakeSlackAPI(t)
	notifier := approverslack.NewNotifier(fake.client(), map[string]string{"ops": "C_OPS", "leads": "C_LEADS"})
	// alice is in ops too, so only the self-approval rule stops her.
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir, inlineWait: 2 * time.Minute,
		groups:    map[string][]string{"ops": {"alice", "bob", "carol", "dave"}, "leads": {"bob", "carol", "dave"}},
		notifiers: []activities.Notifier{notifier}})
	h := approverslack.InteractionHandler(approverslack.InteractionOptions{
		SigningSecret: slackSecret, Slack: fake.client(), Users: dir, Temporal: s.client,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	mux := http.NewServeMux()
	mux.Handle("/slack/interactions", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		_ = h.Close()
	})
	cs := connectURL(t, s.url, bearer("alice-key"))
	waitTools(t, cs, "counter__append", "counter__put")
	return &slackEnv{s: s, api: fake, clicks: srv.URL + "/slack/interactions", h: h, effects: effects, cs: cs}
}

// nextPost waits for the next request message posted to Slack.
func (e *slackEnv) nextPost(t testing.TB) (slackAPICall, button) {
	t.Helper()
	e.posts++
	p := e.api.waitPost(t, e.posts)
	return p, buttonsOf(t, p)
}

// send posts a (signed) interaction and returns the status.
func (e *slackEnv) send(t testing.TB, body string, h http.Header) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.clicks, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("posting a click: %v", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// click sends an authentic click and checks it is acknowledged.
func (e *slackEnv) click(t testing.TB, user, action string, b button) {
	t.Helper()
	body, h := signedClick(user, action, b, time.Now())
	if code := e.send(t, body, h); code != http.StatusOK {
		t.Fatalf("%s's click answered %d, want 200", user, code)
	}
}

func (e *slackEnv) lookup(t testing.TB, id string) api.ApprovalRequest {
	t.Helper()
	r, err := approver.Lookup(context.Background(), e.s.client, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *slackEnv) ran(t testing.TB, tool, key string) int {
	t.Helper()
	return countEffects(t, e.effects, tool, key)
}

func countEffects(t testing.TB, path, tool, key string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if line == tool+" "+key {
			n++
		}
	}
	return n
}

func result(t testing.TB, ch <-chan asyncResult) *mcp.CallToolResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("call failed: %v", r.err)
		}
		return r.res
	case <-time.After(90 * time.Second):
		t.Fatal("the call did not return within 90s of the decision")
		return nil
	}
}

// TestSlackApprovals runs approvals through Slack end to end: the real
// embedded Temporal, worker and gateway, the real slack-go client against a
// fake Slack Web API, and signed interaction payloads on the real
// interaction endpoint.
func TestSlackApprovals(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)

	t.Run("approve runs the tool once and updates the message", func(t *testing.T) {
		call := callAsync(e.cs, "counter__append", map[string]any{"key": "slack-approve-7f3a"})
		p, b := e.nextPost(t)
		shown := p.shown(t)
		if b.channel != "C_OPS" || !b.hasActions || !strings.Contains(b.request, "~") || len(b.digest) != 64 {
			t.Fatalf("posted %+v", b)
		}
		if strings.Contains(shown, "slack-approve-7f3a") || !strings.Contains(shown, approverslack.Mask) {
			t.Errorf("the redacted key is shown: %s", shown)
		}
		for _, want := range []string{"counter__append", "alice", "high", "internal", "write", "Approve", "Deny"} {
			if !strings.Contains(shown, want) {
				t.Errorf("the request lacks %q", want)
			}
		}
		// The task records where it posted (once the activity returns).
		waitFor(t, "the posted message recorded with the request", 30*time.Second, func() bool {
			r := e.lookup(t, b.request)
			return len(r.Messages) == 1
		})
		req := e.lookup(t, b.request)
		if req.Digest != b.digest || req.State != api.ApprovalPending || req.Messages[0].Channel != "C_OPS" || req.Messages[0].Notifier != "slack" {
			t.Errorf("request %+v", req)
		}

		body, h := signedClick("U_BOB", "approve", b, time.Now())
		if code := e.send(t, body, h); code != http.StatusOK {
			t.Fatalf("click: %d", code)
		}
		res := result(t, call)
		if res.IsError {
			t.Fatalf("approved call failed: %s", text(res))
		}
		if n := e.ran(t, "append", "slack-approve-7f3a"); n != 1 {
			t.Fatalf("the tool ran %d times, want 1", n)
		}
		up := e.api.waitCall(t, "chat.update", "the message updated", func(c slackAPICall) bool {
			return c.Form.Get("channel") == "C_OPS" && strings.Contains(c.shown(t), b.request)
		})
		upShown := up.shown(t)
		for _, want := range []string{"Approved: counter__append", "*bob* approved via slack", "1 of 1 approvals"} {
			if !strings.Contains(upShown, want) {
				t.Errorf("the updated message lacks %q:\n%s", want, upShown)
			}
		}
		if buttonsOf(t, up).hasActions {
			t.Error("the decided message still has buttons")
		}
		e.api.ephemeral(t, "U_BOB", "was recorded")

		// The same payload, replayed within Slack's five minutes: authentic,
		// so acknowledged, but the task counts the click once.
		if code := e.send(t, body, h); code != http.StatusOK {
			t.Fatalf("replay: %d", code)
		}
		e.h.Wait()
		if r := e.lookup(t, b.request); len(r.Votes) != 1 || r.State != api.ApprovalApproved {
			t.Errorf("after the replay: %d votes, state %s", len(r.Votes), r.State)
		}
		// A new click on the closed request is refused, and said why.
		e.click(t, "U_CAROL", "approve", b)
		e.api.ephemeral(t, "U_CAROL", "is already approved")
		e.h.Wait() // the refused click's handling is over
		if n := e.ran(t, "append", "slack-approve-7f3a"); n != 1 {
			t.Errorf("the tool ran %d times after the replay, want 1", n)
		}
	})

	t.Run("deny returns the reason and runs nothing", func(t *testing.T) {
		call := callAsync(e.cs, "counter__append", map[string]any{"key": "slack-deny"})
		_, b := e.nextPost(t)
		e.click(t, "U_DAVE", "deny", b)
		res := result(t, call)
		if !res.IsError || !strings.Contains(text(res), "dave denied counter__append") {
			t.Fatalf("denied call: isError=%v %q", res.IsError, text(res))
		}
		up := e.api.waitCall(t, "chat.update", "the denied message updated", func(c slackAPICall) bool {
			return strings.Contains(c.shown(t), b.request)
		})
		if s := up.shown(t); !strings.Contains(s, "Denied: counter__append") || !strings.Contains(s, "*dave* denied via slack") {
			t.Errorf("updated message:\n%s", s)
		}
		if n := e.ran(t, "append", "slack-deny"); n != 0 {
			t.Errorf("a denied call ran %d times", n)
		}
	})

	t.Run("refused clicks change nothing", func(t *testing.T) {
		call := callAsync(e.cs, "counter__append", map[string]any{"key": "slack-refusals"})
		_, b := e.nextPost(t)

		// Authentic clicks the task refuses: each clicker is told why.
		e.click(t, "U_ALICE", "approve", b)
		e.api.ephemeral(t, "U_ALICE", "alice asked for this call and may not approve it")
		e.click(t, "U_EVE", "approve", b)
		e.api.ephemeral(t, "U_EVE", `eve is not in approver group "ops"`)
		e.click(t, "U_NOBODY", "approve", b)
		e.api.ephemeral(t, "U_NOBODY", "you are not a known approver")
		changed := b
		changed.digest = strings.Repeat("0", 64)
		e.click(t, "U_BOB", "approve", changed)
		e.api.ephemeral(t, "U_BOB", "digest mismatch")

		// Requests that are not Slack's: 401, nothing delivered.
		body, h := signedClick("U_BOB", "approve", b, time.Now())
		bad := h.Clone()
		bad.Set("X-Slack-Signature", "v0="+strings.Repeat("ab", 32))
		if code := e.send(t, body, bad); code != http.StatusUnauthorized {
			t.Errorf("bad signature: %d", code)
		}
		stale, staleH := signedClick("U_BOB", "approve", b, time.Now().Add(-6*time.Minute))
		if code := e.send(t, stale, staleH); code != http.StatusUnauthorized {
			t.Errorf("stale timestamp: %d", code)
		}
		future, futureH := signedClick("U_BOB", "approve", b, time.Now().Add(6*time.Minute))
		if code := e.send(t, future, futureH); code != http.StatusUnauthorized {
			t.Errorf("future timestamp: %d", code)
		}
		eveBody, eveH := signedClick("U_EVE", "approve", b, time.Now())
		if code := e.send(t, strings.Replace(eveBody, "U_EVE", "U_BOB", 1), eveH); code != http.StatusUnauthorized {
			t.Errorf("tampered body: %d", code)
		}
		wrongSecret, _ := signedClick("U_BOB", "approve", b, time.Now())
		if code := e.send(t, wrongSecret, slackSignature("not-the-secret", time.Now(), wrongSecret)); code != http.StatusUnauthorized {
			t.Errorf("wrong secret: %d", code)
		}

		e.h.Wait()
		r := e.lookup(t, b.request)
		if r.State != api.ApprovalPending || len(r.Votes) != 0 {
			t.Fatalf("after refused clicks: state %s, votes %+v", r.State, r.Votes)
		}
		select {
		case res := <-call:
			t.Fatalf("the call returned before any valid decision: %+v", res)
		default:
		}
		if n := e.ran(t, "append", "slack-refusals"); n != 0 {
			t.Fatalf("the tool ran %d times", n)
		}

		// The refusals left the request decidable.
		e.click(t, "U_CAROL", "approve", b)
		if res := result(t, call); res.IsError {
			t.Fatalf("approved call: %s", text(res))
		}
		if n := e.ran(t, "append", "slack-refusals"); n != 1 {
			t.Errorf("the tool ran %d times, want 1", n)
		}
	})

	t.Run("ten concurrent duplicate clicks execute once", func(t *testing.T) {
		call := callAsync(e.cs, "counter__append", map[string]any{"key": "slack-dupes"})
		_, b := e.nextPost(t)
		body, h := signedClick("U_BOB", "approve", b, time.Now())
		var wg sync.WaitGroup
		codes := make([]int, 10)
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i] = e.send(t, body, h)
			}()
		}
		wg.Wait()
		for i, c := range codes {
			if c != http.StatusOK {
				t.Errorf("duplicate %d: %d", i, c)
			}
		}
		if res := result(t, call); res.IsError {
			t.Fatalf("call: %s", text(res))
		}
		e.h.Wait()
		if n := e.ran(t, "append", "slack-dupes"); n != 1 {
			t.Errorf("the tool ran %d times, want 1", n)
		}
		if r := e.lookup(t, b.request); len(r.Votes) != 1 || r.Votes[0].Approver != "bob" || r.Votes[0].Via != "slack" {
			t.Errorf("votes %+v, want bob's one", r.Votes)
		}
	})

	t.Run("two of three approve", func(t *testing.T) {
		call := callAsync(e.cs, "counter__put", map[string]any{"key": "slack-quorum"})
		_, b := e.nextPost(t)
		if b.channel != "C_LEADS" {
			t.Fatalf("posted to %s, want leads' channel", b.channel)
		}
		e.click(t, "U_BOB", "approve", b)
		e.api.ephemeral(t, "U_BOB", "pending: 1 of 2 approvals")
		if r := e.lookup(t, b.request); r.State != api.ApprovalPending || len(r.Votes) != 1 {
			t.Fatalf("after one approval: %s %+v", r.State, r.Votes)
		}
		if n := e.ran(t, "put", "slack-quorum"); n != 0 {
			t.Fatalf("ran on one approval of two")
		}
		e.click(t, "U_CAROL", "approve", b)
		if res := result(t, call); res.IsError {
			t.Fatalf("call: %s", text(res))
		}
		if n := e.ran(t, "put", "slack-quorum"); n != 1 {
			t.Errorf("the tool ran %d times, want 1", n)
		}
		up := e.api.waitCall(t, "chat.update", "the quorum message updated", func(c slackAPICall) bool {
			return strings.Contains(c.shown(t), b.request)
		})
		for _, want := range []string{"2 of 2 approvals", "*bob* approved", "*carol* approved"} {
			if !strings.Contains(up.shown(t), want) {
				t.Errorf("updated message lacks %q", want)
			}
		}
	})

	t.Run("a 429 storm delays the message, the request stays pending", func(t *testing.T) {
		before := len(e.api.list("chat.postMessage", false))
		e.api.fail("chat.postMessage",
			slackAPIFault{status: http.StatusTooManyRequests, retryAfter: "1"},
			slackAPIFault{status: http.StatusTooManyRequests, retryAfter: "1"},
			slackAPIFault{status: http.StatusServiceUnavailable})
		call := callAsync(e.cs, "counter__append", map[string]any{"key": "slack-storm"})
		// While Slack refuses, the request waits, unposted, and nothing runs.
		waitFor(t, "a rate-limited post", 30*time.Second, func() bool {
			return len(e.api.list("chat.postMessage", false)) > before
		})
		waitFor(t, "the request listed as pending and not yet posted", 30*time.Second, func() bool {
			pending, err := approver.Pending(context.Background(), e.s.client, e.s.srv.Namespace())
			if err != nil {
				return false
			}
			for _, r := range pending {
				if strings.Contains(string(r.Arguments), "slack-storm") {
					return r.State == api.ApprovalPending && len(r.Votes) == 0 && len(r.Messages) == 0
				}
			}
			return false
		})
		if posted := len(e.api.list("chat.postMessage", true)); posted != e.posts {
			t.Fatalf("the message was posted during the storm (%d posts)", posted)
		}
		select {
		case res := <-call:
			t.Fatalf("the call returned during the storm: %+v", res)
		default:
		}
		_, b := e.nextPost(t)
		tries := e.api.list("chat.postMessage", false)[before:]
		if len(tries) != 4 {
			t.Errorf("%d post attempts, want 4 (two 429s, one 503, then success)", len(tries))
		}
		for i := 1; i < len(tries); i++ {
			t.Logf("post attempt %d (%d) after %s", i+1, tries[i-1].Status, tries[i].At.Sub(tries[i-1].At).Round(10*time.Millisecond))
		}
		waitFor(t, "the delivered message recorded with the request", 30*time.Second, func() bool {
			return len(e.lookup(t, b.request).Messages) == 1
		})
		if r := e.lookup(t, b.request); r.State != api.ApprovalPending {
			t.Errorf("after the storm: %s", r.State)
		}
		if n := e.ran(t, "append", "slack-storm"); n != 0 {
			t.Fatalf("ran before a decision")
		}
		e.click(t, "U_BOB", "approve", b)
		if res := result(t, call); res.IsError {
			t.Fatalf("call: %s", text(res))
		}
		if n := e.ran(t, "append", "slack-storm"); n != 1 {
			t.Errorf("the tool ran %d times, want 1", n)
		}
	})
}

// BenchmarkSlackClick measures, on the in-process stack, how long a signed
// Approve click takes to be acknowledged (Slack wants it within 3s) and to
// get the tool executed and its result back to the agent.
func BenchmarkSlackClick(b *testing.B) {
	e := newSlackEnv(b)
	var acks, execs []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		key := fmt.Sprintf("bench-%d", i)
		call := callAsync(e.cs, "counter__append", map[string]any{"key": key})
		_, btn := e.nextPost(b)
		body, h := signedClick("U_BOB", "approve", btn, time.Now())
		b.StartTimer()
		t0 := time.Now()
		if code := e.send(b, body, h); code != http.StatusOK {
			b.Fatalf("click: %d", code)
		}
		acks = append(acks, time.Since(t0))
		res := result(b, call)
		execs = append(execs, time.Since(t0))
		if res.IsError {
			b.Fatalf("call: %s", text(res))
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(pct(acks, 50)), "ack-p50-ms")
	b.ReportMetric(ms(pct(acks, 99)), "ack-p99-ms")
	b.ReportMetric(ms(pct(execs, 50)), "exec-p50-ms")
	b.ReportMetric(ms(pct(execs, 99)), "exec-p99-ms")
}

// clickAt posts an authentic click of user's on b to the Slack
// interactions endpoint at base (an airlock dev or approver process) and
// fails unless it is acknowledged.
func clickAt(t testing.TB, base, user, action string, b button) {
	t.Helper()
	body, hdr := signedClick(user, action, b, time.Now())
	req, _ := http.NewRequest("POST", base+"/slack/interactions", strings.NewReader(body))
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s's %s click on %s: HTTP %d, want 200", user, action, b.request, resp.StatusCode)
	}
}
