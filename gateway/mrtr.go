package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Sampling and elicitation for clients of protocol 2026-07-28 (multi round
// trip, SEP-2322): such a client cannot take a request from the server
// while its call runs. When the call's upstream asks for something, the
// tools/call answers at once with an input-required result carrying the
// upstream's request (InputRequests) and a signed RequestState naming the
// call; the client's next tools/call carries the answer (InputResponses)
// and that state, and the gateway hands the answer to the upstream, which
// has been waiting for it inside the same activity, and waits on the same
// call again (its Update ID). See RATIONALE.md, "How does an upstream's
// sampling or elicitation reach a 2026-07-28 client?".

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
	answer chan json.RawMessage // the client's InputResponse, once
}

// askState is what the RequestState of an input-required result carries:
// the call the answers resume, whose task and principal they must come
// from, and the requests they answer.
type askState struct {
	Task      string   `json:"t"`
	Call      string   `json:"c"`
	Principal string   `json:"p"`
	Asks      []string `json:"a"`
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
	select {
	case ans := <-a.answer:
		return ans, nil
	case <-timer.C:
		return nil, fmt.Errorf("the client did not answer within %s (a 2026-07-28 client answers by calling the tool again with inputResponses)", timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// sampleAnswer turns a client's sampling answer (a go-sdk client sends the
// with-tools shape) into the result an upstream's sampling request takes.
func sampleAnswer(raw json.RawMessage) (*mcp.CreateMessageResult, error) {
	var wt mcp.CreateMessageWithToolsResult
	if err := json.Unmarshal(raw, &wt); err != nil {
		return nil, fmt.Errorf("the client's sampling answer: %w", err)
	}
	if len(wt.Content) != 1 {
		return nil, fmt.Errorf("the client's sampling answer has %d content blocks; the upstream takes one", len(wt.Content))
	}
	return &mcp.CreateMessageResult{Meta: wt.Meta, Content: wt.Content[0], Model: wt.Model, Role: wt.Role, StopReason: wt.StopReason}, nil
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
		return sampleAnswer(raw)
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
		v, ok := g.asks.Load(id)
		if !ok {
			return fmt.Errorf("the upstream request %s no longer waits for an answer (it timed out, the call ended, or it waits on another gateway replica); the call %s goes on in task %s without it", id, s.Call, s.Task)
		}
		select {
		case v.(*ask).answer <- raw:
		default: // answered already (a client retried its answer)
		}
	}
	return nil
}

// inputRequired is the result that asks a 2026-07-28 client for input on
// behalf of a call's upstream.
func (g *Gateway) inputRequired(taskID, callID, principal string, asks []*ask) *mcp.CallToolResult {
	s := askState{Task: taskID, Call: callID, Principal: principal}
	reqs := mcp.InputRequestMap{}
	for _, a := range asks {
		s.Asks = append(s.Asks, a.id)
		reqs[a.id] = a.req
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
		if got == nil {
			return nil
		}
		return []*ask{got}
	}
}
