package gateway

import (
	"context"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/relay"
	"github.com/airlock-run/airlock/internal/seal"
)

// Sampling and elicitation for clients of protocol 2026-07-28 (multi round
// trip, SEP-2322): such a client cannot take a request from the server
// while its call runs. When the call's upstream asks for something, the
// tools/call answers at once with an input-required result carrying the
// upstream's request (InputRequests) and a signed RequestState naming the
// call; the client's next tools/call carries the answer (InputResponses)
// and that state, and the gateway hands the answer to the upstream, which
// has been waiting for it inside the same activity, and waits on the same
// call again (its Update ID). When the worker runs in another process the
// request comes in the call's heartbeats and the answer goes back to it
// through the task, sealed to its one-time key (forwardAsk, sendInput); a
// client of the Tasks extension sees it in tasks/get and answers it with
// tasks/update (callAsks, updateTask). See RATIONALE.md, "How does an
// upstream's sampling or elicitation reach a 2026-07-28 client, and cross
// processes?".

// DefaultAskTimeout is how long an upstream's sampling or elicitation
// request waits for the client's answer before the upstream gets an error.
const DefaultAskTimeout = 5 * time.Minute

// errAsked ends a call's wait when its upstream asks the client for input.
var errAsked = errors.New("the upstream asked the client for input")

// multiRoundTrip reports whether the client of ss answers server requests
// by retrying rather than on its session; as the go-sdk decides it: a
// stateless request (no initialize) is of the current revision.
func multiRoundTrip(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	v := StatelessProtocol
	if p := ss.InitializeParams(); p != nil {
		v = p.ProtocolVersion
	}
	return v >= StatelessProtocol
}

// ask is one request of an upstream that waits for a 2026-07-28 client's
// answer.
type ask struct {
	id     string
	req    mcp.InputRequest
	answer chan json.RawMessage // the client's InputResponse, once (in this process)
	// key is the public key an answer through the task is sealed to: the
	// activity's, for a request of an activity in another process
	// (api.CallAsk); this gateway's own (priv), for a request waiting here,
	// so that a client's answer reaching another replica still gets to it
	// (crossReplica).
	key  []byte
	priv *ecdh.PrivateKey
}

// askState is what the RequestState of an input-required result carries:
// the call the answers resume, whose task and principal they must come
// from, the tool the answering request must name (the one that was
// answered input-required: a state replayed under another tool's name
// would resume a call that name's checks never judged), and the requests
// they answer.
type askState struct {
	Task      string   `json:"t"`
	Call      string   `json:"c"`
	Principal string   `json:"p"`
	Tool      string   `json:"n"`
	Asks      []string `json:"a"`
	// Keys are the activity's keys of the requests that wait in another
	// process (their answers go through the task).
	Keys map[string][]byte `json:"k,omitempty"`
}

func (g *Gateway) askMAC(payload []byte) []byte {
	m := hmac.New(sha256.New, g.sessionKey)
	m.Write([]byte("airlock-request-state-v1\x00"))
	m.Write(payload)
	return m.Sum(nil)
}

// encodeAskState signs s with the session key, so that the replica the
// client's answer reaches trusts it without asking this one.
func (g *Gateway) encodeAskState(s askState) string {
	raw, _ := json.Marshal(s)
	return b64.EncodeToString(raw) + "." + b64.EncodeToString(g.askMAC(raw))
}

var errBadAskState = errors.New("requestState was not issued by this gateway (or by one sharing its session key) for this call; call the tool again without inputResponses and requestState")

func (g *Gateway) decodeAskState(st string) (askState, error) {
	payload, mac, ok := strings.Cut(st, ".")
	if !ok {
		return askState{}, errBadAskState
	}
	raw, err1 := b64.DecodeString(payload)
	sum, err2 := b64.DecodeString(mac)
	if err1 != nil || err2 != nil || !hmac.Equal(sum, g.askMAC(raw)) {
		return askState{}, errBadAskState
	}
	var s askState
	if json.Unmarshal(raw, &s) != nil || s.Task == "" || s.Call == "" || len(s.Asks) == 0 {
		return askState{}, errBadAskState
	}
	return s, nil
}

func newAskID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ask-" + hex.EncodeToString(b[:])
}

