package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/redact"
	"github.com/airlock-run/airlock/internal/relay"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// callRelay routes what an upstream sends during one call to the client
// that made it (through the gateway's sink, see package relay), governed
// by the tool's manifest, and keeps the sampling and elicitation exchanges
// for the call's record.
type callRelay struct {
	in   api.CallToolInput
	hub  *relay.Hub
	decl *manifests.Tool
	// Through the task (mrtr.go), when no gateway runs in this process:
	// actx is the activity's context, askTimeout how long a request waits.
	actx       context.Context
	askTimeout time.Duration

	mu        sync.Mutex
	exchanges []api.Exchange
	last      api.CallProgress
	logSeq    int // log messages so far
}

// relayFor builds the relay of a call and the upstream hooks that feed it.
func (a *Activities) relayFor(in api.CallToolInput) (*callRelay, *upstream.CallHooks) {
	r := &callRelay{in: in, hub: a.Relay, askTimeout: a.askTimeout()}
	if cat := a.judge().Catalog; cat != nil {
		if t, ok := cat.Tool(in.ExposedName); ok {
			r.decl = t.Decl
		}
	}
	h := &upstream.CallHooks{Sample: r.sample, Elicit: r.elicit, Progress: r.progress, Log: r.log}
	// A tool that may ask the client gets an upstream session of its own
	// (HTTP upstreams): its requests are then its own whatever else runs.
	h.Own = r.decl != nil && (r.decl.Sampling.Allows() || r.decl.Elicitation.Allows())
	h.ProgressToken = in.ProgressToken // from the task: works in any process
	if s := r.sink(); s != nil && s.ProgressToken != nil {
		h.ProgressToken = s.ProgressToken
	}
	return r, h
}

// sink is the gateway's end of the call now (nil: no client in this
// process waits on it). It is looked up each time: a client that collects
// the call with airlock_await takes over from the one that made it.
func (r *callRelay) sink() *relay.Sink { return r.hub.Lookup(r.in.TaskID, r.in.CallID) }

func (r *callRelay) log(p *mcp.LoggingMessageParams) {
	// Kept for the heartbeat too: a gateway in another process relays it.
	data, _ := json.Marshal(p.Data)
	r.mu.Lock()
	r.logSeq++
	r.last.Logs = append(r.last.Logs, api.CallLog{Seq: r.logSeq, Level: string(p.Level), Logger: p.Logger, Data: data})
	if n := len(r.last.Logs); n > api.MaxHeartbeatLogs {
		r.last.Logs = append([]api.CallLog(nil), r.last.Logs[n-api.MaxHeartbeatLogs:]...)
	}
	r.last.CallID = r.in.CallID
	r.mu.Unlock()
	if s := r.sink(); s != nil && s.Log != nil {
		s.Log(p)
	}
}

func (r *callRelay) progress(p *mcp.ProgressNotificationParams) {
	r.mu.Lock()
	r.last = api.CallProgress{CallID: r.in.CallID, Progress: p.Progress, Total: p.Total, Message: p.Message, Seq: r.last.Seq + 1, Logs: r.last.Logs, Asks: r.last.Asks}
	r.mu.Unlock()
	if s := r.sink(); s != nil && s.Progress != nil {
		q := *p
		q.ProgressToken = s.ProgressToken // the client's own, whatever went upstream
		s.Progress(&q)
	}
}

// lastProgress is the heartbeat detail: the last progress reported and
// the last log messages.
func (r *callRelay) lastProgress() (api.CallProgress, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cp := r.last
	cp.Logs = append([]api.CallLog(nil), r.last.Logs...)
	cp.Asks = append([]api.CallAsk(nil), r.last.Asks...)
	return cp, cp.Seq > 0 || len(cp.Logs) > 0 || len(cp.Asks) > 0
}

func (r *callRelay) record(x api.Exchange) {
	r.mu.Lock()
	r.exchanges = append(r.exchanges, x)
	r.mu.Unlock()
}

func (r *callRelay) recorded() []api.Exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]api.Exchange(nil), r.exchanges...)
}

// refusal says why a server-to-client request of kind is not forwarded
// ("" when it is). With no client waiting on the call in this process (no
// gateway here, or its client got a task handle or a pending result), the
// request goes through the task (mrtr.go).
func (r *callRelay) refusal(kind string, permit func(*manifests.Tool) manifests.Permit, s *relay.Sink) string {
	switch {
	case r.decl == nil:
		return fmt.Sprintf("airlock denied %s during %s: no manifest declares the tool", kind, r.in.ExposedName)
	case !permit(r.decl).Allows():
		return fmt.Sprintf("airlock denied %s during %s: its manifest does not allow it (set %s: allow on the tool to forward it to the client)", kind, r.in.ExposedName, kind)
	}
	return ""
}

