package slack

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slacktest"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver/internal/approvertest"
	"github.com/airlock-run/airlock/internal/testenv"
)

// TestSocketModeAcksThenDelivers runs the real slack-go Socket Mode client
// against slacktest's apps.connections.open and WebSocket: an interactive
// envelope is acknowledged on the socket before its decision is delivered,
// and the decision is the one the HTTP endpoint would deliver.
func TestSocketModeAcksThenDelivers(t *testing.T) {
	if testing.Short() {
		t.Skip("opens a WebSocket; skipped with -short")
	}
	srv := slacktest.NewTestServer()
	srv.Start()
	t.Cleanup(srv.Stop)
	// slacktest hands every frame it reads to SeenFeed, unbuffered.
	go func() {
		for range srv.SeenFeed {
		}
	}()
	sapi := slack.New("xoxb-test", slack.OptionAPIURL(srv.GetAPIURL()), slack.OptionAppLevelToken("xapp-test"))

	started := make(chan slackDeliverCall, 1)
	release := make(chan struct{})
	d := &slackDelivery{answer: func(ctx context.Context, id string, dr api.DecideRequest) (api.DecideResult, error) {
		started <- slackDeliverCall{id, dr}
		select {
		case <-release:
		case <-ctx.Done():
			return api.DecideResult{}, ctx.Err()
		}
		return api.DecideResult{RequestID: dr.RequestID, State: "approved", Message: "approved: 1 of 1 approvals"}, nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() {
		runErr <- RunSocketMode(ctx, SocketModeOptions{Client: sapi, Interactions: InteractionOptions{
			Users: slackTestUsers(), Deliver: d.deliver, Timeout: 5 * time.Second, Logger: zerolog.New(zerolog.NewTestWriter(t)),
		}})
	}()

	form, _ := url.ParseQuery(slackClickBody("U_BOB", "approve", slackRequest, slackDigest, "1700000000.000009"))
	env, _ := json.Marshal(map[string]any{
		"type": "interactive", "envelope_id": "env-42", "accepts_response_payload": false,
		"payload": json.RawMessage(form.Get("payload")),
	})
	srv.SendToWebsocket(string(env))

	var got slackDeliverCall
	select {
	case got = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the click was not delivered")
	}
	// The delivery is blocked: the ack must already be on the socket.
	func() {
		defer close(release) // also when WaitFor gives up
		testenv.WaitFor(t, "the envelope acknowledged while its decision is in flight", 10*time.Second, func() bool { return ackSeen(srv, "env-42") })
	}()
	want := api.DecideRequest{RequestID: slackRequest, Digest: slackDigest, Approver: "bob", Approve: true, Via: "slack"}
	if got.Decision != want || got.UpdateID != "slack:1700000000.000009:U_BOB" {
		t.Errorf("delivered %+v, want %+v", got, want)
	}
	cancel()
	select {
	case err := <-runErr:
		if err != nil {
			t.Errorf("RunSocketMode: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunSocketMode did not return after its context ended")
	}
}

func ackSeen(srv *slacktest.Server, envelope string) bool {
	for _, m := range srv.GetSeenInboundMessages() {
		if strings.Contains(m, `"envelope_id":"`+envelope+`"`) {
			return true
		}
	}
	return false
}

func TestSocketModeNeedsClient(t *testing.T) {
	if err := RunSocketMode(context.Background(), SocketModeOptions{}); err == nil {
		t.Fatal("ran without a client")
	}
}

// TestSocketModeViewSubmission runs the edit and grant modals' submissions
// over the real slack-go Socket Mode client against slacktest's WebSocket:
// a submission airlock refuses is acknowledged with the errors payload that
// keeps the modal open (as the HTTP answer does) and delivers nothing; a
// good one is acknowledged with no payload and delivered with the edited
// arguments or the chosen grant.
func TestSocketModeViewSubmission(t *testing.T) {
	if testing.Short() {
		t.Skip("opens a WebSocket; skipped with -short")
	}
	srv := slacktest.NewTestServer()
	srv.Start()
	t.Cleanup(srv.Stop)
	go func() {
		for range srv.SeenFeed {
		}
	}()
	sapi := slack.New("xoxb-test", slack.OptionAPIURL(srv.GetAPIURL()), slack.OptionAppLevelToken("xapp-test"))

	r := approvertest.Request("task-1a2b", time.Now())
	r.ID, r.Digest = slackRequest, slackDigest
	r.MaxGrant = &api.GrantBound{Calls: 10, Duration: time.Hour}
	delivered := make(chan slackDeliverCall, 4)
	d := &slackDelivery{answer: func(_ context.Context, id string, dr api.DecideRequest) (api.DecideResult, error) {
		delivered <- slackDeliverCall{id, dr}
		return api.DecideResult{RequestID: dr.RequestID, State: api.ApprovalApproved, Approver: dr.Approver, Approve: true, Message: "approved"}, nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() {
		runErr <- RunSocketMode(ctx, SocketModeOptions{Client: sapi, Interactions: InteractionOptions{
			Users: slackTestUsers(), Deliver: d.deliver, Timeout: 5 * time.Second, Logger: zerolog.New(zerolog.NewTestWriter(t)),
			Lookup: func(context.Context, string) (api.ApprovalRequest, error) { return r, nil },
		}})
	}()
	meta, _ := json.Marshal(editMeta{Request: r.ID, Digest: r.Digest, Channel: "C_OPS"})
	send := func(envelope, body string) {
		form, _ := url.ParseQuery(body)
		env, _ := json.Marshal(map[string]any{
			"type": "interactive", "envelope_id": envelope, "accepts_response_payload": true,
			"payload": json.RawMessage(form.Get("payload")),
		})
		srv.SendToWebsocket(string(env))
	}
	ack := func(envelope string) string {
		var ack string
		testenv.WaitFor(t, "envelope "+envelope+" acknowledged", 20*time.Second, func() bool {
			for _, m := range srv.GetSeenInboundMessages() {
				if strings.Contains(m, `"envelope_id":"`+envelope+`"`) {
					ack = m
					return true
				}
			}
			return false
		})
		return ack
	}

	send("env-bad-edit", slackViewSubmission("U_BOB", "V_EDIT", string(meta), `["not", "an object"]`))
	if a := ack("env-bad-edit"); !strings.Contains(a, `"response_action":"errors"`) || !strings.Contains(a, EditBlock) {
		t.Errorf("a bad edit was acknowledged with %s, want its errors", a)
	}
	send("env-bad-grant", slackGrantSubmission("U_BOB", "V_GRANT", string(meta), "11", "", false))
	if a := ack("env-bad-grant"); !strings.Contains(a, `"response_action":"errors"`) || !strings.Contains(a, "ask for at most 10 calls") {
		t.Errorf("a grant above the bound was acknowledged with %s, want its errors", a)
	}
	send("env-edit", slackViewSubmission("U_BOB", "V_EDIT", string(meta), `{"key": "k2", "auth": {"token": "[redacted]"}}`))
	if a := ack("env-edit"); strings.Contains(a, "response_action") {
		t.Errorf("a good edit was acknowledged with %s, want no payload (the modal closes)", a)
	}
	got := map[string]api.DecideRequest{}
	for range 2 {
		if len(got) == 1 {
			send("env-grant", slackGrantSubmission("U_BOB", "V_GRANT", string(meta), "", "15m0s", false))
		}
		select {
		case c := <-delivered:
			got[c.Decision.Arguments] = c.Decision
		case <-time.After(20 * time.Second):
			t.Fatalf("delivered only %+v", got)
		}
	}
	if e := got[`{"auth":{"token":"s3cret"},"key":"k2"}`]; e.Approver != "bob" || !e.Approve || e.Digest != slackDigest || e.Grant != nil {
		t.Errorf("edit delivered as %+v (all: %+v)", e, got)
	}
	if g := got[""]; g.Approver != "bob" || !g.Approve || g.Grant == nil || *g.Grant != (api.GrantAsk{For: 15 * time.Minute}) {
		t.Errorf("grant delivered as %+v", g)
	}
	if a := ack("env-grant"); strings.Contains(a, "response_action") {
		t.Errorf("a good grant was acknowledged with %s", a)
	}
	cancel()
	select {
	case <-runErr:
	case <-time.After(10 * time.Second):
		t.Fatal("RunSocketMode did not return after its context ended")
	}
	if n := len(d.got()); n != 2 {
		t.Errorf("%d decisions delivered, want 2 (refused submissions deliver nothing)", n)
	}
}
