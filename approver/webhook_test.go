package approver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
)

// postDecision signs body for ch and serves it with h.
func postDecision(t *testing.T, h http.Handler, ch WebhookChannel, body string) (int, map[string]any) {
	t.Helper()
	r := httptestRequest(body)
	for k, v := range SignWebhook(ch.Secret, time.Now(), []byte(body)) {
		r.Header[k] = v
	}
	r.Header.Set(WebhookChannelHeader, ch.Name)
	w := newRecorder()
	h.ServeHTTP(w, r)
	var out map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	return w.Code, out
}

// TestWebhookChannelServesItsGroups (issue 25 §6): channel teams serves
// ops; a signed decision of it on a request of group sec is refused and
// never delivered, while the same channel decides a request escalated to
// ops.
func TestWebhookChannelServesItsGroups(t *testing.T) {
	now := time.Now()
	sec := testRequest("task-1", now)
	sec.Group, sec.Approvers = "sec", []string{"carol"}
	esc := testRequest("task-2", now)
	esc.Group, esc.Escalated, esc.EscalateTo = "sec", true, "ops"
	ft := &fakeTemporal{reqs: []api.ApprovalRequest{sec, esc}}
	var audit bytes.Buffer
	ch := WebhookChannel{Name: "teams", Secret: "s3cret", Groups: []string{"ops"}}
	h := WebhookDecisions(WebhookDecisionOptions{Channels: []WebhookChannel{ch}, Local: Local{Temporal: ft, Namespace: "default", Audit: auditstream.New(&audit)}})

	code, out := postDecision(t, h, ch, `{"request":"task-1~call-1","digest":"`+sec.Digest+`","approver":"carol","decision":"approve"}`)
	if code != http.StatusConflict || out["recorded"] != false || !strings.Contains(out["refused"].(string), `for group "sec"`) {
		t.Fatalf("decision on a sec request through teams: %d %v, want 409 refused", code, out)
	}
	if n := len(ft.sent()); n != 0 {
		t.Fatalf("%d decisions delivered to the task; the channel does not serve its group", n)
	}
	if !strings.Contains(audit.String(), "refused") {
		t.Errorf("the refusal is not audited: %s", audit.String())
	}
	if code, out := postDecision(t, h, ch, `{"request":"task-2~call-1","digest":"`+esc.Digest+`","approver":"bob","decision":"approve"}`); code != http.StatusOK || out["recorded"] != true {
		t.Fatalf("decision on a request escalated to ops: %d %v", code, out)
	}
}

// TestWebhookShortDigest (issue 25, low): a digest too short to bind to a
// request is the bridge's mistake, a 400 that says so (503 before).
func TestWebhookShortDigest(t *testing.T) {
	ft := &fakeTemporal{reqs: []api.ApprovalRequest{testRequest("task-1", time.Now())}}
	ch := WebhookChannel{Name: "teams", Secret: "s3cret"}
	h := WebhookDecisions(WebhookDecisionOptions{Channels: []WebhookChannel{ch}, Local: Local{Temporal: ft, Namespace: "default"}})
	for _, digest := range []string{"0123", "zzzzzzzzzzzz"} {
		code, out := postDecision(t, h, ch, `{"request":"task-1~call-1","digest":"`+digest+`","approver":"bob","decision":"approve"}`)
		if msg, _ := out["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "at least 8 hex digits") {
			t.Errorf("digest %q: %d %v, want 400 naming the digest", digest, code, out)
		}
	}
	if n := len(ft.sent()); n != 0 {
		t.Fatalf("%d decisions delivered", n)
	}
}

// TestRepeatedDecisionRecordedOnce (issue 25 §9): the same decision made
// again (a replayed webhook delivery, the page submitted twice, the CLI or
// MCP command run again) is reported as already decided, by whom, and
// writes no second approval_decided line.
func TestRepeatedDecisionRecordedOnce(t *testing.T) {
	t.Run("webhook", func(t *testing.T) {
		r := testRequest("task-1", time.Now())
		ft := &fakeTemporal{reqs: []api.ApprovalRequest{r}}
		var audit bytes.Buffer
		ch := WebhookChannel{Name: "teams", Secret: "s3cret"}
		h := WebhookDecisions(WebhookDecisionOptions{Channels: []WebhookChannel{ch}, Local: Local{Temporal: ft, Namespace: "default", Audit: auditstream.New(&audit)}})
		body := `{"request":"task-1~call-1","digest":"` + r.Digest + `","approver":"bob","decision":"approve"}`
		if code, out := postDecision(t, h, ch, body); code != http.StatusOK || out["recorded"] != true {
			t.Fatalf("first delivery: %d %v", code, out)
		}
		for i := range 2 {
			code, out := postDecision(t, h, ch, body)
			msg, _ := out["message"].(string)
			if code != http.StatusOK || out["recorded"] != false || out["already_decided"] != true || !strings.Contains(msg, "bob already approved") ||
				!strings.Contains(msg, "via webhook:teams") {
				t.Fatalf("replay %d: %d %v, want already decided by bob", i+1, code, out)
			}
		}
		if n := strings.Count(audit.String(), `"approval_decided"`); n != 1 {
			t.Fatalf("%d approval_decided lines for one vote:\n%s", n, audit.String())
		}
	})
	for _, via := range []string{"web", "cli", "mcp"} {
		t.Run(via, func(t *testing.T) {
			ft := &fakeTemporal{reqs: []api.ApprovalRequest{testRequest("task-1", time.Now())}}
			var audit bytes.Buffer
			l := Local{Temporal: ft, Namespace: "default", Audit: auditstream.New(&audit)}
			d := Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: false, Via: via, Comment: "no"}
			if _, err := l.Decide(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			_, err := l.Decide(context.Background(), d)
			var ref *Refusal
			if !errors.As(err, &ref) || !ref.Repeat || !strings.Contains(ref.Reason, "bob already denied") || !strings.Contains(ref.Reason, "via "+via) {
				t.Fatalf("repeat: %v, want already decided", err)
			}
			if n := strings.Count(audit.String(), `"approval_decided"`); n != 1 {
				t.Fatalf("%d approval_decided lines for one vote:\n%s", n, audit.String())
			}
		})
	}
	// Two deliveries of one Update ID that both read the request before
	// either recorded (two replicas, a bridge retrying at once): Temporal
	// answers the second with the first outcome, and the nonce tells it.
	t.Run("race", func(t *testing.T) {
		ft := &fakeTemporal{reqs: []api.ApprovalRequest{testRequest("task-1", time.Now())}}
		d := api.DecideRequest{RequestID: "task-1~call-1", Digest: ft.reqs[0].Digest, Approver: "bob", Approve: true, Via: "slack"}
		if _, err := Deliver(context.Background(), ft, "slack:1:U1", d); err != nil {
			t.Fatal(err)
		}
		_, err := Deliver(context.Background(), ft, "slack:1:U1", d)
		var rep *RepeatedError
		if !errors.As(err, &rep) || !strings.Contains(err.Error(), "bob already approved") {
			t.Fatalf("second delivery of one Update ID: %v, want a RepeatedError", err)
		}
	})
}
