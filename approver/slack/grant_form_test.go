package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
)

// slackGrantSubmission is the form body Slack posts when user submits the
// grant modal with the given menu choices ("" leaves a menu unset).
func slackGrantSubmission(user, viewID, meta, calls, dur string, principal bool) string {
	values := map[string]any{}
	sel := func(v string) map[string]any {
		if v == "" {
			return map[string]any{"type": "static_select", "selected_option": nil}
		}
		return map[string]any{"type": "static_select", "selected_option": map[string]any{"value": v, "text": map[string]any{"type": "plain_text", "text": v}}}
	}
	values[GrantCallsBlock] = map[string]any{GrantCallsInput: sel(calls)}
	values[GrantForBlock] = map[string]any{GrantForInput: sel(dur)}
	scope := []any{}
	if principal {
		scope = append(scope, map[string]any{"value": grantScopePrincipal, "text": map[string]any{"type": "plain_text", "text": "p"}})
	}
	values[GrantScopeBlock] = map[string]any{GrantScopeInput: map[string]any{"type": "checkboxes", "selected_options": scope}}
	return slackViewPayload(user, viewID, ViewGrant, meta, values)
}

// TestSlackGrantForm: "Approve + grant…" opens a modal through views.open
// whose menus offer only grants within the tool's max_grant; a signed
// view_submission choosing fewer calls, or a shorter time for every task
// of the principal, approves with exactly that grant (once however often
// Slack redelivers it); a choice above the bound (a forged payload), no
// choice, or a principal grant without a duration keeps the modal open
// with the reason and delivers nothing; a forged signature is refused.
func TestSlackGrantForm(t *testing.T) {
	f := newSlackFake(t)
	d := &slackDelivery{answer: func(_ context.Context, _ string, dr api.DecideRequest) (api.DecideResult, error) {
		return api.DecideResult{RequestID: dr.RequestID, State: api.ApprovalApproved, Approver: dr.Approver, Approve: true,
			Message: "approved: 1 of 1 approvals; granted " + dr.Grant.String()}, nil
	}}
	r := approvertest.Request("task-1a2b", time.Now())
	r.ID, r.Digest = slackRequest, slackDigest
	r.MaxGrant = &api.GrantBound{Calls: 10, Duration: time.Hour, Principal: true}
	var audit bytes.Buffer
	h := newAuditedSlackHandler(t, f, d, &audit)
	h.opts.Lookup = func(_ context.Context, id string) (api.ApprovalRequest, error) { return r, nil }

	click := slackClickBody("U_BOB", ActionGrantForm, slackRequest, slackDigest, "1700000000.000001")
	if w := postSlack(h, click, slackSign(slackSecret, time.Now(), click)); w.Code != http.StatusOK {
		t.Fatalf("click: %d", w.Code)
	}
	h.Wait()
	opened := f.ok("views.open")
	if len(opened) != 1 {
		t.Fatalf("views.open calls %+v", f.all())
	}
	type option struct {
		Value string `json:"value"`
	}
	var req struct {
		TriggerID string `json:"trigger_id"`
		View      struct {
			CallbackID      string `json:"callback_id"`
			PrivateMetadata string `json:"private_metadata"`
			Blocks          []struct {
				BlockID  string `json:"block_id"`
				Optional bool   `json:"optional"`
				Element  struct {
					Type     string   `json:"type"`
					ActionID string   `json:"action_id"`
					Options  []option `json:"options"`
				} `json:"element"`
			} `json:"blocks"`
		} `json:"view"`
	}
	if err := json.Unmarshal(opened[0].JSON, &req); err != nil {
		t.Fatalf("views.open body %s: %v", opened[0].JSON, err)
	}
	if req.TriggerID != "1.2.abc" || req.View.CallbackID != ViewGrant {
		t.Fatalf("views.open %s", opened[0].JSON)
	}
	menus := map[string][]string{}
	for _, b := range req.View.Blocks {
		if b.Element.ActionID == "" {
			continue
		}
		if !b.Optional {
			t.Errorf("block %s is required; every grant choice is optional", b.BlockID)
		}
		for _, o := range b.Element.Options {
			menus[b.BlockID+"/"+b.Element.ActionID] = append(menus[b.BlockID+"/"+b.Element.ActionID], o.Value)
		}
	}
	want := map[string]string{
		GrantCallsBlock + "/" + GrantCallsInput: "1 2 3 5 10",
		GrantForBlock + "/" + GrantForInput:     "1m0s 5m0s 10m0s 15m0s 30m0s 1h0m0s",
		GrantScopeBlock + "/" + GrantScopeInput: grantScopePrincipal,
	}
	for k, v := range want {
		if got := strings.Join(menus[k], " "); got != v {
			t.Errorf("menu %s offers %q, want %q", k, got, v)
		}
	}
	meta := req.View.PrivateMetadata

	// Refused, modal kept open with the reason under a menu, nothing delivered.
	for _, c := range []struct {
		calls, dur string
		principal  bool
		block, why string
	}{
		{"", "", false, GrantCallsBlock, "choose a number of calls or a duration"},
		{"11", "", false, GrantCallsBlock, "ask for at most 10 calls"},
		{"", "2h0m0s", false, GrantCallsBlock, "ask for at most 1h0m0s"},
		{"x", "", false, GrantCallsBlock, "is not a number of calls"},
	} {
		b := slackGrantSubmission("U_BOB", "V_GRANT", meta, c.calls, c.dur, c.principal)
		w := postSlack(h, b, slackSign(slackSecret, time.Now(), b))
		var resp struct {
			Action string            `json:"response_action"`
			Errors map[string]string `json:"errors"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &resp)
		if w.Code != http.StatusOK || resp.Action != "errors" || !strings.Contains(resp.Errors[c.block], c.why) {
			t.Errorf("submission %+v: %d %s, want %q under %s", c, w.Code, w.Body, c.why, c.block)
		}
	}
	// A forged "every task" choice for a tool whose grants stay in one task.
	r.MaxGrant = &api.GrantBound{Calls: 10, Duration: time.Hour}
	wideForged := slackGrantSubmission("U_BOB", "V_GRANT", meta, "", "30m0s", true)
	if w := postSlack(h, wideForged, slackSign(slackSecret, time.Now(), wideForged)); !strings.Contains(w.Body.String(), GrantScopeBlock) ||
		!strings.Contains(w.Body.String(), "grants in one task only") {
		t.Errorf("principal grant on a task-only tool: %d %s", w.Code, w.Body)
	}
	r.MaxGrant = &api.GrantBound{Calls: 10, Duration: time.Hour, Principal: true}
	forged := slackGrantSubmission("U_BOB", "V_GRANT", meta, "3", "", false)
	if w := postSlack(h, forged, slackSign("wrong-secret", time.Now(), forged)); w.Code != http.StatusUnauthorized {
		t.Fatalf("submission signed with another secret: %d", w.Code)
	}
	h.Wait()
	if got := d.got(); len(got) != 0 {
		t.Fatalf("refused submissions delivered %+v", got)
	}

	good := slackGrantSubmission("U_BOB", "V_GRANT", meta, "3", "", false)
	for range 2 { // redelivered: delivered once
		if w := postSlack(h, good, slackSign(slackSecret, time.Now(), good)); w.Code != http.StatusOK || w.Body.Len() != 0 {
			t.Fatalf("submission: %d %s", w.Code, w.Body)
		}
		h.Wait()
	}
	// Alice's form (another view) grants 30 minutes in every task of the principal.
	wide := slackGrantSubmission("U_ALICE", "V_GRANT2", meta, "", "30m0s", true)
	if w := postSlack(h, wide, slackSign(slackSecret, time.Now(), wide)); w.Code != http.StatusOK {
		t.Fatalf("submission: %d %s", w.Code, w.Body)
	}
	h.Wait()
	got := d.got()
	if len(got) != 2 {
		t.Fatalf("delivered %+v, want two decisions", got)
	}
	dr := got[0].Decision
	if dr.RequestID != slackRequest || dr.Digest != slackDigest || dr.Approver != "bob" || !dr.Approve || dr.Via != Via ||
		dr.Grant == nil || *dr.Grant != (api.GrantAsk{Calls: 3}) || got[0].UpdateID != "slack:view:V_GRANT:U_BOB:grant:3:0s" {
		t.Errorf("delivered %+v (grant %v) as %s", dr, dr.Grant, got[0].UpdateID)
	}
	if g := got[1].Decision.Grant; got[1].Decision.Approver != "alice" || g == nil || *g != (api.GrantAsk{For: 30 * time.Minute, Principal: true}) {
		t.Errorf("delivered %+v (grant %v)", got[1].Decision, g)
	}
	for _, want := range []string{
		`"approver":"bob","decision":"approve","via":"slack","update_id":"slack:view:V_GRANT:U_BOB:grant:3:0s","state":"approved","grant":"3 calls"`,
		`"grant":"30m0s for the principal"`,
	} {
		if !strings.Contains(audit.String(), want) {
			t.Errorf("audit stream lacks %s:\n%s", want, audit.String())
		}
	}
	if n := strings.Count(audit.String(), `"event":"approval_decided"`); n != 2 {
		t.Errorf("%d approval_decided lines, want 2 (refused forms deliver nothing):\n%s", n, audit.String())
	}
	eph := f.waitFor(t, "chat.postEphemeral", 2)
	if eph[0].Form.Get("channel") != "C_OPS" || eph[0].Form.Get("user") != "U_BOB" || !strings.Contains(eph[0].Form.Get("text"), "granted 3 calls") {
		t.Errorf("confirmation %+v", eph[0].Form)
	}

	// A tool without max_grant: no button, and a click on an old one is refused.
	n := slackNotice()
	n.MaxGrant = nil
	if _, blocks := RenderRequest(n); strings.Contains(blocksJSON(t, blocks), ActionGrantForm) {
		t.Error("a tool without max_grant offers the grant form")
	}
	r.MaxGrant = nil
	click = slackClickBody("U_BOB", ActionGrantForm, slackRequest, slackDigest, "1700000000.000003")
	postSlack(h, click, slackSign(slackSecret, time.Now(), click))
	h.Wait()
	if len(f.ok("views.open")) != 1 {
		t.Error("a tool without max_grant opened the grant form")
	}
	eph = f.waitFor(t, "chat.postEphemeral", 3)
	if !strings.Contains(eph[2].Form.Get("text"), "allows no grant") {
		t.Errorf("click on a tool without grants answered %q", eph[2].Form.Get("text"))
	}
}
