package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/manifests"
)

// askPool is a pool connected over HTTP to newAskServer, server "ask".
func askPool(t *testing.T, release <-chan struct{}, holding chan<- struct{}) *Pool {
	t.Helper()
	srv := newAskServer(release, holding)
	t.Cleanup(srv.Close)
	p := startPool(t, []manifests.Server{{Name: "ask", HTTP: &manifests.HTTPServer{URL: srv.URL}, ProtocolVersion: "2025-11-25"}}, testOptions())
	waitState(t, p, "ask", StateConnected)
	return p
}

// newAskServer serves "ask", which logs, reports progress, elicits and
// answers with its progress token and the elicited name, and "hold",
// which runs until release is closed.
func newAskServer(release <-chan struct{}, holding chan<- struct{}) *httptest.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "ask", Version: "1"}, &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Logging: &mcp.LoggingCapabilities{}}})
	s.AddTool(&mcp.Tool{Name: "ask", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "asking"})
		tok := req.Params.GetProgressToken()
		if tok != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2})
		}
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "name?", RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%v %v", tok, res.Content["name"])}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "hold", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		holding <- struct{}{}
		<-release
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "held"}}}, nil
	})
	// 2025-11-25: the tool elicits with a request during the call.
	return httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
}

// recorder is a call's hooks that remember what they got.
type recorder struct {
	mu       sync.Mutex
	logs     []string
	progress []float64
}

func (r *recorder) hooks(token any) *CallHooks {
	return &CallHooks{
		ProgressToken: token,
		Progress: func(p *mcp.ProgressNotificationParams) {
			r.mu.Lock()
			r.progress = append(r.progress, p.Progress)
			r.mu.Unlock()
		},
		Log: func(p *mcp.LoggingMessageParams) {
			r.mu.Lock()
			r.logs = append(r.logs, fmt.Sprint(p.Data))
			r.mu.Unlock()
		},
		Elicit: func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ada"}}, nil
		},
	}
}

// TestCallHooks checks what an upstream sends during a call: with one call
// in flight its log message, progress (under the caller's token, which
// reaches the upstream) and elicitation go to that call's hooks; with a
// second call in flight, the elicitation is refused and the log message
// dropped, as neither can be attributed for sure.
func TestCallHooks(t *testing.T) {
	release, holding := make(chan struct{}), make(chan struct{}, 1)
	p := askPool(t, release, holding)
	ctx := context.Background()

	var alone recorder
	res, err := p.CallTool(WithHooks(ctx, alone.hooks("tok-1")), "ask", "ask", json.RawMessage(`{}`))
	if err != nil || res.IsError || resultText(res) != "tok-1 ada" {
		t.Fatalf("ask alone: %v %+v", err, res)
	}
	testenv.WaitFor(t, "the log message and progress", hang, func() bool {
		alone.mu.Lock()
		defer alone.mu.Unlock()
		return len(alone.logs) == 1 && len(alone.progress) == 1
	})

	held := make(chan error, 1)
	go func() {
		_, err := p.CallTool(ctx, "ask", "hold", json.RawMessage(`{}`))
		held <- err
	}()
	<-holding
	var crowded recorder
	res, err = p.CallTool(WithHooks(ctx, crowded.hooks(nil)), "ask", "ask", json.RawMessage(`{}`))
	close(release)
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "while 2 calls to it are in flight") {
		t.Fatalf("ask beside another call: %v %+v, want the elicitation refused", err, res)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	crowded.mu.Lock()
	defer crowded.mu.Unlock()
	if len(crowded.logs) != 0 {
		t.Errorf("a log message was attributed while two calls were in flight: %v", crowded.logs)
	}
}
