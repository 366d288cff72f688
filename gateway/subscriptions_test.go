package gateway

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// An HTTP session that subscribed and then went quiet is closed after the
// session idle time (by the go-sdk's idle timeout or the gateway's own
// check, whichever comes first) and its upstream subscription released; a
// session that keeps making requests is not.
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
	testenv.WaitFor(t, fmt.Sprintf("the upstream to release the idle session's subscription (session idle %s)", idle), 30*time.Second, func() bool {
		return f.beta.subscribers("mem://b") == 0
	})
	close(stopPing)
	<-pinged
	if n := f.alpha.subscribers("mem://a"); n != 1 {
		t.Errorf("the session that kept pinging lost its subscription (upstream holds %d)", n)
	}
}

// A session kept open by a parked request (here a resources/read the
// upstream does not answer), which stops the go-sdk's own idle timeout,
// is still closed after the session idle time when it holds
// subscriptions, and its upstream subscription released.
func TestParkedSubscriberExpires(t *testing.T) {
	const idle = 400 * time.Millisecond
	release := make(chan struct{})
	parked := make(chan struct{}, 1)
	up := newResUpstream(t, func(s *mcp.Server) {
		resTextResource(s, "mem://b", "b")
		s.AddResource(&mcp.Resource{URI: "mem://slow", Name: "slow", MIMEType: "text/plain"}, func(ctx context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			select {
			case parked <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "mem://slow", Text: "late"}}}, nil
		})
	})
	ms := []*manifests.Manifest{resManifest("beta", up.url, manifests.DataConfidential, "")}
	pool := upstream.New([]manifests.Server{ms[0].Server}, upstream.Options{MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	logs := &resLogBuffer{}
	gw := New(Options{Manifests: ms, Upstreams: pool, Directory: resLevelsDirectory(), Logger: zerolog.New(logs), SessionIdle: idle})
	pool.Start(context.Background())
	t.Cleanup(func() { _ = pool.Close() })
	hs := httptest.NewServer(gw.Handler())
	t.Cleanup(hs.Close)
	f := &resFixture{url: hs.URL, logs: logs}
	cs := f.connect(t, "restricted")
	// Released before the client's Close and hs.Close, which wait for the
	// parked read (the client's Close for seconds).
	t.Cleanup(func() { close(release) })
	waitResListing(t, cs, resListing{resources: []string{"mem://b", "mem://slow"}})
	ctx := context.Background()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://b"}); err != nil {
		t.Fatal(err)
	}
	rctx, stopRead := context.WithCancel(ctx)
	t.Cleanup(stopRead) // before the client's Close, which waits for the read
	go func() { _, _ = cs.ReadResource(rctx, &mcp.ReadResourceParams{URI: "mem://slow"}) }()
	<-parked
	testenv.WaitFor(t, fmt.Sprintf("the upstream to release the subscription of a session idle but for a parked request (session idle %s)", idle), 30*time.Second, func() bool {
		return up.subscribers("mem://b") == 0
	})
	if !strings.Contains(logs.String(), "session idle with resource subscriptions: closed") {
		t.Errorf("no log line says why the idle session was closed:\n%s", logs.String())
	}
}
