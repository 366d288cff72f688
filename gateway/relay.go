package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/relay"
	"github.com/airlock-run/airlock/internal/tick"
)

// errCallLeft answers an upstream's sampling or elicitation request that
// comes after the client stopped waiting for the call (it got the pending
// result, or went away): the activity then asks through the task, where
// the next client to wait on the call (airlock_await) takes it.
var errCallLeft = relay.ErrNotWaiting

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
	// For a 2026-07-28 client (mrtr.go): the upstream's requests go to
	// the waiting tools/call through asked (nil: the client takes them on
	// its session); ended is closed when the call stops waiting.
	asked chan *ask
	ended chan struct{}
	leave sync.Once // closes ended
	// viaTasks: the client declared the Tasks extension; its call's
	// requests wait for tasks/update.
	viaTasks bool
	// answered are the requests this tools/call brings answers to: a
	// heartbeat read before the activity took them still lists them.
	answered []string
	// task and call name the call (crossReplica reads answers from it).
	task, call string
}

// relayCall registers the sink of a call in the relay and returns it with
// the function that ends it (after which the sink drops notifications and
// refuses requests). With cancellable, the client's notifications/cancelled
// for req cancels the call (the tools/call itself; not airlock_await,
// whose cancellation only stops the waiting).
func (g *Gateway) relayCall(ctx context.Context, req *mcp.CallToolRequest, taskID, callID string, cancellable bool) (*callSink, func()) {
	cs := &callSink{ended: make(chan struct{}), task: taskID, call: callID}
	if req.Session == nil {
		return cs, func() {}
	}
	ss := req.Session
	s := relaySink(ctx, ss, cs, req.Params.GetProgressToken())
	switch {
	case cancellable && multiRoundTrip(ss) && declaresTasks(req.Params.Meta):
		// A Tasks client gets a task handle; tasks/get reports the
		// upstream's requests (input_required) and tasks/update answers
		// them, through the task (mrtr.go).
		cs.viaTasks = true
		s.Sample, s.Elicit = nil, nil
	case multiRoundTrip(ss):
		// The tools/call, or the airlock_await that collects the call,
		// answers input-required.
		cs.asked = make(chan *ask)
		g.mrtrSink(cs, &s.Sample, &s.Elicit)
	}
	cancelled := make(chan struct{})
	s.Cancelled = cancelled
	marks := g.cancelMarks(ss)
	seen := marks.count()
	if cancellable {
		go g.watchCancel(ctx, marks, seen, cs.ended, func() {
			g.log.Info().Str("task", taskID).Str("call", callID).Msg("call cancelled by the client")
			close(cancelled) // a worker in this process cancels the upstream call at once
			g.cancelInTask(taskID, callID)
		})
	}
	unregister := g.opts.Relay.Register(taskID, callID, s) // a nil relay registers nothing
	return cs, func() {
		cs.mu.Lock()
		cs.done = true
		cs.mu.Unlock()
		cs.stopWaiting()
		unregister()
	}
}

// relaySink is the relay.Sink of a call made in session ss: what the
// upstream sends goes to ss while the call's client waits (cs) and its
// request (ctx) lasts.
func relaySink(ctx context.Context, ss *mcp.ServerSession, cs *callSink, progressToken any) *relay.Sink {
	live := func() bool {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		return !cs.done && ctx.Err() == nil
	}
	s := &relay.Sink{
		ProgressToken: progressToken,
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
	if progressToken != nil {
		s.Progress = func(p *mcp.ProgressNotificationParams) {
			if live() {
				cs.upstreamProgress.Store(true)
				_ = ss.NotifyProgress(ctx, p)
			}
		}
	}
	return s
}

// watchCancel calls onCancel (which cancels the call, or stops the
// program, in its task) when
// the client's notifications/cancelled ends the request (ctx) before the
// call is answered (ended).
func (g *Gateway) watchCancel(ctx context.Context, marks *cancelMark, seen int, ended <-chan struct{}, onCancel func()) {
	// The SDK cancels a request's context as soon as it reads the
	// client's notifications/cancelled, and hands the notification to
	// the middleware (cancelMiddleware) after: wait a moment for it.
	// A context ended otherwise (the session closed) is no
	// cancellation: the call goes on in its task, as it always has.
	select {
	case <-ctx.Done():
	case <-ended:
		if ctx.Err() == nil {
			return // answered: nothing to cancel
		}
	}
	if marks.await(seen, cancelGrace) {
		onCancel()
	}
}

// stopWaiting says that the client no longer waits on the call (its wait
// ended: a result, input-required, or the timeout). An upstream request
// offered after it is not taken (askClient, forwardAsk): it goes through
// the task, or stays in the heartbeats, for the next client to wait on the
// call. Before it, such a request blocked the tools/call or airlock_await
// from answering until its client went away (issue 25).
func (cs *callSink) stopWaiting() { cs.leave.Do(func() { close(cs.ended) }) }

// stopProgramInTask tells a program's task that the client cancelled
// its airlock_run_program (api.SignalStopProgram): the program stops at
// its next call, a call of it waiting for approval withdrawn.
func (g *Gateway) stopProgramInTask(taskID, programID, by string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := g.opts.Temporal.SignalWorkflow(ctx, taskID, "", api.SignalStopProgram,
		api.StopProgram{ProgramID: programID, By: by, Reason: "the client sent notifications/cancelled"})
	if err != nil {
		g.log.Warn().Err(err).Str("task", taskID).Str("program", programID).Msg("telling the task that the client cancelled a program failed")
	}
}

// cancelInTask tells the call's task that the client cancelled it
// (api.SignalCancelCall): the task withdraws its approval request, or
// cancels its activity (a worker in any process learns it at its next
// heartbeat), and records the call as cancelled. The signal is recorded in
// the task's history.
func (g *Gateway) cancelInTask(taskID, callID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := g.opts.Temporal.SignalWorkflow(ctx, taskID, "", api.SignalCancelCall,
		api.CancelCall{CallID: callID, Reason: "the client sent notifications/cancelled"})
	if err != nil {
		g.log.Warn().Err(err).Str("task", taskID).Str("call", callID).Msg("telling the task that the client cancelled a call failed")
	}
}

// cancelGrace is how long after a call's context ends the gateway waits
// for the notifications/cancelled that ended it.
const cancelGrace = 2 * time.Second

// cancelMark counts the notifications/cancelled a session sent.
type cancelMark struct {
	mu      sync.Mutex
	n       int
	changed chan struct{}
}

func (m *cancelMark) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// await reports whether the count passes seen within d.
func (m *cancelMark) await(seen int, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		m.mu.Lock()
		n, ch := m.n, m.changed
		m.mu.Unlock()
		if n > seen {
			return true
		}
		select {
		case <-ch:
		case <-timer.C:
			return false
		}
	}
}

