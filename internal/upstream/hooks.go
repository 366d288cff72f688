package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// CallHooks receive what an upstream sends while one of airlock's calls to
// it runs: progress (matched by the call's progress token), log messages,
// and sampling and elicitation requests. Log messages and server-to-client
// requests carry no reference to the request they belong to, so they are
// given to the call in flight on that upstream when there is exactly one
// (see [Pool.CallTool]); with several calls in flight, log messages are
// dropped and requests refused, rather than shown to the wrong task.
//
// Any hook may be nil. Hooks are called from the session's goroutines and
// must not block beyond the call's own life.
type CallHooks struct {
	// ProgressToken, when not nil, is sent upstream as the call's
	// _meta.progressToken (the client's own token; when another call on
	// the same upstream uses the same token, a unique one is sent instead
	// and Progress still receives the upstream's notifications).
	ProgressToken any
	Progress      func(p *mcp.ProgressNotificationParams)
	Log           func(p *mcp.LoggingMessageParams)
	Sample        func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	Elicit        func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error)
	// Own runs the call on an upstream session of its own when the
	// upstream is an HTTP server, so that all it sends is attributed to
	// the call whatever else runs (own.go).
	Own bool
}

type hooksKey struct{}

// WithHooks makes CallTool route what the upstream sends during the call to h.
func WithHooks(ctx context.Context, h *CallHooks) context.Context {
	return context.WithValue(ctx, hooksKey{}, h)
}

func hooksFrom(ctx context.Context) *CallHooks {
	h, _ := ctx.Value(hooksKey{}).(*CallHooks)
	return h
}

// ErrNoCall is the error an upstream gets for a sampling or elicitation
// request made outside a call airlock can attribute it to.
var ErrNoCall = errors.New("airlock cannot attribute this request to a tool call")

// inflight tracks the calls of one upstream that have hooks.
type inflight struct {
	mu     sync.Mutex
	calls  map[*CallHooks]bool
	tokens map[any]*CallHooks
	seq    int
	// last is the call that ended last, while no call runs, for lateGrace
	// after it ended (lastEnd).
	last    *CallHooks
	lastEnd time.Time
}

// lateGrace is how long after a call ended a notification may still be
// attributed to it. The MCP SDK hands the reply of a call to its caller as
// soon as it reads it, but queues the notifications read before it for a
// handler goroutine: the last progress or log message of a call can be
// handled just after the call returned. A progress token stays routed for
// as long; a log message goes to the call that ended last while no other
// has started.
const lateGrace = 2 * time.Second

// enter registers h for one call and returns the progress token to send
// upstream (nil for none) and a function that unregisters it.
func (f *inflight) enter(h *CallHooks) (token any, leave func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls, f.tokens = map[*CallHooks]bool{}, map[any]*CallHooks{}
	}
	f.calls[h] = true
	f.last = nil // from now on a late message could be either call's
	var key any
	if h.ProgressToken != nil {
		token, key = h.ProgressToken, tokenKey(h.ProgressToken)
		if _, taken := f.tokens[key]; taken {
			f.seq++
			token = fmt.Sprintf("airlock-%d-%v", f.seq, h.ProgressToken)
			key = token
		}
		f.tokens[key] = h
	}
	return token, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.calls, h)
		if len(f.calls) == 0 {
			f.last, f.lastEnd = h, time.Now()
		}
		if key != nil {
			time.AfterFunc(lateGrace, func() {
				f.mu.Lock()
				defer f.mu.Unlock()
				if f.tokens[key] == h {
					delete(f.tokens, key)
				}
			})
		}
	}
}

// tokenKey normalises a progress token for map lookups: JSON numbers
// arrive as float64 (from clients and upstreams alike), and a token set in
// Go may be an int or int64.
func tokenKey(t any) any {
	switch v := t.(type) {
	case int:
		return float64(v)
	case int64:
		return float64(v)
	case int32:
		return float64(v)
	}
	return t
}

func (f *inflight) byToken(t any) *CallHooks {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens[tokenKey(t)]
}

// only returns the single call in flight, or nil and how many there are.
// With late, a call that just ended counts when none runs (lateGrace).
func (f *inflight) only(late bool) (*CallHooks, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if late && len(f.calls) == 0 && f.last != nil && time.Since(f.lastEnd) < lateGrace {
		return f.last, 1
	}
	if len(f.calls) != 1 {
		return nil, len(f.calls)
	}
	for h := range f.calls {
		return h, 1
	}
	return nil, 0
}

func (u *upstream) progress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	if req.Params == nil {
		return
	}
	if h := u.calls.byToken(req.Params.ProgressToken); h != nil && h.Progress != nil {
		u.safely("progress", func() { h.Progress(req.Params) })
	}
}

func (u *upstream) logMessage(_ context.Context, req *mcp.LoggingMessageRequest) {
	if req.Params == nil {
		return
	}
	h, n := u.calls.only(true)
	if h == nil {
		if n > 1 {
			u.log.Debug().Int("calls", n).Msg("upstream log message dropped: several calls in flight, it belongs to none of them for sure")
		}
		return
	}
	if h.Log != nil {
		u.safely("log message", func() { h.Log(req.Params) })
	}
}

func (u *upstream) callFor(what string) (*CallHooks, error) {
	h, n := u.calls.only(false) // a request blocks its call: never late
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: %s from upstream %s outside any tool call", ErrNoCall, what, u.name)
	case h == nil:
		return nil, fmt.Errorf("%w: %s from upstream %s while %d calls to it are in flight; airlock forwards it only when one is", ErrNoCall, what, u.name, n)
	}
	return h, nil
}

func (u *upstream) sample(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	h, err := u.callFor("sampling/createMessage")
	if err != nil {
		return nil, err
	}
	if h.Sample == nil {
		return nil, fmt.Errorf("%w: sampling is not available for this call", ErrNoCall)
	}
	return h.Sample(ctx, req.Params)
}

func (u *upstream) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	h, err := u.callFor("elicitation/create")
	if err != nil {
		return nil, err
	}
	if h.Elicit == nil {
		return nil, fmt.Errorf("%w: elicitation is not available for this call", ErrNoCall)
	}
	return h.Elicit(ctx, req.Params)
}

// setLogLevel asks an upstream that declares logging for every level: the
// gateway filters at the level each client set (an MCP server sends no log
// messages until a level is set).
func (u *upstream) setLogLevel(ctx context.Context, cs *mcp.ClientSession) {
	if caps := serverCaps(cs); caps == nil || caps.Logging == nil {
		return
	}
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		u.log.Debug().Err(err).Msg("upstream refused logging/setLevel")
	}
}

// elicitMiddleware hands elicitation/create to the call's hooks before the
// MCP SDK's client checks its schema: airlock relays the request, and the
// client that made the call (which answers it) is the one to judge it. The
// SDK's client knows fewer schema forms than the protocol (it refuses the
// titled and multi-select enums of SEP-1330, for one).
func (u *upstream) elicitMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if er, ok := req.(*mcp.ElicitRequest); ok && method == "elicitation/create" {
			return u.elicit(ctx, er)
		}
		return next(ctx, method, req)
	}
}
