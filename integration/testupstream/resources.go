package main

import (
	"context"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The resources and prompt of testupstream, for the pass-through tests: the
// resource mem://note (a note that the tool set_note replaces, notifying
// subscribers with notifications/resources/updated), the template
// mem://notes/{id}, and the prompt summarize.

const noteURI = "mem://note"

var (
	noteMu sync.Mutex
	note   = "remember the milk"
)

type setNoteIn struct {
	Text string `json:"text" jsonschema:"the new text of mem://note"`
}

// serverOptions accepts resource subscriptions; the SDK keeps track of the
// subscribers.
func serverOptions() *mcp.ServerOptions {
	return &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	}
}

func addResources(s *mcp.Server) {
	s.AddResource(&mcp.Resource{URI: noteURI, Name: "note", Title: "The note", Description: "A short note; set_note replaces it.", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			noteMu.Lock()
			defer noteMu.Unlock()
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: noteURI, MIMEType: "text/plain", Text: note}}}, nil
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "mem://notes/{id}", Name: "numbered note", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			id := strings.TrimPrefix(req.Params.URI, "mem://notes/")
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "note number " + id}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "summarize", Description: "Summarize a topic.",
		Arguments: []*mcp.PromptArgument{{Name: "topic", Description: "what to summarize", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Description: "A summary request.", Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.TextContent{Text: "Summarize " + req.Params.Arguments["topic"] + " in three bullet points."}},
			}}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "set_note", Description: "Replace the text of mem://note."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in setNoteIn) (*mcp.CallToolResult, any, error) {
			noteMu.Lock()
			note = in.Text
			noteMu.Unlock()
			if err := s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: noteURI}); err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "note set"}}}, nil, nil
		})
}