// askClient is the relay's sampling or elicitation for a 2026-07-28
// client: it hands the request to the tools/call waiting on the call
// (which answers input-required) and waits for the answer that a later
// tools/call of the client brings (resumeCall), until ctx ends or the
// ask timeout. It returns the client's answer as JSON.
func (g *Gateway) askClient(ctx context.Context, cs *callSink, req mcp.InputRequest) (json.RawMessage, error) {
	a := &ask{id: newAskID(), req: req, answer: make(chan json.RawMessage, 1)}
	if priv, err := seal.NewKey(); err == nil && cs.task != "" {
		a.priv, a.key = priv, priv.PublicKey().Bytes()
	}
	g.asks.Store(a.id, a)
	defer g.asks.Delete(a.id)
	select {
	case cs.asked <- a: // the waiting tools/call took it and answers input-required
	case <-cs.ended:
		return nil, errCallLeft
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	timeout := g.opts.AskTimeout
	if timeout <= 0 {
		timeout = DefaultAskTimeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	// The answer may also reach another gateway replica, which sends it
	// through the task, sealed to a.key (crossReplica).
	var poll <-chan time.Time
	if a.priv != nil {
		tick := time.NewTicker(askPoll)
		defer tick.Stop()
		poll = tick.C
	}
	for {
		select {
		case ans := <-a.answer:
			return ans, nil
		case <-timer.C:
			return nil, fmt.Errorf("the client did not answer within %s (a 2026-07-28 client answers by calling the tool again with inputResponses)", timeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-poll:
			if ans, ok, err := g.crossReplica(ctx, cs, a); ok {
				return ans, err
			}
		}
	}
}

// askPoll is how often a request waiting in this gateway asks its task
// whether another replica took the client's answer.
const askPoll = 500 * time.Millisecond

// crossReplica reads, from the call's task (api.QueryCallInput), the
// answer another gateway replica took for a request waiting here; ok is
// false while there is none.
func (g *Gateway) crossReplica(ctx context.Context, cs *callSink, a *ask) (json.RawMessage, bool, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := g.opts.Temporal.QueryWorkflow(qctx, cs.task, "", api.QueryCallInput, cs.call, a.id)
	var in api.CallInput
	if err != nil || v.Get(&in) != nil || in.AskID != a.id {
		return nil, false, nil
	}
	if in.Refused != "" {
		return nil, true, fmt.Errorf("%s", in.Refused)
	}
	ans, err := seal.Open(a.priv, in.Peer, in.Sealed)
	if err != nil {
		return nil, true, fmt.Errorf("the client's answer through the task: %w", err)
	}
	return ans, true, nil
}

// mrtrSink makes the relay's sampling and elicitation of a call go to its
// 2026-07-28 client by multi round trip.
func (g *Gateway) mrtrSink(cs *callSink, sample *func(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error),
	elicit *func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)) {
	*sample = func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
		raw, err := g.askClient(ctx, cs, p)
		if err != nil {
			return nil, err
		}
		return relay.SampleAnswer(raw)
	}
	*elicit = func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
		raw, err := g.askClient(ctx, cs, p)
		if err != nil {
			return nil, err
		}
		var r mcp.ElicitResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("the client's elicitation answer: %w", err)
		}
		return &r, nil
	}
}

// resumeState checks the requestState of a tools/call that answers an
// input-required result: it must be this gateway's, for a call of the
// caller's task. It returns the call to resume ("" when the request
// answers nothing).
func (g *Gateway) resumeState(req *mcp.CallToolRequest, taskID, principal string) (*askState, error) {
	if req.Params.RequestState == "" {
		if len(req.Params.InputResponses) > 0 {
			return nil, errors.New("inputResponses without requestState: send back the requestState of the input-required result they answer")
		}
		return nil, nil
	}
	s, err := g.decodeAskState(req.Params.RequestState)
	if err != nil {
		return nil, err
	}
	if s.Task != taskID || s.Principal != principal {
		return nil, fmt.Errorf("requestState belongs to a call of another task or caller than this request's (task %s); call the tool again without it", taskID)
	}
	if s.Tool != req.Params.Name {
		return nil, fmt.Errorf("requestState was issued for a call of %q, not %q: send it back with the request that got it (tools/call of %q), or call %q again without it", s.Tool, req.Params.Name, s.Tool, req.Params.Name)
	}
	for _, id := range s.Asks {
		if _, ok := req.Params.InputResponses[id]; !ok {
			return nil, fmt.Errorf("inputResponses has no answer for %q, which the input-required result asked for", id)
		}
	}
	return &s, nil
}