func (r *callRelay) sample(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	req, _ := json.Marshal(p)
	s := r.sink()
	why := r.refusal("sampling", func(t *manifests.Tool) manifests.Permit { return t.Sampling }, s)
	if why != "" {
		r.record(api.Exchange{Kind: "sampling", Request: req, Refused: why})
		return nil, fmt.Errorf("%s", why)
	}
	sampleVia := func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
		raw, err := r.askThroughTask("sampling", req)
		if err != nil {
			return nil, err
		}
		return relay.SampleAnswer(raw)
	}
	through := sampleVia
	if s != nil && s.Sample != nil {
		sampleVia = s.Sample
	}
	res, err := sampleVia(ctx, p)
	if errors.Is(err, relay.ErrNotWaiting) {
		// The client stopped waiting just now: the next one to wait on
		// the call takes the request from the heartbeats.
		s = nil
		res, err = through(ctx, p)
	}
	if err != nil {
		why := err.Error() // through the task: it says itself why no answer came
		if s != nil && s.Sample != nil {
			why = "the client answered with an error: " + why
		}
		r.record(api.Exchange{Kind: "sampling", Request: req, Refused: why})
		return nil, err
	}
	ans, _ := json.Marshal(res)
	r.record(api.Exchange{Kind: "sampling", Request: req, Answer: redact.Arguments(ans, r.decl.Redact)})
	return res, nil
}

func (r *callRelay) elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	req, _ := json.Marshal(p)
	s := r.sink()
	why := r.refusal("elicitation", func(t *manifests.Tool) manifests.Permit { return t.Elicitation }, s)
	if why != "" {
		r.record(api.Exchange{Kind: "elicitation", Request: req, Refused: why})
		return nil, fmt.Errorf("%s", why)
	}
	elicitVia := func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
		raw, err := r.askThroughTask("elicitation", req)
		if err != nil {
			return nil, err
		}
		var res mcp.ElicitResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, fmt.Errorf("the client's elicitation answer: %w", err)
		}
		return &res, nil
	}
	through := elicitVia
	if s != nil && s.Elicit != nil {
		elicitVia = s.Elicit
	}
	res, err := elicitVia(ctx, p)
	if errors.Is(err, relay.ErrNotWaiting) {
		// The client stopped waiting just now: the next one to wait on
		// the call takes the request from the heartbeats.
		s = nil
		res, err = through(ctx, p)
	}
	if err != nil {
		why := err.Error() // through the task: it says itself why no answer came
		if s != nil && s.Elicit != nil {
			why = "the client answered with an error: " + why
		}
		r.record(api.Exchange{Kind: "elicitation", Request: req, Refused: why})
		return nil, err
	}
	// The redact paths name fields of the content the user gave.
	masked := *res
	if len(r.decl.Redact) > 0 && res.Content != nil {
		c, _ := json.Marshal(res.Content)
		var m map[string]any
		if json.Unmarshal(redact.Arguments(c, r.decl.Redact), &m) == nil {
			masked.Content = m
		} else {
			masked.Content = map[string]any{"withheld": "not a JSON object"}
		}
	}
	ans, _ := json.Marshal(&masked)
	r.record(api.Exchange{Kind: "elicitation", Request: req, Answer: ans})
	return res, nil
}

// heartbeatDetails returns what a heartbeat of the call carries: its last
// progress and log messages, for a gateway in another process (nil:
// nothing yet).
func (r *callRelay) heartbeatDetails() []any {
	if r == nil {
		return nil
	}
	if p, ok := r.lastProgress(); ok {
		return []any{p}
	}
	return nil
}

// errClientCancelled is the cause of an upstream call's cancellation when
// the client that made the call cancelled it.
var errClientCancelled = errors.New("cancelled by the client (notifications/cancelled)")

// watchCancel returns ctx cancelled, with cause errClientCancelled, when
// the client cancels the call through the relay. Cancelling the upstream
// call's context makes the MCP SDK send notifications/cancelled upstream.
func (r *callRelay) watchCancel(ctx context.Context) (context.Context, func()) {
	s := r.sink()
	if s == nil || s.Cancelled == nil {
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-s.Cancelled:
			cancel(errClientCancelled)
		case <-stop:
		case <-cctx.Done():
		}
	}()
	return cctx, func() { close(stop); cancel(nil) }
}
