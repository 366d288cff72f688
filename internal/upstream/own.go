package upstream

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A call of its own: MCP's log messages and server-to-client requests name
// no request, so on the shared session they are given to a call only when
// it is the only one in flight (hooks.go). A call whose hooks set Own, to
// an HTTP upstream, runs on an MCP session opened for it alone and closed
// after it: whatever the upstream sends on that session is that call's,
// however many others run. It costs a handshake (initialize, the logging
// level, and closing the session) per call, so the worker asks for it only
// for tools whose manifest lets the upstream ask the client (sampling or
// elicitation), where a wrong guess would ask the wrong person. A stdio
// upstream is one process with its own state: a session per call would be
// a process per call, with none of the state the shared one built, so its
// calls keep the shared session and its limit. See RATIONALE.md, "Why are
// log messages and sampling/elicitation given only to a lone call?".

// ownCall runs one call on a session of its own.
func (u *upstream) ownCall(ctx context.Context, tool string, args json.RawMessage, h *CallHooks) (*mcp.CallToolResult, error) {
	// The shared session tells whether the upstream is up and has the tool.
	waitCtx, cancel := context.WithTimeout(ctx, maxCallWait)
	defer cancel()
	_, tools, err := u.await(waitCtx)
	if err != nil {
		return nil, err
	}
	if !hasTool(tools, tool) {
		return nil, newCallError(ErrNotSent, nil, "upstream %s has no tool %q", u.name, tool)
	}
	c := mcp.NewClient(u.pool.opts.ClientInfo, &mcp.ClientOptions{
		Capabilities: rootsCaps(&mcp.ClientCapabilities{
			Sampling:    &mcp.SamplingCapabilities{},
			Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}},
		}, u.cfg),
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			if h.Sample == nil {
				return nil, fmt.Errorf("%w: sampling is not available for this call", ErrNoCall)
			}
			return h.Sample(ctx, req.Params)
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if h.Progress != nil && req.Params != nil {
				u.safely("progress", func() { h.Progress(req.Params) })
			}
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			if h.Log != nil && req.Params != nil {
				u.safely("log message", func() { h.Log(req.Params) })
			}
		},
	})
	addRoots(c, u.cfg)
	// As on the shared session: the request goes to the call's hooks before
	// the SDK's client judges its schema (elicitMiddleware).
	c.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if er, ok := req.(*mcp.ElicitRequest); ok && method == "elicitation/create" {
				if h.Elicit == nil {
					return nil, fmt.Errorf("%w: elicitation is not available for this call", ErrNoCall)
				}
				return h.Elicit(ctx, er.Params)
			}
			return next(ctx, method, req)
		}
	})
	timeout := u.cfg.ConnectTimeout.D()
	if timeout <= 0 {
		timeout = defaultConnectTimeout
	}
	cctx, cancelConnect := context.WithTimeout(ctx, timeout)
	defer cancelConnect()
	var copts *mcp.ClientSessionOptions
	if v := u.cfg.ProtocolVersion; v != "" {
		copts = &mcp.ClientSessionOptions{ProtocolVersion: v}
	}
	cs, err := c.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: u.cfg.HTTP.URL, HTTPClient: u.httpClient, MaxRetries: 1}, copts)
	if err != nil {
		return nil, newCallError(ErrNotSent, err, "upstream %s: tool %s not sent: opening a session for the call: %v", u.name, tool, err)
	}
	defer func() { _ = cs.Close() }()
	u.setLogLevel(cctx, cs)
	s := &session{cs: cs, isHTTP: true, calls: context.WithoutCancel(ctx)}
	marker := &sendMarker{}
	res, cause, err := s.callTool(ctx, tool, args, h.ProgressToken, marker)
	if err != nil {
		cerr, _ := u.classify(ctx, s, tool, err, cause, marker)
		return nil, cerr
	}
	return res, nil
}