// deliverAnswers hands the client's answers to the upstream requests
// waiting for them. An answer whose request no longer waits (it timed
// out, or the call ended) is an error the client can act on.
func (g *Gateway) deliverAnswers(req *mcp.CallToolRequest, s *askState) error {
	for _, id := range s.Asks {
		raw, err := json.Marshal(req.Params.InputResponses[id])
		if err != nil {
			return fmt.Errorf("inputResponses[%q]: %v", id, err)
		}
		if v, ok := g.asks.Load(id); ok { // it waits in this process
			select {
			case v.(*ask).answer <- raw:
			default: // answered already (a client retried its answer)
			}
			continue
		}
		// It waits in another process: an activity with no gateway, or
		// another gateway replica (combined deployment); either reads the
		// answer from the task.
		key, ok := s.Keys[id]
		if !ok {
			return fmt.Errorf("the upstream request %s no longer waits for an answer (it timed out, or the call ended); the call %s goes on in task %s without it", id, s.Call, s.Task)
		}
		if err := g.sendInput(s.Task, s.Call, id, key, raw, ""); err != nil {
			return fmt.Errorf("the answer to %s did not reach task %s: %v; call the tool again with the same inputResponses and requestState", id, s.Task, err)
		}
	}
	return nil
}

// inputRequired is the result that asks a 2026-07-28 client for input on
// behalf of a call's upstream, answering a tools/call of tool.
func (g *Gateway) inputRequired(taskID, callID, principal, tool string, asks []*ask) *mcp.CallToolResult {
	s := askState{Task: taskID, Call: callID, Principal: principal, Tool: tool}
	reqs := mcp.InputRequestMap{}
	for _, a := range asks {
		s.Asks = append(s.Asks, a.id)
		reqs[a.id] = a.req
		if a.key != nil {
			if s.Keys == nil {
				s.Keys = map[string][]byte{}
			}
			s.Keys[a.id] = a.key
		}
	}
	return &mcp.CallToolResult{InputRequests: reqs, RequestState: g.encodeAskState(s),
		Meta: mcp.Meta{MetaTask: taskID, MetaCall: callID}}
}

// watchAsks ends wctx's wait (cause errAsked) when the call's upstream
// asks the client for input; finish stops watching and returns what it
// asked (nothing when wctx ended otherwise).
func watchAsks(wctx context.Context, cs *callSink) (ictx context.Context, finish func() []*ask) {
	if cs.asked == nil {
		return wctx, func() []*ask { return nil }
	}
	ictx, cancel := context.WithCancelCause(wctx)
	var got *ask
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case got = <-cs.asked:
			cancel(errAsked)
		case <-ictx.Done():
		}
	}()
	return ictx, func() []*ask {
		cancel(nil)
		<-done
		cs.stopWaiting() // a request offered from now on is not taken here
		if got == nil {
			return nil
		}
		return []*ask{got}
	}
}

