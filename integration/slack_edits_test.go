package integration

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	approverslack "github.com/airlock-run/airlock/approver/slack"
)

// TestSlackApproveWithEdits runs the Slack modal end to end on the real
// stack: bob clicks "Edit & approve" on the posted request, airlock opens
// the modal through views.open (the click's trigger_id, the arguments
// masked), and bob's signed view_submission with other arguments approves
// them: the edited call runs, never the original, and the task records the
// edit as bob's, via slack.
func TestSlackApproveWithEdits(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	call := callAsync(e.cs, "counter__append", map[string]any{"key": "slack-draft"})
	_, b := e.nextPost(t)

	body, h := signedClick("U_BOB", approverslack.ActionEdit, b, time.Now())
	if code := e.send(t, body, h); code != http.StatusOK {
		t.Fatalf("Edit & approve click: %d", code)
	}
	var trigger string
	if err := json.Unmarshal([]byte(strings.SplitN(mustUnescape(t, body), "=", 2)[1]), &struct {
		TriggerID *string `json:"trigger_id"`
	}{&trigger}); err != nil {
		t.Fatal(err)
	}
	opened := e.api.waitCall(t, "views.open", "the edit modal opened", func(c slackAPICall) bool { return c.Status == http.StatusOK })
	var req struct {
		TriggerID string `json:"trigger_id"`
		View      struct {
			CallbackID      string `json:"callback_id"`
			PrivateMetadata string `json:"private_metadata"`
		} `json:"view"`
	}
	if err := json.Unmarshal(opened.JSON, &req); err != nil {
		t.Fatalf("views.open body %s: %v", opened.JSON, err)
	}
	if req.TriggerID != trigger || req.View.CallbackID != approverslack.ViewEdit || strings.Contains(string(opened.JSON), "slack-draft") ||
		!strings.Contains(string(opened.JSON), "[redacted]") {
		t.Fatalf("views.open %s", opened.JSON)
	}

	submit := func(value string) (string, http.Header) {
		p := map[string]any{
			"type": "view_submission", "user": map[string]any{"id": "U_BOB", "team_id": "T1"}, "team": map[string]any{"id": "T1"},
			"view": map[string]any{"id": "V_EDIT_1", "type": "modal", "callback_id": approverslack.ViewEdit, "private_metadata": req.View.PrivateMetadata,
				"state": map[string]any{"values": map[string]any{approverslack.EditBlock: map[string]any{approverslack.EditInput: map[string]any{"type": "plain_text_input", "value": value}}}}},
		}
		raw, _ := json.Marshal(p)
		body := "payload=" + url.QueryEscape(string(raw))
		return body, slackSignature(slackSecret, time.Now(), body)
	}
	body, h = submit(`{"key": "slack-edited"}`)
	if code := e.send(t, body, h); code != http.StatusOK {
		t.Fatalf("view_submission: %d", code)
	}
	res := result(t, call)
	if res.IsError || !strings.Contains(text(res), "approver bob changed the arguments") {
		t.Fatalf("edited call: %s", text(res))
	}
	if e.ran(t, "append", "slack-edited") != 1 || e.ran(t, "append", "slack-draft") != 0 {
		t.Errorf("side effects: edited %d, original %d; want the edited call once", e.ran(t, "append", "slack-edited"), e.ran(t, "append", "slack-draft"))
	}
	r := e.lookup(t, b.request)
	if r.Edit == nil || r.Edit.By != "bob" || r.Edit.Via != "slack" || r.Edit.OriginalDigest != b.digest || r.Edit.Digest == b.digest {
		t.Errorf("recorded edit %+v", r.Edit)
	}
	e.api.ephemeral(t, "U_BOB", "approved with edited arguments")
}

func mustUnescape(t *testing.T, body string) string {
	t.Helper()
	s, err := url.QueryUnescape(body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
