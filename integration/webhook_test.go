package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/approver/webhook"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/manifests"
)

// bridge is a webhook receiver such as a Teams or PagerDuty bridge: it
// checks each delivery's signature and keeps the events; the first
// `failFirst` deliveries get 503.
type bridge struct {
	t         *testing.T
	secret    string
	mu        sync.Mutex
	failFirst int
	// failCode is the status of a failed delivery (0: 503).
	failCode int
	failed   int
	events   []webhook.Event
	bad      int
}

func (b *bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := webhook.Verify(r.Header, body, b.secret, time.Now()); err != nil {
		b.bad++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var ev webhook.Event
	if err := json.Unmarshal(body, &ev); err != nil || r.Header.Get(webhook.EventHeader) != ev.Event || r.Header.Get(webhook.DeliveryHeader) != ev.Delivery {
		b.bad++
		http.Error(w, "bad event", http.StatusBadRequest)
		return
	}
	if b.failFirst > 0 {
		b.failFirst--
		b.failed++
		code := b.failCode
		if code == 0 {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, "bridge warming up", code)
		return
	}
	b.events = append(b.events, ev)
}

func (b *bridge) waitEvent(t *testing.T, event string) webhook.Event {
	t.Helper()
	var got webhook.Event
	waitUntil(t, "the bridge to get a "+event+" event", 30*time.Second, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, ev := range b.events {
			if ev.Event == event {
				got = ev
				return nil
			}
		}
		return fmt.Errorf("events %+v", b.events)
	})
	return got
}

// TestWebhookApprovalChannel runs a call that needs approval with a webhook
// approval channel: the request reaches the bridge signed (after two 503s,
// retried with backoff), with its arguments masked; the bridge's signed
// decision comes back on /approvals/webhook and the call runs once; a
// second, different decision is refused with 409; a bad signature gets 401
// and an auth_failed line; the bridge is told the request closed.
func TestWebhookApprovalChannel(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, appendNeedsOps)
	m.Tools["append"].Redact = []string{"key"}
	dir := allGrants(nil, "alice", "bob", "carol")
	const secret = "bridge-shared-secret"
	br := &bridge{t: t, secret: secret, failFirst: 2}
	bsrv := httptest.NewServer(br)
	t.Cleanup(bsrv.Close)
	ch := webhook.Channel{Name: "teams", URL: bsrv.URL, Secret: secret}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, directory: dir,
		groups: map[string][]string{"ops": {"bob", "carol"}}, inlineWait: 2 * time.Minute,
		notifiers: []activities.Notifier{webhook.NewNotifier(ch, nil)}})
	var audit bytes.Buffer
	alog := auditstream.New(&audit)
	decisions := httptest.NewServer(webhook.Decisions(webhook.DecisionOptions{
		Channels: []webhook.Channel{ch}, Directory: dir,
		Local: approver.Local{Temporal: s.client, Namespace: s.srv.Namespace(), Audit: alog}, Audit: alog}))
	t.Cleanup(decisions.Close)

	cs := connectURL(t, s.url, bearer("alice-key"))
	waitTools(t, cs, "counter__append")
	done := callAsync(cs, "counter__append", map[string]any{"key": "wire-transfer-7"})

	ev := br.waitEvent(t, webhook.ApprovalRequested)
	req := ev.Request
	if req == nil || req.Tool != "counter__append" || req.Principal != "alice" || req.Group != "ops" || req.Digest == "" ||
		ev.Channel != "teams" || ev.DecidePath != webhook.DecisionPath {
		t.Fatalf("event %+v request %+v", ev, req)
	}
	if strings.Contains(string(req.Arguments), "wire-transfer-7") {
		t.Errorf("the bridge saw a masked argument: %s", req.Arguments)
	}

	post := func(secret string, d webhook.Decision) (int, map[string]any) {
		t.Helper()
		body, _ := json.Marshal(d)
		hr, _ := http.NewRequest(http.MethodPost, decisions.URL+webhook.DecisionPath, bytes.NewReader(body))
		for k, v := range webhook.Sign(secret, time.Now(), body) {
			hr.Header[k] = v
		}
		hr.Header.Set(webhook.ChannelHeader, "teams")
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	approve := webhook.Decision{Request: req.ID, Digest: req.Digest, Approver: "bob", Decision: "approve"}
	if code, out := post("wrong-secret", approve); code != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d %v", code, out)
	}
	if code, out := post(secret, webhook.Decision{Request: req.ID, Digest: req.Digest, Approver: "alice", Decision: "approve"}); code != http.StatusConflict ||
		!strings.Contains(out["refused"].(string), "may not approve") {
		t.Fatalf("self-approval: %d %v", code, out)
	}
	if code, out := post(secret, approve); code != http.StatusOK || out["state"] != api.ApprovalApproved {
		t.Fatalf("approve: %d %v", code, out)
	}
	r := <-done
	if r.err != nil || r.res.IsError {
		t.Fatalf("approved call: %v %+v", r.err, r.res)
	}
	if n := sideEffects(t, effects, "append", "wire-transfer-7"); n != 1 {
		t.Fatalf("the approved call ran %d times", n)
	}
	// bob changes his mind: refused, the approval stands.
	if code, out := post(secret, webhook.Decision{Request: req.ID, Digest: req.Digest, Approver: "bob", Decision: "deny"}); code != http.StatusConflict {
		t.Errorf("second, different decision: %d %v", code, out)
	}
	closed := br.waitEvent(t, webhook.ApprovalClosed)
	if closed.Request == nil || closed.Request.State != api.ApprovalApproved || len(closed.Request.Votes) != 1 || closed.Request.Votes[0].Approver != "bob" {
		t.Errorf("closed event %+v", closed.Request)
	}
	br.mu.Lock()
	bad := br.bad
	br.mu.Unlock()
	if bad != 0 {
		t.Errorf("%d deliveries to the bridge had a bad signature or shape", bad)
	}
	var authFailed, decided int
	for _, line := range strings.Split(strings.TrimSpace(audit.String()), "\n") {
		var m map[string]any
		_ = json.Unmarshal([]byte(line), &m)
		switch m["event"] {
		case auditstream.EventAuthFailed:
			authFailed++
			if m["channel"] != "webhook" || m["status"] != 401.0 {
				t.Errorf("auth_failed %v", m)
			}
		case "approval_decided":
			if m["via"] == "webhook:teams" && m["decision"] == "approve" && m["state"] == api.ApprovalApproved {
				decided++
			}
		}
	}
	if authFailed != 1 || decided != 1 {
		t.Errorf("audit: %d auth_failed, %d approvals via webhook:teams; want 1 and 1\n%s", authFailed, decided, audit.String())
	}
}
