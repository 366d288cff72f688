package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An HTTP session that subscribed and then went quiet, its client keeping
// the standalone SSE stream open (which stops the go-sdk's own idle
// timeout), is closed after the session idle time and its upstream
// subscription released; a session that keeps making requests is not.
func TestIdleSubscriberExpires(t *testing.T) {
	const idle = 400 * time.Millisecond
	f := newResFixtureWith(t, func(o *Options) { o.SessionIdle = idle })
	updates := make(chan string, 16)
	listen := &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
		updates <- r.Params.URI
	}}
	quiet := f.connectWith(t, "restricted", listen)
	busy := f.connectWith(t, "restricted", nil)
	waitResListing(t, quiet, resListing{
		resources: []string{"mem://a", "mem://b", "mem://shared"}, templates: []string{"mem://items/{id}"}, prompts: []string{"beta__hello"},
	})
	ctx := context.Background()
	if err := quiet.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://b"}); err != nil {
		t.Fatal(err)
	}
	if err := busy.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://a"}); err != nil {
		t.Fatal(err)
	}
	// The quiet session's stream is open: it gets updates.
	if err := f.beta.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "mem://b"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-updates:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscribed session got no update")
	}

	stopPing := make(chan struct{})
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		for {
			select {
			case <-stopPing:
				return
			case <-time.After(idle / 8):
				_ = busy.Ping(ctx, nil)
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for f.beta.subscribers("mem://b") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the upstream still holds the idle session's subscription after %s (session idle %s)", 30*time.Second, idle)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stopPing)
	<-pinged
	if n := f.alpha.subscribers("mem://a"); n != 1 {
		t.Errorf("the session that kept pinging lost its subscription (upstream holds %d)", n)
	}
	if !strings.Contains(f.logs.String(), "session idle with resource subscriptions: closed") {
		t.Errorf("no log line says why the idle session was closed:\n%s", f.logs.String())
	}
}
