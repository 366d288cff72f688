// Package relay connects one tool call's two ends while it runs: the
// gateway's MCP session with the client that made the call, and the
// worker's activity calling the upstream. Through it, what the upstream
// sends during the call (progress, log messages, sampling and elicitation
// requests) reaches the client, and the client's progress token reaches
// the upstream.
//
// The gateway registers a [Sink] for each call it waits on, keyed by task
// and call ID (the Update ID, which the workflow passes to the activity);
// the activity looks it up. This is an in-process path: it works when the
// gateway and the worker share a process (airlock dev, or a deployment
// running both in one process). A worker with no gateway in its process
// reports progress, log messages and sampling/elicitation requests in its
// heartbeat details instead, and reads the client's answers from the task
// (see RATIONALE.md, "Relaying what an upstream sends during a call").
package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrNotWaiting is what a Sink's Sample or Elicit returns when the client
// stopped waiting on the call before the request reached it: the request
// was not shown to anyone, and the activity asks through the task instead.
var ErrNotWaiting = errors.New("the client that made this call is no longer waiting for it")

// Sink is the client's end of one call. Any function may be nil.
type Sink struct {
	// ProgressToken is the client's progressToken (nil: it sent none).
	ProgressToken any
	Progress      func(p *mcp.ProgressNotificationParams)
	Log           func(p *mcp.LoggingMessageParams)
	Sample        func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	Elicit        func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error)
	// Cancelled is closed when the client cancels the call
	// (notifications/cancelled): the activity then cancels its upstream
	// call and reports the call cancelled. Nil: never.
	Cancelled <-chan struct{}
}

// Hub holds the sinks of the calls in flight. The zero value is not
// usable; a nil *Hub holds nothing.
type Hub struct {
	mu    sync.Mutex
	sinks map[string]*Sink
}

// New returns an empty hub.
func New() *Hub { return &Hub{sinks: map[string]*Sink{}} }

func key(task, call string) string { return task + "\x00" + call }

// Register makes s the sink of the call until the returned function is
// called.
func (h *Hub) Register(task, call string, s *Sink) (unregister func()) {
	if h == nil {
		return func() {}
	}
	k := key(task, call)
	h.mu.Lock()
	h.sinks[k] = s
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		if h.sinks[k] == s {
			delete(h.sinks, k)
		}
		h.mu.Unlock()
	}
}

// Lookup returns the sink of a call, or nil.
func (h *Hub) Lookup(task, call string) *Sink {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sinks[key(task, call)]
}

// SampleAnswer decodes a client's answer to a sampling request that came
// back as JSON (by multi round trip, or sealed through the task): a
// CreateMessageResult, or the with-tools shape a go-sdk client sends,
// whose one content block the upstream's request takes.
func SampleAnswer(raw json.RawMessage) (*mcp.CreateMessageResult, error) {
	var probe struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("the client's sampling answer: %w", err)
	}
	if !bytes.HasPrefix(bytes.TrimSpace(probe.Content), []byte("[")) {
		var r mcp.CreateMessageResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("the client's sampling answer: %w", err)
		}
		return &r, nil
	}
	var wt mcp.CreateMessageWithToolsResult
	if err := json.Unmarshal(raw, &wt); err != nil {
		return nil, fmt.Errorf("the client's sampling answer: %w", err)
	}
	if len(wt.Content) != 1 {
		return nil, fmt.Errorf("the client's sampling answer has %d content blocks; the upstream's request takes one", len(wt.Content))
	}
	return &mcp.CreateMessageResult{Meta: wt.Meta, Content: wt.Content[0], Model: wt.Model, Role: wt.Role, StopReason: wt.StopReason}, nil
}
