package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
)

const slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"

const slackRequest = "task-1a2b~call-3c4d"

func slackTestUsers() *identity.Directory {
	return identity.New(&config.Config{Principals: []config.Principal{
		{Name: "alice", Roles: []string{"r"}, SlackUserID: "U_ALICE"},
		{Name: "bob", Roles: []string{"r"}, SlackUserID: "U_BOB"},
	}})
}

// slackDelivery records the decisions a handler delivered.
type slackDelivery struct {
	mu    sync.Mutex
	calls []slackDeliverCall
	// answer, when set, decides what Deliver returns.
	answer func(ctx context.Context, id string, d api.DecideRequest) (api.DecideResult, error)
}

type slackDeliverCall struct {
	UpdateID string
	Decision api.DecideRequest
}

func (d *slackDelivery) deliver(ctx context.Context, id string, dr api.DecideRequest) (api.DecideResult, error) {
	d.mu.Lock()
	d.calls = append(d.calls, slackDeliverCall{id, dr})
	answer := d.answer
	d.mu.Unlock()
	if answer != nil {
		return answer(ctx, id, dr)
	}
	return api.DecideResult{RequestID: dr.RequestID, State: api.ApprovalApproved, Message: "approved: 1 of 1 approvals"}, nil
}

func (d *slackDelivery) got() []slackDeliverCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]slackDeliverCall(nil), d.calls...)
}

func newSlackHandler(t *testing.T, f *slackFake, d *slackDelivery) *Interactions {
	t.Helper()
	return newAuditedSlackHandler(t, f, d, nil)
}

// newAuditedSlackHandler is newSlackHandler writing its audit lines to
// audit (nil: none).
func newAuditedSlackHandler(t *testing.T, f *slackFake, d *slackDelivery, audit *bytes.Buffer) *Interactions {
	t.Helper()
	o := InteractionOptions{
		SigningSecret: slackSecret, Slack: f.client(), Users: slackTestUsers(), Deliver: d.deliver,
		Timeout: 5 * time.Second, Logger: zerolog.New(zerolog.NewTestWriter(t)),
	}
	if audit != nil {
		o.Audit = auditstream.New(audit)
	}
	h := InteractionHandler(o)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func postSlack(h http.Handler, body string, header http.Header) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/slack/interactions", strings.NewReader(body))
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestInteractionSignature(t *testing.T) {
	f := newSlackFake(t)
	d := &slackDelivery{}
	var audit bytes.Buffer
	h := newAuditedSlackHandler(t, f, d, &audit)
	body := slackClickBody("U_BOB", "approve", slackRequest, slackDigest, "1700000000.000001")
	now := time.Now()
	noSig := slackSign(slackSecret, now, body)
	noSig.Del("X-Slack-Signature")
	noTS := slackSign(slackSecret, now, body)
	noTS.Del("X-Slack-Request-Timestamp")
	badHex := slackSign(slackSecret, now, body)
	badHex.Set("X-Slack-Signature", "v0=zz")
	cases := []struct {
		name   string
		body   string
		header http.Header
		code   int
	}{
		{"valid", body, slackSign(slackSecret, now, body), http.StatusOK},
		{"wrong secret", body, slackSign("another-secret", now, body), http.StatusUnauthorized},
		{"stale timestamp", body, slackSign(slackSecret, now.Add(-6*time.Minute), body), http.StatusUnauthorized},
		{"future timestamp", body, slackSign(slackSecret, now.Add(6*time.Minute), body), http.StatusUnauthorized},
		{"tampered body", strings.Replace(body, "U_BOB", "U_ALICE", 1), slackSign(slackSecret, now, body), http.StatusUnauthorized},
		{"tampered value", strings.Replace(body, "call-3c4d", "call-9999", 1), slackSign(slackSecret, now, body), http.StatusUnauthorized},
		{"missing signature", body, noSig, http.StatusUnauthorized},
		{"missing timestamp", body, noTS, http.StatusUnauthorized},
		{"malformed signature", body, badHex, http.StatusUnauthorized},
		{"no headers", body, http.Header{}, http.StatusUnauthorized},
		{"signed but no payload", "foo=bar", slackSign(slackSecret, now, "foo=bar"), http.StatusBadRequest},
		{"signed but not JSON", "payload=%7Bnope", slackSign(slackSecret, now, "payload=%7Bnope"), http.StatusBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if w := postSlack(h, c.body, c.header); w.Code != c.code {
				t.Errorf("status %d, want %d (%s)", w.Code, c.code, w.Body)
			}
		})
	}
	h.Wait()
	if got := d.got(); len(got) != 1 {
		t.Errorf("delivered %d decisions, want only the valid one: %+v", len(got), got)
	}
	// Each request refused for its signature left one auth_failed line on
	// channel slack, with the reason and never the body.
	failed := 0
	for _, l := range approvertest.AuditLines(t, &audit) {
		if l["event"] != auditstream.EventAuthFailed {
			continue
		}
		failed++
		if b, _ := json.Marshal(l); strings.Contains(string(b), "U_BOB") || strings.Contains(string(b), "payload") {
			t.Errorf("auth_failed line holds the body: %s", b)
		}
		if l["channel"] != "slack" || l["status"] != 401.0 || !strings.Contains(l["reason"].(string), "Slack signature") {
			t.Errorf("auth_failed line %v", l)
		}
	}
	if failed != 9 {
		t.Errorf("%d auth_failed lines, want 9 (one per refused signature)", failed)
	}

	// Not POST; too large.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/slack/interactions", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", w.Code)
	}
	big := "payload=" + strings.Repeat("x", MaxInteractionBody+1)
	if w := postSlack(h, big, slackSign(slackSecret, now, big)); w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d", w.Code)
	}
}