func (m *cancelMark) add() {
	m.mu.Lock()
	m.n++
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// cancelMarks returns the cancellation count of a session, kept until the
// session ends.
func (g *Gateway) cancelMarks(ss *mcp.ServerSession) *cancelMark {
	m, loaded := g.cancels.LoadOrStore(ss, &cancelMark{changed: make(chan struct{})})
	if !loaded {
		go func() { _ = ss.Wait(); g.cancels.Delete(ss) }()
	}
	return m.(*cancelMark)
}

// cancelMiddleware counts each session's notifications/cancelled, for the
// calls in flight on it (relayCall).
func (g *Gateway) cancelMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "notifications/cancelled" {
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
				g.cancelMarks(ss).add()
			}
		}
		return next(ctx, method, req)
	}
}

// DefaultProgressPoll is how often a gateway without a worker in its
// process (Options.Relay nil) reads a running call's heartbeats for its
// upstream progress.
const DefaultProgressPoll = time.Second

// heartbeatProgress relays a call's upstream progress and log messages
// from its activity's heartbeat details (api.CallProgress) when the gateway
// shares no relay with a worker: the path across processes; and, in every
// deployment, the upstream's sampling and elicitation requests published
// there (forwardAsk). It reads the
// task's pending activities every Options.ProgressPoll while the call
// waits (one DescribeWorkflowExecution a second per call that runs longer
// than that). Heartbeats keep only the latest progress, so a client may see
// fewer progress notifications than the upstream sent, never out of order;
// they keep the last api.MaxHeartbeatLogs log messages, numbered, so each
// is relayed once, in order (more than that between two reads are lost). A
// call on the fast path (a local activity) has no heartbeats.
func (g *Gateway) heartbeatProgress(ctx context.Context, req *mcp.CallToolRequest, taskID, callID string, cs *callSink) (stop func()) {
	tok := req.Params.GetProgressToken()
	if req.Session == nil {
		return func() {}
	}
	// With a worker in this process (a relay), progress and log messages
	// come through the relay when the activity runs here; its heartbeats
	// still bring the requests of an activity that found no client
	// waiting on it in its process: one that runs on another replica's
	// worker, or asked while no client waited (airlock_await then takes
	// them). Those never come through the relay, so neither twice.
	asksOnly := g.opts.Relay != nil
	if asksOnly {
		tok = nil
	}
	every := g.opts.ProgressPoll
	if every <= 0 {
		every = DefaultProgressPoll
	}
	seq, logSeq := 0, 0
	asked := map[string]bool{} // the upstream requests forwarded (mrtr.go)
	for _, id := range cs.answered {
		asked[id] = true
	}
	tickStop := tick.Every(ctx, every, func(int) {
		desc, err := g.opts.Temporal.DescribeWorkflowExecution(ctx, taskID, "")
		if err != nil {
			return
		}
		for _, pa := range desc.GetPendingActivities() {
			if pa.GetActivityType().GetName() != api.CallToolName || len(pa.GetHeartbeatDetails().GetPayloads()) == 0 {
				continue
			}
			var cp api.CallProgress
			if converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &cp) != nil || cp.CallID != callID {
				continue
			}
			// Log messages not relayed yet, in order; the session drops
			// those below the level its client set (none before it sets one).
			for _, l := range cp.Logs {
				if asksOnly || l.Seq <= logSeq {
					continue
				}
				logSeq = l.Seq
				var data any
				_ = json.Unmarshal(l.Data, &data)
				_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: mcp.LoggingLevel(l.Level), Logger: l.Logger, Data: data})
			}
			for _, ca := range cp.Asks {
				if !asked[ca.ID] {
					asked[ca.ID] = true
					g.forwardAsk(ctx, req.Session, taskID, callID, cs, ca)
				}
			}
			if tok == nil || cp.Seq <= seq {
				continue
			}
			seq = cp.Seq
			cs.upstreamProgress.Store(true)
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: cp.Progress, Total: cp.Total, Message: cp.Message})
		}
	})
	// A tick may be offering a request (forwardAsk) that nobody takes
	// now: it returns once the sink says the wait is over.
	return func() { cs.stopWaiting(); tickStop() }
}
