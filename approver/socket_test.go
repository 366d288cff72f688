package approver

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slacktest"
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
	deadline := time.Now().Add(10 * time.Second)
	for !ackSeen(srv, "env-42") {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("envelope not acknowledged while its decision was in flight; socket saw %v", srv.GetSeenInboundMessages())
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
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
