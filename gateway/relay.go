package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/relay"
)

// errCallLeft answers an upstream's sampling or elicitation request that
// comes after the client stopped waiting for the call (it got the pending
// result, or went away).
var errCallLeft = errors.New("the client that made this call is no longer waiting for it; airlock cannot forward the request")

// callSink is the gateway's end of one call in the relay (package relay):
// it sends what the call's upstream sends to the session that made the
// call, until the call is answered.
type callSink struct {
	mu   sync.Mutex
	done bool
	// upstreamProgress is set once the upstream reported progress: the
	// gateway's own "running" ticks then stop, so that the client sees the
	// upstream's values only.
	upstreamProgress atomic.Bool
}

// relayCall registers the sink of a call in the relay and returns it with
// the function that ends it (after which the sink drops notifications and
// refuses requests).
func (g *Gateway) relayCall(ctx context.Context, req *mcp.CallToolRequest, taskID, callID string) (*callSink, func()) {
	cs := &callSink{}
	if g.opts.Relay == nil || req.Session == nil {
		return cs, func() {}
	}
	ss := req.Session
	live := func() bool {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		return !cs.done && ctx.Err() == nil
	}
	s := &relay.Sink{
		ProgressToken: req.Params.GetProgressToken(),
		Log: func(p *mcp.LoggingMessageParams) {
			if live() {
				_ = ss.Log(ctx, p) // the session filters by the client's logging/setLevel
			}
		},
		Sample: func(_ context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			if !live() {
				return nil, errCallLeft
			}
			return ss.CreateMessage(ctx, p)
		},
		Elicit: func(_ context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			if !live() {
				return nil, errCallLeft
			}
			return ss.Elicit(ctx, p)
		},
	}
	if s.ProgressToken != nil {
		s.Progress = func(p *mcp.ProgressNotificationParams) {
			if live() {
				cs.upstreamProgress.Store(true)
				_ = ss.NotifyProgress(ctx, p)
			}
		}
	}
	unregister := g.opts.Relay.Register(taskID, callID, s)
	return cs, func() {
		cs.mu.Lock()
		cs.done = true
		cs.mu.Unlock()
		unregister()
	}
}
