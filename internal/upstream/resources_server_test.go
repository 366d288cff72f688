package upstream

import (
	"context"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The test server's resources, template and prompts (added by
// newTestServer). PageSize 2 makes each list take two pages.
var (
	testResourceURIs = []string{"test://a", "test://b", "test://c"}
	testTemplate     = "test://items/{id}"
	testPromptNames  = []string{"empty", "farewell", "greet"}
)

// testSubscribers counts the subscriptions the test server holds per URI.
type testSubscribers struct {
	mu sync.Mutex
	n  map[string]int
}

func (t *testSubscribers) add(uri string, d int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if uri == "test://refused" {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no subscriptions to " + uri}
	}
	t.n[uri] += d
	return nil
}

func (t *testSubscribers) count(uri string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[uri]
}

type touchIn struct {
	URI string `json:"uri"`
}

func addTestResources(s *mcp.Server, subs *testSubscribers) {
	for _, uri := range testResourceURIs {
		s.AddResource(&mcp.Resource{URI: uri, Name: uri[len("test://"):], MIMEType: "text/plain"},
			func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "content of " + req.Params.URI}}}, nil
			})
	}
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: testTemplate, Name: "item", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			if req.Params.URI == "test://items/missing" {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "item " + req.Params.URI[len("test://items/"):]}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Description: "Greets someone.", Arguments: []*mcp.PromptArgument{{Name: "name", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Description: "a greeting", Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.TextContent{Text: "Hello, " + req.Params.Arguments["name"] + "!"}},
			}}, nil
		})
	for _, name := range []string{"empty", "farewell"} {
		s.AddPrompt(&mcp.Prompt{Name: name}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: name}}}}, nil
		})
	}
	mcp.AddTool(s, &mcp.Tool{Name: "touch"}, func(ctx context.Context, _ *mcp.CallToolRequest, in touchIn) (*mcp.CallToolResult, any, error) {
		_ = s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: in.URI})
		return textResult(fmt.Sprintf("subscribers %d", subs.count(in.URI))), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "add_resource"}, func(_ context.Context, _ *mcp.CallToolRequest, in touchIn) (*mcp.CallToolResult, any, error) {
		s.AddResource(&mcp.Resource{URI: in.URI, Name: "added"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: in.URI, Text: "added"}}}, nil
		})
		return textResult("added"), nil, nil
	})
}