// sendInput gives an activity in another process the client's answer to
// its upstream's request (or why none comes), sealed to the activity's
// key, through the task (api.SignalCallInput). The signal is recorded in
// the task's history; only the activity can open what it carries.
func (g *Gateway) sendInput(task, call, askID string, key, answer []byte, refused string) error {
	in := api.CallInput{CallID: call, AskID: askID, Refused: refused}
	if refused == "" {
		peer, sealed, err := seal.Seal(key, answer)
		if err != nil {
			return err
		}
		in.Peer, in.Sealed = peer, sealed
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return g.opts.Temporal.SignalWorkflow(ctx, task, "", api.SignalCallInput, in)
}

// remoteAsk turns a request an activity in another process published in
// its heartbeats into an ask.
func remoteAsk(ca api.CallAsk) (*ask, error) {
	var req mcp.InputRequest
	switch ca.Kind {
	case "elicitation":
		req = new(mcp.ElicitParams)
	case "sampling":
		req = new(mcp.CreateMessageParams)
	default:
		return nil, fmt.Errorf("unknown request kind %q", ca.Kind)
	}
	if err := json.Unmarshal(ca.Request, req); err != nil {
		return nil, fmt.Errorf("%s request: %w", ca.Kind, err)
	}
	return &ask{id: ca.ID, req: req, key: ca.Key}, nil
}

// forwardAsk takes a request of a call's upstream that an activity in
// another process published (heartbeatProgress) to the call's client: to
// the waiting tools/call of a 2026-07-28 client, which answers
// input-required, or as a request on the client's session, whose answer
// goes back through the task at once.
func (g *Gateway) forwardAsk(ctx context.Context, ss *mcp.ServerSession, taskID, callID string, cs *callSink, ca api.CallAsk) {
	a, err := remoteAsk(ca)
	if err != nil {
		_ = g.sendInput(taskID, callID, ca.ID, nil, nil, "airlock could not forward the request: "+err.Error())
		return
	}
	if cs.viaTasks {
		return // tasks/get reports it, tasks/update answers it
	}
	if cs.asked != nil {
		select {
		case cs.asked <- a:
		case <-cs.ended: // the client stopped waiting: the request times out in the activity
		case <-ctx.Done():
		}
		return
	}
	go func() {
		var res any
		var err error
		switch p := a.req.(type) {
		case *mcp.ElicitParams:
			res, err = ss.Elicit(ctx, p)
		case *mcp.CreateMessageParams:
			res, err = ss.CreateMessage(ctx, p)
		}
		var raw []byte
		refused := ""
		if err == nil {
			raw, err = json.Marshal(res)
		}
		if err != nil {
			refused = "the client answered with an error: " + err.Error()
		}
		if err := g.sendInput(taskID, callID, ca.ID, ca.Key, raw, refused); err != nil {
			g.log.Warn().Err(err).Str("task", taskID).Str("call", callID).Msg("giving the client's answer to the task failed")
		}
	}()
}

// callAsks returns the requests of a call's upstream that wait for the
// client's answer through the task, from its activity's heartbeats (any
// process), leaving out those whose answer the task already holds.
func (g *Gateway) callAsks(ctx context.Context, task, call string) []api.CallAsk {
	desc, err := g.opts.Temporal.DescribeWorkflowExecution(ctx, task, "")
	if err != nil {
		return nil
	}
	var out []api.CallAsk
	for _, pa := range desc.GetPendingActivities() {
		if pa.GetActivityType().GetName() != api.CallToolName || len(pa.GetHeartbeatDetails().GetPayloads()) == 0 {
			continue
		}
		var cp api.CallProgress
		if converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &cp) != nil || cp.CallID != call {
			continue
		}
		for _, ca := range cp.Asks {
			// A heartbeat may still list a request the activity is about
			// to take the answer to.
			var in api.CallInput
			if v, err := g.opts.Temporal.QueryWorkflow(ctx, task, "", api.QueryCallInput, call, ca.ID); err == nil && v.Get(&in) == nil && in.AskID == ca.ID {
				continue
			}
			out = append(out, ca)
		}
	}
	return out
}

// pendingInputs is the inputRequests of a call waiting for the client's
// answer, as tasks/get reports them (Tasks extension).
func (g *Gateway) pendingInputs(ctx context.Context, task, call string) mcp.InputRequestMap {
	var reqs mcp.InputRequestMap
	for _, ca := range g.callAsks(ctx, task, call) {
		if a, err := remoteAsk(ca); err == nil {
			if reqs == nil {
				reqs = mcp.InputRequestMap{}
			}
			reqs[a.id] = a.req
		}
	}
	return reqs
}

// updateTask answers tasks/update (Tasks extension): each answer goes to
// the request of the call's upstream it names, through the task.
func (g *Gateway) updateTask(ctx context.Context, task, call string, answers map[string]json.RawMessage) *jsonrpc.Error {
	if len(answers) == 0 {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "params.inputResponses is empty: answer the inputRequests that tasks/get reports"}
	}
	keys := map[string][]byte{}
	for _, ca := range g.callAsks(ctx, task, call) {
		keys[ca.ID] = ca.Key
	}
	for id := range answers {
		if keys[id] == nil {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("task %s~%s has no input request %q waiting (answered already, timed out, or never asked); tasks/get lists those that wait", task, call, id)}
		}
	}
	for id, raw := range answers {
		if err := g.sendInput(task, call, id, keys[id], raw, ""); err != nil {
			return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("giving the answer to %s to task %s: %v", id, task, err)}
		}
	}
	return nil
}
