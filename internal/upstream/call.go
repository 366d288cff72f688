package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/tracing"
)

// Every error from [Pool.CallTool] wraps exactly one of these.
var (
	// ErrNotSent means the request never reached the upstream (or reached
	// it without being processed, such as an expired HTTP session), so
	// retrying is always safe.
	ErrNotSent = errors.New("request not sent to upstream")

	// ErrRejected means the upstream received the request and refused it
	// with a JSON-RPC error; the tool did not run.
	ErrRejected = errors.New("request rejected by upstream")

	// ErrOutcomeUnknown means the request may have reached the upstream but
	// no reply came: the tool may or may not have run.
	ErrOutcomeUnknown = errors.New("upstream outcome unknown")
)

// maxSendAttempts bounds how often CallTool re-sends a request that
// provably never left, each time on a new session.
const maxSendAttempts = 3

// codeTransportRejected is the SDK's local "rejected by transport" code: a
// request its HTTP transport failed to deliver, never a server's answer.
const codeTransportRejected = -32005

// callError carries a classification sentinel and the cause while keeping
// the message free of sentinel boilerplate.
type callError struct {
	kind  error
	msg   string
	cause error
}

func (e *callError) Error() string { return e.msg }

func (e *callError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

func newCallError(kind, cause error, format string, args ...any) error {
	return &callError{kind: kind, cause: cause, msg: fmt.Sprintf(format, args...)}
}

// CallTool calls tool on server over the server's shared session and
// returns the upstream's result; a result with IsError set is the tool's
// own failure and is returned as a result, not an error.
//
// If the server is not connected, CallTool waits for it for at most 5s
// (less if ctx expires sooner). Errors wrap ErrNotSent, ErrRejected or
// ErrOutcomeUnknown; see their docs. Requests that provably never left
// (a closed connection, a refused HTTP dial) are retried on the next
// session within the same wait.
func (p *Pool) CallTool(ctx context.Context, server, tool string, args json.RawMessage) (res *mcp.CallToolResult, err error) {
	ctx, endSpan := traceCall(ctx, server, tool) // trace.go
	defer func() { endSpan(res, err) }()
	u := p.get(server)
	if u == nil {
		return nil, newCallError(ErrNotSent, nil, "unknown upstream %q", server)
	}
	if started, closed := p.isStarted(); closed {
		return nil, newCallError(ErrNotSent, nil, "upstream %s unavailable: pool closed", server)
	} else if !started {
		return nil, newCallError(ErrNotSent, nil, "upstream %s unavailable: pool not started", server)
	}
	if t := bytes.TrimSpace(args); len(t) > 0 && (t[0] != '{' || !json.Valid(t)) {
		return nil, newCallError(ErrNotSent, nil, "upstream %s: tool %s: arguments must be a JSON object", server, tool)
	}
	if err := ctx.Err(); err != nil {
		return nil, newCallError(ErrNotSent, err, "upstream %s: tool %s not sent: %v", server, tool, err)
	}
	if _, ok := callBearer(ctx); u.cfg.ActsAsUser() && !ok {
		// Fail closed: never as airlock (or nobody) where the user is meant.
		if u.cfg.UsesUserOAuth() {
			return nil, errNoUserCredential() // useroauth.go
		}
		return nil, errNoUserToken()
	}

	// Every call is counted in flight, hooks or not, so that a log message
	// or request is attributed only when one call can have caused it.
	h := hooksFrom(ctx)
	if h == nil {
		h = &CallHooks{}
	}
	if h.Own && u.cfg.HTTP != nil {
		return u.ownCall(ctx, tool, args, h) // not on the shared session: not counted there (own.go)
	}
	token, leave := u.calls.enter(h)
	defer leave()

	waitCtx, cancel := context.WithTimeout(ctx, maxCallWait)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s, tools, err := u.await(waitCtx)
		if err != nil {
			return nil, err
		}
		if !hasTool(tools, tool) {
			return nil, newCallError(ErrNotSent, nil, "upstream %s has no tool %q", server, tool)
		}
		marker := &sendMarker{}
		res, cause, err := s.callTool(ctx, tool, args, token, marker)
		if err == nil {
			return res, nil
		}
		cerr, broken := u.classify(ctx, s, tool, err, cause, marker)
		if !broken {
			return nil, cerr
		}
		u.markBroken(s, err.Error())
		if waitCtx.Err() != nil || attempt+1 >= maxSendAttempts {
			return nil, cerr
		}
	}
}

// await returns the connected session, waiting until waitCtx is done.
func (u *upstream) await(waitCtx context.Context) (*session, []*mcp.Tool, error) {
	for {
		u.mu.Lock()
		if u.st.State == StateConnected && u.sess != nil && u.sess.ctx.Err() == nil {
			s, tools := u.sess, u.st.Tools
			u.mu.Unlock()
			return s, tools, nil
		}
		if u.st.State == StateStopped {
			u.mu.Unlock()
			return nil, nil, newCallError(ErrNotSent, nil, "upstream %s unavailable: pool closed", u.name)
		}
		ch := u.changed
		u.mu.Unlock()
		select {
		case <-ch:
		case <-waitCtx.Done():
			return nil, nil, u.unavailableError()
		}
	}
}

