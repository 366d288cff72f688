package approver

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

func TestEditedArguments(t *testing.T) {
	r := testRequest("task-1", time.Now())
	for _, tc := range []struct {
		name, submitted, want, err string
		noEdits                    bool
	}{
		{name: "a masked value keeps the call's own", submitted: `{"key":"k2","auth":{"token":"[redacted]"}}`, want: `{"auth":{"token":"s3cret"},"key":"k2"}`},
		{name: "a new secret replaces it", submitted: `{"key":"k1","auth":{"token":"new"}}`, want: `{"auth":{"token":"new"},"key":"k1"}`},
		{name: "unchanged is a plain approval", submitted: "{\n  \"key\": \"k1\", \"auth\": {\"token\": \"[redacted]\"}\n}", want: ""},
		{name: "numbers stay exact", submitted: `{"key":"k1","n":12345678901234567890}`, want: `{"key":"k1","n":12345678901234567890}`},
		{name: "2^53+1 and 19-digit IDs as written", submitted: `{"key":"<k&1>","n":9007199254740993,"m":1234567890123456700}`,
			want: `{"key":"<k&1>","m":1234567890123456700,"n":9007199254740993}`},
		{name: "a number without an exact value", submitted: `{"key":"k1","n":9007199254740993.5}`, err: "$.n cannot be held exactly"},
		{name: "a repeated key", submitted: `{"key":"k1","key":"k2"}`, err: "ambiguous"},
		{name: "not JSON", submitted: `{"key":`, err: "not JSON"},
		{name: "not an object", submitted: `["k1"]`, err: "must be a JSON object"},
		{name: "empty", submitted: ` `, err: "empty"},
		{name: "the tool forbids edits", submitted: `{"key":"k2"}`, noEdits: true, err: "approval.edits: false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := r
			r.NoEdits = tc.noEdits
			got, err := EditedArguments(r, []byte(tc.submitted))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s %v, want %s", got, err, tc.want)
			}
		})
	}
}

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
	r := e.ft.reqs[0]
	resp, _ := e.do(bob, "POST", "/approvals/decide", url.Values{"csrf": {token}, "id": {r.ID}, "digest": {r.Digest},
		"action": {"approve-edits"}, "arguments": {`{"key": "k2", "auth": {"token": "[redacted]"}}`}}, map[string]string{"Origin": e.srv.URL})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("decide: %d", resp.StatusCode)
	}
	sent := e.ft.sent()
	if len(sent) != 1 {
		t.Fatalf("delivered %d updates", len(sent))
	}
	d := sent[0].Args[0].(api.DecideRequest)
	if !d.Approve || d.Arguments != `{"auth":{"token":"s3cret"},"key":"k2"}` || d.Via != "web" ||
		!strings.HasPrefix(sent[0].UpdateID, "web:"+r.ID+":bob:approve:edit-") {
		t.Errorf("delivered %+v as %s", d, sent[0].UpdateID)
	}

	e2 := newWebEnv(t)
	e2.ft.reqs[0].NoEdits = true
	c := e2.browser()
	e2.login(c, "bob-key")
	if _, body, _ := e2.page(c); strings.Contains(body, `name="arguments"`) || !strings.Contains(body, `value="approve"`) {
		t.Errorf("a request that may not be edited offers Edit arguments:\n%s", body)
	}
}

// TestRedactedMasksTheEdit: show --json masks both versions of an edit.
func TestRedactedMasksTheEdit(t *testing.T) {
	r := testRequest("task-1", time.Now())
	r.Edit = &api.ArgsEdit{By: "bob", Original: r.Arguments, Arguments: []byte(`{"key":"k2","auth":{"token":"n3w"}}`)}
	got := Redacted(r)
	if strings.Contains(string(got.Edit.Original), "s3cret") || strings.Contains(string(got.Edit.Arguments), "n3w") ||
		!strings.Contains(string(r.Edit.Arguments), "n3w") {
		t.Errorf("redacted edit %s / %s (the request's own must stay as it was)", got.Edit.Original, got.Edit.Arguments)
	}
}

// TestWebhookApproveWithEdits: a bridge's signed decision may carry
// arguments; they are delivered with the approval (masked values restored).
func TestWebhookApproveWithEdits(t *testing.T) {
	ft := &fakeTemporal{reqs: []api.ApprovalRequest{testRequest("task-1", time.Now())}}
	r := ft.reqs[0]
	h := WebhookDecisions(WebhookDecisionOptions{Channels: []WebhookChannel{{Name: "teams", Secret: "s3cret-webhook-secret"}},
		Local: Local{Temporal: ft, Namespace: "default"}})
	body := []byte(`{"request":"` + r.ID + `","digest":"` + r.Digest + `","approver":"bob","decision":"approve","arguments":{"key":"k9","auth":{"token":"[redacted]"}}}`)
	req := httptest.NewRequest(http.MethodPost, WebhookDecisionPath, bytes.NewReader(body))
	for k, v := range SignWebhook("s3cret-webhook-secret", time.Now(), body) {
		req.Header[k] = v
	}
	req.Header.Set(WebhookChannelHeader, "teams")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("decision: %d %s", w.Code, w.Body)
	}
	sent := ft.sent()
	if len(sent) != 1 {
		t.Fatalf("delivered %d", len(sent))
	}
	if d := sent[0].Args[0].(api.DecideRequest); d.Arguments != `{"auth":{"token":"s3cret"},"key":"k9"}` || d.Via != "webhook:teams" {
		t.Errorf("delivered %+v", d)
	}
}
