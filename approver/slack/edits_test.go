package slack

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
)

// slackViewSubmission is the form body Slack posts when user submits the
// edit modal with value in its input.
func slackViewSubmission(user, viewID, meta, value string) string {
	return slackViewPayload(user, viewID, ViewEdit, meta,
		map[string]any{EditBlock: map[string]any{EditInput: map[string]any{"type": "plain_text_input", "value": value}}})
}

// slackViewPayload is the form body of a view_submission of the modal
// callbackID with these state values.
func slackViewPayload(user, viewID, callbackID, meta string, values map[string]any) string {
	p := map[string]any{
		"type": "view_submission",
		"user": map[string]any{"id": user, "username": strings.ToLower(user), "team_id": "T1"},
		"team": map[string]any{"id": "T1", "domain": "example"},
		"view": map[string]any{"id": viewID, "type": "modal", "callback_id": callbackID, "private_metadata": meta,
			"state": map[string]any{"values": values}},
	}
	b, _ := json.Marshal(p)
	return "payload=" + url.QueryEscape(string(b))
}

// TestSlackEditModal: "Edit & approve" opens a modal through views.open
// (with the click's trigger_id, the arguments masked); its signed
// view_submission approves with the edited arguments (masked values
// restored), once however often Slack redelivers it; a submission that is
// not a JSON object keeps the modal open with the error; a tool that
// forbids edits shows no button.
func TestSlackEditModal(t *testing.T) {
	f := newSlackFake(t)
	d := &slackDelivery{answer: func(_ context.Context, _ string, dr api.DecideRequest) (api.DecideResult, error) {
		return api.DecideResult{RequestID: dr.RequestID, State: api.ApprovalApproved, Approver: dr.Approver, Approve: true,
			Message: "approved with edited arguments; policy judges the edited call again before it runs", EditDigest: "e1"}, nil
	}}
	r := approvertest.Request("task-1a2b", time.Now())
	r.ID, r.Digest = slackRequest, slackDigest
	h := newSlackHandler(t, f, d)
	h.opts.Lookup = func(_ context.Context, id string) (api.ApprovalRequest, error) { return r, nil }

	click := slackClickBody("U_BOB", ActionEdit, slackRequest, slackDigest, "1700000000.000001")
	if w := postSlack(h, click, slackSign(slackSecret, time.Now(), click)); w.Code != http.StatusOK {
		t.Fatalf("click: %d", w.Code)
	}
	h.Wait()
	opened := f.ok("views.open")
	if len(opened) != 1 {
		t.Fatalf("views.open calls %+v", f.all())
	}
	var req struct {
		TriggerID string `json:"trigger_id"`
		View      struct {
			CallbackID      string `json:"callback_id"`
			PrivateMetadata string `json:"private_metadata"`
			Blocks          []struct {
				BlockID string `json:"block_id"`
				Element struct {
					ActionID     string `json:"action_id"`
					InitialValue string `json:"initial_value"`
					Multiline    bool   `json:"multiline"`
				} `json:"element"`
			} `json:"blocks"`
		} `json:"view"`
	}
	if err := json.Unmarshal(opened[0].JSON, &req); err != nil {
		t.Fatalf("views.open body %s: %v", opened[0].JSON, err)
	}
	in := req.View.Blocks[len(req.View.Blocks)-1]
	if req.TriggerID != "1.2.abc" || req.View.CallbackID != ViewEdit || in.BlockID != EditBlock || in.Element.ActionID != EditInput ||
		!in.Element.Multiline || !strings.Contains(in.Element.InitialValue, `"token": "[redacted]"`) || strings.Contains(string(opened[0].JSON), "s3cret") {
		t.Fatalf("views.open %s", opened[0].JSON)
	}

	bad := slackViewSubmission("U_BOB", "V_EDIT", req.View.PrivateMetadata, `["not", "an object"]`)
	w := postSlack(h, bad, slackSign(slackSecret, time.Now(), bad))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"response_action":"errors"`) || !strings.Contains(w.Body.String(), EditBlock) {
		t.Fatalf("bad submission: %d %s", w.Code, w.Body)
	}
	unsigned := slackViewSubmission("U_BOB", "V_EDIT", req.View.PrivateMetadata, `{"key":"k2"}`)
	if w := postSlack(h, unsigned, slackSign("wrong-secret", time.Now(), unsigned)); w.Code != http.StatusUnauthorized {
		t.Fatalf("submission signed with another secret: %d", w.Code)
	}

	good := slackViewSubmission("U_BOB", "V_EDIT", req.View.PrivateMetadata, `{"key": "k2", "auth": {"token": "[redacted]"}}`)
	for range 2 { // redelivered: delivered once
		if w := postSlack(h, good, slackSign(slackSecret, time.Now(), good)); w.Code != http.StatusOK || w.Body.Len() != 0 {
			t.Fatalf("submission: %d %s", w.Code, w.Body)
		}
		h.Wait()
	}
	got := d.got()
	if len(got) != 1 {
		t.Fatalf("delivered %+v", got)
	}
	dr := got[0].Decision
	if dr.RequestID != slackRequest || dr.Digest != slackDigest || dr.Approver != "bob" || !dr.Approve || dr.Via != Via ||
		dr.Arguments != `{"auth":{"token":"s3cret"},"key":"k2"}` || !strings.HasPrefix(got[0].UpdateID, "slack:view:V_EDIT:U_BOB:edit-") {
		t.Errorf("delivered %+v as %s", dr, got[0].UpdateID)
	}
	eph := f.waitFor(t, "chat.postEphemeral", 1)
	if eph[0].Form.Get("channel") != "C_OPS" || eph[0].Form.Get("user") != "U_BOB" || !strings.Contains(eph[0].Form.Get("text"), "approved with edited arguments") {
		t.Errorf("confirmation %+v", eph[0].Form)
	}

	n := slackNotice()
	n.NoEdits = true
	_, blocks := RenderRequest(n)
	b, _ := json.Marshal(blocks)
	if strings.Contains(string(b), `"action_id":"edit"`) {
		t.Errorf("a tool that forbids edits gets an Edit & approve button: %s", b)
	}
}

// TestSlackEditNotes: the message of an edit's request says whose edit it
// is; a request approved with edits says so once closed.
func TestSlackEditNotes(t *testing.T) {
	n := slackNotice()
	n.EditOf, n.EditedBy = "task-1a2b~call-3c4d", "bob"
	_, blocks := RenderRequest(n)
	b, _ := json.Marshal(blocks)
	if !strings.Contains(string(b), "Edited by bob") {
		t.Errorf("edit request message: %s", b)
	}
	n = slackNotice()
	n.State, n.Edit = api.ApprovalApproved, &api.ArgsEdit{By: "bob", Digest: "abcdef0123456789"}
	_, blocks = RenderOutcome(n)
	b, _ = json.Marshal(blocks)
	if !strings.Contains(string(b), "Approved with edited arguments") || !strings.Contains(string(b), "abcdef012345") {
		t.Errorf("outcome message: %s", b)
	}
}

// TestSlackFormsOpenOnlyForDeciders (issue 25, low): the edit and grant
// forms do not open for someone who may not decide (the requester, a
// non-member): they are told why at once, ephemerally, instead of after
// filling the form in.
func TestSlackFormsOpenOnlyForDeciders(t *testing.T) {
	for _, action := range []string{ActionEdit, ActionGrantForm} {
		for user, want := range map[string]string{"U_ALICE": "asked for this call", "U_BOB": "not in approver group"} {
			t.Run(action+"/"+user, func(t *testing.T) {
				f := newSlackFake(t)
				d := &slackDelivery{}
				r := approvertest.Request("task-1a2b", time.Now())
				r.ID, r.Digest, r.Approvers = slackRequest, slackDigest, []string{"alice", "carol"}
				r.MaxGrant = &api.GrantBound{Calls: 3}
				h := newSlackHandler(t, f, d)
				h.opts.Lookup = func(_ context.Context, id string) (api.ApprovalRequest, error) { return r, nil }
				click := slackClickBody(user, action, slackRequest, slackDigest, "1700000000.000001")
				if w := postSlack(h, click, slackSign(slackSecret, time.Now(), click)); w.Code != http.StatusOK {
					t.Fatalf("click: %d", w.Code)
				}
				h.Wait()
				if opened := f.ok("views.open"); len(opened) != 0 {
					t.Fatalf("the form opened for %s: %+v", user, opened)
				}
				eph := f.waitFor(t, "chat.postEphemeral", 1)
				if eph[0].Form.Get("user") != user || !strings.Contains(eph[0].Form.Get("text"), want) {
					t.Errorf("ephemeral %+v, want %q", eph[0].Form, want)
				}
			})
		}
	}
}