func (u *upstream) unavailableError() error {
	u.mu.Lock()
	st := u.st
	u.mu.Unlock()
	msg := fmt.Sprintf("upstream %s unavailable", u.name)
	switch {
	case st.State == StateUnavailable && st.Reason != "":
		msg += ": " + st.Reason
		if !st.NextRetry.IsZero() {
			if d := time.Until(st.NextRetry); d > 0 {
				msg += "; next retry in " + roundDuration(d).String()
			} else {
				msg += "; retrying now"
			}
		}
	case st.Reason != "":
		msg += ": still connecting (last error: " + st.Reason + ")"
	default:
		msg += ": still connecting"
	}
	return newCallError(ErrNotSent, nil, "%s", msg)
}

func roundDuration(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(10 * time.Millisecond)
}

func hasTool(tools []*mcp.Tool, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// callTool sends one tools/call. cause is non-nil when the call's context
// ended (caller deadline, or the session was abandoned).
func (s *session) callTool(ctx context.Context, tool string, args json.RawMessage, token any, m *sendMarker) (res *mcp.CallToolResult, cause, err error) {
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.calls, func() { cancel(context.Cause(s.calls)) })
	defer stop()
	params := &mcp.CallToolParams{Name: tool}
	if len(bytes.TrimSpace(args)) > 0 {
		params.Arguments = args
	}
	if k := IdempotencyKey(ctx); k != "" {
		params.Meta = mcp.Meta{MetaIdempotencyKey: k}
	}
	if token != nil {
		// Not SetProgressToken: it panics on a JSON number (float64),
		// which is how a client's numeric token arrives.
		if params.Meta == nil {
			params.Meta = mcp.Meta{}
		}
		params.Meta["progressToken"] = token
	}
	// On 2026-07-28 the log level travels with each request: ask for
	// every level, the gateway filters at the client's (hooks.go).
	if protocolVersion(s.cs) >= protocolListen {
		if params.Meta == nil {
			params.Meta = mcp.Meta{}
		}
		params.Meta[mcp.MetaKeyLogLevel] = "debug"
	}
	// SEP-414: the upstream's own spans can join the call's trace.
	params.Meta = tracing.InjectMeta(ctx, params.Meta)
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("mcp client panicked: %v", r)
			}
		}()
		res, err = s.cs.CallTool(withSendMarker(callCtx, m), params)
	}()
	if err != nil && callCtx.Err() != nil {
		cause = context.Cause(callCtx)
	}
	return res, cause, err
}

// classify maps an SDK error to one of the sentinels. broken reports that
// the session can no longer carry requests and the call was not sent, so
// it may be retried on the next session.
func (u *upstream) classify(ctx context.Context, s *session, tool string, err, cause error, m *sendMarker) (_ error, broken bool) {
	var wireErr *jsonrpc.Error
	hasWire := errors.As(err, &wireErr)
	switch {
	case errors.Is(err, mcp.ErrConnectionClosed), errors.Is(err, mcp.ErrSessionMissing):
		// The SDK reports these only before writing (or when the server
		// answered that it is closing, or has no such session).
		return newCallError(ErrNotSent, err, "upstream %s: tool %s not sent: %v", u.name, tool, err), true

	case cause != nil:
		if s.isHTTP && !m.wrote.Load() {
			return newCallError(ErrNotSent, cause, "upstream %s: tool %s not sent: %v", u.name, tool, cause), false
		}
		if ctx.Err() != nil {
			return newCallError(ErrOutcomeUnknown, cause, "upstream %s: tool %s: no reply before %v; the call may have run", u.name, tool, cause), false
		}
		return newCallError(ErrOutcomeUnknown, cause, "upstream %s: tool %s: connection lost while waiting for the reply (%v); the call may have run", u.name, tool, cause), false

	case hasWire && wireErr.Code != codeTransportRejected:
		return newCallError(ErrRejected, err, "upstream %s rejected tool %s: %s (code %d)", u.name, tool, wireErr.Message, wireErr.Code), false

	case hasWire && s.isHTTP && !m.wrote.Load():
		return newCallError(ErrNotSent, err, "upstream %s: tool %s not sent: %v", u.name, tool, err), true

	default:
		if rerr := m.resumeError(); rerr != nil {
			return newCallError(ErrOutcomeUnknown, err, "upstream %s: tool %s: %v (%v); the call may have run", u.name, tool, err, rerr), false
		}
		return newCallError(ErrOutcomeUnknown, err, "upstream %s: tool %s: %v; the call may have run", u.name, tool, err), false
	}
}

// MetaIdempotencyKey is the _meta key under which a call's idempotency key
// travels to the upstream (and from agents to the gateway). MCP has no
// standard one; an upstream that honours it turns airlock's at-least-once
// delivery (a retry after a worker died) into an exactly-once effect.
const MetaIdempotencyKey = "airlock.dev/idempotency-key"

// MetaUnavailable is the _meta key under which a wasm server (package
// internal/sandbox/toolserver) marks a tool it lists but cannot run, with
// the reason as its value: its module failed to load, and the server's
// other tools are served. The gateway shows the reason in the tool's
// description. It is honoured for wasm servers only, which are airlock's
// own; an upstream cannot use it to put text in a description.
const MetaUnavailable = "airlock.dev/unavailable"

type idemKey struct{}

// WithIdempotencyKey makes CallTool send key as the call's idempotency key.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idemKey{}, key)
}

// IdempotencyKey is the key WithIdempotencyKey set ("" if none).
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(idemKey{}).(string)
	return k
}