func TestClickDeliversDecision(t *testing.T) {
	f := newSlackFake(t)
	d := &slackDelivery{}
	h := newSlackHandler(t, f, d)
	approve := slackClickBody("U_BOB", "approve", slackRequest, slackDigest, "1700000000.000001")
	deny := slackClickBody("U_BOB", "deny", slackRequest, slackDigest, "1700000000.000002")
	for _, b := range []string{approve, deny, approve} { // the approve payload redelivered
		if w := postSlack(h, b, slackSign(slackSecret, time.Now(), b)); w.Code != http.StatusOK {
			t.Fatalf("status %d", w.Code)
		}
		h.Wait() // deliveries run in the background: keep their order
	}
	got := d.got()
	if len(got) != 2 { // the redelivered approve was answered already
		t.Fatalf("delivered %+v", got)
	}
	want := api.DecideRequest{RequestID: slackRequest, Digest: slackDigest, Approver: "bob", Approve: true, Via: "slack"}
	if got[0].Decision != want || got[0].UpdateID != "slack:1700000000.000001:U_BOB" {
		t.Errorf("approve delivered %+v, want %+v with update ID slack:1700000000.000001:U_BOB", got[0], want)
	}
	want.Approve = false
	if got[1].Decision != want || got[1].UpdateID == got[0].UpdateID {
		t.Errorf("deny delivered %+v", got[1])
	}
	eph := f.waitFor(t, "chat.postEphemeral", 2)
	if eph[0].Form.Get("user") != "U_BOB" || eph[0].Form.Get("channel") != "C_OPS" || !strings.Contains(eph[0].Form.Get("text"), "was recorded") {
		t.Errorf("confirmation %+v", eph[0].Form)
	}
}

func TestAckBeforeDecisionIsDelivered(t *testing.T) {
	f := newSlackFake(t)
	started := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	d := &slackDelivery{answer: func(ctx context.Context, _ string, dr api.DecideRequest) (api.DecideResult, error) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
			return api.DecideResult{}, ctx.Err()
		}
		note("delivered")
		return api.DecideResult{RequestID: dr.RequestID, State: "approved", Message: "approved"}, nil
	}}
	h := newSlackHandler(t, f, d)
	body := slackClickBody("U_BOB", "approve", slackRequest, slackDigest, "1700000000.000001")
	acked := make(chan int, 1)
	go func() {
		w := postSlack(h, body, slackSign(slackSecret, time.Now(), body))
		note("acked")
		acked <- w.Code
	}()
	select {
	case code := <-acked:
		if code != http.StatusOK {
			t.Fatalf("ack %d", code)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the handler did not answer while the decision was still being delivered")
	}
	<-started // the delivery is under way, and blocked
	close(release)
	h.Wait()
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, ",") != "acked,delivered" {
		t.Errorf("order %v, want the socketAck before the slackDelivery completed", order)
	}
}

