package integration

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// okNotifier stands for a Slack that works: every post succeeds.
type okNotifier struct {
	mu      sync.Mutex
	posts   []api.ApprovalNotice
	updates []api.ApprovalNotice
}

func (o *okNotifier) Name() string { return "slack" }
func (o *okNotifier) Post(_ context.Context, n api.ApprovalNotice) ([]api.MessageRef, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.posts = append(o.posts, n)
	return []api.MessageRef{{Notifier: "slack", Channel: "C0OPS", TS: "1", Group: n.Group}}, nil
}
func (o *okNotifier) Update(_ context.Context, n api.ApprovalNotice) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.updates = append(o.updates, n)
	return nil
}
func (o *okNotifier) Alert(context.Context, api.RollbackNotice) error { return nil }

// TestRecordDeliveriesHistory (issue 25 §10, §8): with a working Slack
// beside a webhook bridge answering 500, the webhook delivery is not lost:
// the request says it is retrying, Temporal retries it with backoff until
// it gets through, and the request then says delivered. The bridge's
// approval with edited arguments that a rule denies is answered, and
// closed on both channels, as refused with nothing run. With -record it
// writes approvals_v2_run1.json (changeDeliveries, changeEditOutcome,
// changeEditDiff).
func TestRecordDeliveriesHistory(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, `  put:
    side_effects: [write]
    data_access_level: internal
    risk: high
    idempotent: true
    redact: [key]
    approval: {group: ops, timeout: 1h}
`)
	const secret = "bridge-shared-secret"
	br := &bridge{t: t, secret: secret, failFirst: 2, failCode: http.StatusInternalServerError}
	bsrv := httptest.NewServer(br)
	t.Cleanup(bsrv.Close)
	ch := webhook.Channel{Name: "teams", URL: bsrv.URL, Secret: secret, Groups: []string{"ops"}}
	slack := &okNotifier{}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, policy: &policy.Config{Rules: []policy.Rule{
		{Name: "no-secrets", When: `args.?key.orValue("") == "secret"`, Effect: api.Deny, Reason: "secrets stay out of tools"},
	}}, groups: map[string][]string{"ops": {"bob"}},
		notifiers: []activities.Notifier{slack, webhook.NewNotifier(ch, nil)}})
	decisions := httptest.NewServer(webhook.Decisions(webhook.DecisionOptions{
		Channels: []webhook.Channel{ch}, Local: approver.Local{Temporal: s.client, Namespace: s.srv.Namespace()}}))
	t.Cleanup(decisions.Close)
	waitTools(t, s.connect(t, nil), "counter__put")
	ctx := context.Background()
	taskID := "record-deliveries"
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 10, IdleTimeout: time.Hour})

	type sent struct {
		res api.CallResult
		err error
	}
	done := make(chan sent, 1)
	go func() {
		req := api.CallRequest{CallID: "c1", Tool: "counter__put", Server: "counter", UpstreamTool: "put",
			Arguments: json.RawMessage(`{"key":"k1"}`), Spec: api.SpecFor(m.Tools["put"])}
		res, err := sendCall(ctx, s, taskID, req)
		done <- sent{res, err}
	}()
	id := taskID + "~c1"

	// Slack got it; the webhook's delivery failed and is being retried.
	var ar api.ApprovalRequest
	waitFor(t, "the webhook delivery shown as retrying", 30*time.Second, func() bool {
		var err error
		ar, err = approver.Lookup(ctx, s.client, id)
		return err == nil && deliveryOf(ar, "webhook:teams").State != ""
	})
	if d := deliveryOf(ar, "webhook:teams"); d.State == api.DeliveryRetrying && !strings.Contains(d.Error, "500") {
		t.Errorf("retrying delivery %+v, want the bridge's 500", d)
	}
	if d := deliveryOf(ar, "slack"); d.State != api.DeliveryDelivered {
		t.Errorf("slack delivery %+v", d)
	}
	ev := br.waitEvent(t, webhook.ApprovalRequested)
	waitFor(t, "the webhook delivery shown as delivered", 30*time.Second, func() bool {
		var err error
		ar, err = approver.Lookup(ctx, s.client, id)
		return err == nil && deliveryOf(ar, "webhook:teams").State == api.DeliveryDelivered
	})
	if d := deliveryOf(ar, "webhook:teams"); d.Since.IsZero() || !strings.Contains(d.Error, "500") {
		t.Errorf("delivered after failures %+v: want when it first failed and why", d)
	}
	br.mu.Lock()
	failed := br.failed
	br.mu.Unlock()
	if failed != 2 {
		t.Errorf("the bridge failed %d deliveries, want 2", failed)
	}

	// The bridge approves with an edit that the rule denies.
	body, _ := json.Marshal(webhook.Decision{Request: ev.Request.ID, Digest: ev.Request.Digest, Approver: "bob", Decision: "approve",
		Arguments: json.RawMessage(`{"key":"secret"}`)})
	hr, _ := http.NewRequest(http.MethodPost, decisions.URL+webhook.DecisionPath, bytes.NewReader(body))
	for k, v := range webhook.Sign(secret, time.Now(), body) {
		hr.Header[k] = v
	}
	hr.Header.Set(webhook.ChannelHeader, "teams")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if msg, _ := out["message"].(string); resp.StatusCode != http.StatusOK || !strings.Contains(msg, "the edit was refused") || !strings.Contains(msg, "nothing ran") {
		t.Errorf("decision answer %d %v, want the edit's refusal", resp.StatusCode, out)
	}
	r := <-done
	if r.err != nil || r.res.Outcome != api.OutcomeDenied {
		t.Fatalf("call: %+v %v", r.res, r.err)
	}
	closed := br.waitEvent(t, webhook.ApprovalClosed)
	if closed.Request == nil || closed.Request.Outcome != "edit_refused" || closed.Request.Edit == nil || !strings.Contains(closed.Request.Edit.Refused, "no-secrets") {
		t.Errorf("approval_closed %+v, want outcome edit_refused", closed.Request)
	}
	waitFor(t, "slack's closing update", 30*time.Second, func() bool {
		slack.mu.Lock()
		defer slack.mu.Unlock()
		return len(slack.updates) > 0
	})
	if u := slack.updates[0]; u.Edit == nil || u.Edit.Refused == "" {
		t.Errorf("slack's closing update %+v, want the edit's refusal", u.Edit)
	}
	if n := sideEffects(t, effects, "put", "secret") + sideEffects(t, effects, "put", "k1"); n != 0 {
		t.Errorf("%d calls ran; the edit was refused", n)
	}

	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, run.GetRunID(), "approvals_v2")
}

func deliveryOf(ar api.ApprovalRequest, notifier string) api.Delivery {
	for _, d := range ar.Deliveries {
		if d.Notifier == notifier {
			return d
		}
	}
	return api.Delivery{}
}