func TestClickRefusals(t *testing.T) {
	f := newSlackFake(t)
	d := &slackDelivery{answer: func(_ context.Context, _ string, dr api.DecideRequest) (api.DecideResult, error) {
		if dr.Approver == "alice" {
			// What Deliver returns when the decide validator refuses.
			return api.DecideResult{}, fmt.Errorf("decision on %s not recorded: %w", dr.RequestID,
				temporal.NewApplicationError("alice asked for this call and may not approve it", ""))
		}
		return api.DecideResult{}, fmt.Errorf("decision on %s not recorded: %w", dr.RequestID, context.DeadlineExceeded)
	}}
	h := newSlackHandler(t, f, d)
	send := func(body string) {
		t.Helper()
		if w := postSlack(h, body, slackSign(slackSecret, time.Now(), body)); w.Code != http.StatusOK {
			t.Fatalf("status %d", w.Code)
		}
		h.Wait()
	}
	lastEphemeral := func(n int) slackCall {
		t.Helper()
		return f.waitFor(t, "chat.postEphemeral", n)[n-1]
	}

	send(slackClickBody("U_STRANGER", "approve", slackRequest, slackDigest, "1.1"))
	if e := lastEphemeral(1); e.Form.Get("user") != "U_STRANGER" || !strings.Contains(e.Form.Get("text"), "you are not a known approver") {
		t.Errorf("unknown user told %+v", e.Form)
	}
	if len(d.got()) != 0 {
		t.Fatalf("delivered a stranger's click: %+v", d.got())
	}

	send(slackClickBody("U_ALICE", "approve", slackRequest, slackDigest, "1.2"))
	if e := lastEphemeral(2); e.Form.Get("user") != "U_ALICE" || !strings.Contains(e.Form.Get("text"), "may not approve it") {
		t.Errorf("self-approval told %q", e.Form.Get("text"))
	}

	send(slackClickBody("U_BOB", "approve", slackRequest, slackDigest, "1.3"))
	if e := lastEphemeral(3); !strings.Contains(e.Form.Get("text"), "did not answer in time") {
		t.Errorf("timeout told %q", e.Form.Get("text"))
	}

	send(slackClickBody("U_BOB", "approve", "not-a-request", slackDigest, "1.4"))
	if e := lastEphemeral(4); !strings.Contains(e.Form.Get("text"), "does not name an airlock approval request") {
		t.Errorf("bad value told %q", e.Form.Get("text"))
	}
	send(slackClickBody("U_BOB", "approve", slackRequest, "abc", "1.5"))
	if e := lastEphemeral(5); !strings.Contains(e.Form.Get("text"), "digest") {
		t.Errorf("bad digest told %q", e.Form.Get("text"))
	}
	if n := len(d.got()); n != 2 {
		t.Errorf("delivered %d, want 2 (alice's and bob's)", n)
	}

	// Not an airlock button: acknowledged, ignored.
	before := len(f.all())
	other := strings.Replace(slackClickBody("U_BOB", "approve", slackRequest, slackDigest, "1.6"), "airlock%3A", "other%3A", 1)
	send(other)
	view := "payload=" + `%7B%22type%22%3A%22view_submission%22%7D`
	send(view)
	if len(f.all()) != before || len(d.got()) != 2 {
		t.Errorf("acted on a foreign interaction: %+v", f.all()[before:])
	}
}

func TestShutdownWaitsForDeliveries(t *testing.T) {
	f := newSlackFake(t)
	release := make(chan struct{})
	d := &slackDelivery{answer: func(ctx context.Context, _ string, dr api.DecideRequest) (api.DecideResult, error) {
		<-release
		return api.DecideResult{RequestID: dr.RequestID, State: "pending", Message: "pending: 1 of 2 approvals"}, nil
	}}
	h := newSlackHandler(t, f, d)
	body := slackClickBody("U_BOB", "approve", slackRequest, slackDigest, "1.1")
	postSlack(h, body, slackSign(slackSecret, time.Now(), body))
	done := make(chan error, 1)
	go func() { done <- h.Shutdown(context.Background()) }()
	select {
	case <-done:
		t.Fatal("Shutdown returned with a slackDelivery in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if e := f.waitFor(t, "chat.postEphemeral", 1)[0]; !strings.Contains(e.Form.Get("text"), "1 of 2") {
		t.Errorf("confirmation %q", e.Form.Get("text"))
	}
	// After shutdown, clicks are acknowledged and dropped.
	postSlack(h, body, slackSign(slackSecret, time.Now(), body))
	if len(d.got()) != 1 {
		t.Errorf("delivered after shutdown")
	}
}

// TestRedeliveredClickOnce: Slack redelivers a payload it thinks was not
// acknowledged; Temporal deduplicates the Update, and the approver must not
// audit or confirm it again. A delivery that did not reach the task is
// retried by the redelivery.
func TestRedeliveredClickOnce(t *testing.T) {
	f := newSlackFake(t)
	d := &slackDelivery{}
	var audit bytes.Buffer
	h := newAuditedSlackHandler(t, f, d, &audit)
	approve := slackClickBody("U_BOB", "approve", slackRequest, slackDigest, "1700000000.000001")
	for range 3 {
		if w := postSlack(h, approve, slackSign(slackSecret, time.Now(), approve)); w.Code != http.StatusOK {
			t.Fatalf("status %d", w.Code)
		}
	}
	h.Wait()
	if got := d.got(); len(got) != 1 {
		t.Errorf("delivered %d times, want 1", len(got))
	}
	if n := len(f.ok("chat.postEphemeral")); n != 1 {
		t.Errorf("%d ephemeral confirmations, want 1", n)
	}
	if n := strings.Count(audit.String(), "approval_decided"); n != 1 {
		t.Errorf("%d approval_decided lines, want 1:\n%s", n, audit.String())
	}

	// A delivery that failed to reach the task is delivered again.
	d.mu.Lock()
	d.answer = func(context.Context, string, api.DecideRequest) (api.DecideResult, error) {
		return api.DecideResult{}, errors.New("connection refused")
	}
	d.mu.Unlock()
	deny := slackClickBody("U_BOB", "deny", slackRequest, slackDigest, "1700000000.000002")
	for range 2 {
		postSlack(h, deny, slackSign(slackSecret, time.Now(), deny))
		h.Wait()
	}
	if got := d.got(); len(got) != 3 {
		t.Errorf("delivered %d times, want the failed deny retried (3 in all)", len(got))
	}
}

// TestClickAnsweredWithAnotherVote: a result that is not the clicked vote
// (Temporal answered an earlier decision) is reported and audited as a
// refusal, not as "recorded".
func TestClickAnsweredWithAnotherVote(t *testing.T) {
	f := newSlackFake(t)
	d := &slackDelivery{answer: func(_ context.Context, _ string, dr api.DecideRequest) (api.DecideResult, error) {
		return api.DecideResult{RequestID: dr.RequestID, State: api.ApprovalApproved, Message: "approved: 1 of 1 approvals", Approver: dr.Approver, Approve: true}, nil
	}}
	var audit bytes.Buffer
	h := newAuditedSlackHandler(t, f, d, &audit)
	deny := slackClickBody("U_BOB", "deny", slackRequest, slackDigest, "1700000000.000009")
	postSlack(h, deny, slackSign(slackSecret, time.Now(), deny))
	h.Wait()
	eph := f.ok("chat.postEphemeral")
	if len(eph) != 1 || !strings.Contains(eph[0].Form.Get("text"), "was not recorded") || !strings.Contains(eph[0].Form.Get("text"), "already approved") {
		t.Errorf("ephemerals %+v", eph)
	}
	if !strings.Contains(audit.String(), "approval_refused") || strings.Contains(audit.String(), "approval_decided") {
		t.Errorf("audit:\n%s", audit.String())
	}
}

// TestDeliverNoSuchTask: a decision on a task that has ended, or never
// existed, is the task's answer (audited as refused), not a failure to
// reach it (approver's test of the name checks the wording).
func TestDeliverNoSuchTask(t *testing.T) {
	ft := &approvertest.FakeTemporal{Ended: map[string]bool{"task-8": true}}
	ctx := context.Background()
	for _, id := range []string{"task-9~call-1", "task-8~call-1"} {
		d := api.DecideRequest{RequestID: id, Approver: "bob", Approve: true, Via: "slack"}
		if _, err := approver.Deliver(ctx, ft, "slack:1:U", d); !refusal(err) {
			t.Errorf("%s: %v is not taken for the task's answer", id, err)
		}
	}
}
