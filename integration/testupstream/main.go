// Command testupstream is an MCP server for airlock's end-to-end tests and
// benchmarks: a cheap tool (echo), slow tools that record every execution in
// a side-effect log (append is declared non-idempotent, put idempotent), and
// a tool returning every content type, one returning its raw arguments
// (rawargs), and a resource, a resource template
// and a prompt (resources.go). It serves stdio, or streamable HTTP with
// -http.
//
// For the tool-pinning tests its definitions can change: ECHO_DESCRIPTION
// sets echo's description at start, and TOOLS_FILE names a JSON file,
// re-read every 100ms, whose {"echo_description": "...", "extra_tools":
// ["name", ...]} re-registers echo with that description and adds echo-like
// tools, notifying clients (tools/list_changed) as a live server would.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"text to echo back"`
}

type progressIn struct {
	Steps      int `json:"steps" jsonschema:"how many progress notifications"`
	IntervalMS int `json:"interval_ms" jsonschema:"the time between them"`
}

type askLaterIn struct {
	Message string `json:"message"`
	DelayMS int    `json:"delay_ms,omitempty"`
}

type effectIn struct {
	Key     string `json:"key" jsonschema:"identifies the side effect in the log"`
	SleepMS int    `json:"sleep_ms,omitempty" jsonschema:"how long the tool takes"`
}

type effectOut struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
}

var logMu sync.Mutex

// record appends "tool key" to the side-effect log and returns how many
// times this tool ran for key.
func record(tool, key string) int {
	path := os.Getenv("SIDE_EFFECT_LOG")
	if path == "" {
		return 0
	}
	logMu.Lock()
	defer logMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		log.Printf("side-effect log: %v", err)
		return 0
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", tool, key)
	_ = f.Sync()
	b, _ := os.ReadFile(path)
	n := 0
	for _, line := range splitLines(string(b)) {
		if line == tool+" "+key {
			n++
		}
	}
	return n
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// seenKey reports whether an idempotency key was applied before, and
// remembers it (in a file beside the log, so a restarted upstream still
// knows it). Only tools listed in IDEMPOTENCY_KEYS (comma separated)
// honour keys: the others stand for upstreams that ignore them.
func seenKey(tool, key string) bool {
	path := os.Getenv("SIDE_EFFECT_LOG")
	if key == "" || path == "" || !slices.Contains(strings.Split(os.Getenv("IDEMPOTENCY_KEYS"), ","), tool) {
		return false
	}
	logMu.Lock()
	defer logMu.Unlock()
	b, _ := os.ReadFile(path + ".keys")
	if slices.Contains(splitLines(string(b)), key) {
		return true
	}
	f, err := os.OpenFile(path+".keys", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err == nil {
		fmt.Fprintln(f, key)
		_ = f.Sync()
		_ = f.Close()
	}
	return false
}

func effect(tool string) mcp.ToolHandlerFor[effectIn, effectOut] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in effectIn) (*mcp.CallToolResult, effectOut, error) {
		key, _ := req.Params.Meta["airlock.dev/idempotency-key"].(string)
		if seenKey(tool, key) {
			return nil, effectOut{Key: in.Key, Count: -1}, nil // applied before: not again
		}
		n := record(tool, in.Key)
		select {
		case <-time.After(time.Duration(in.SleepMS) * time.Millisecond):
		case <-ctx.Done():
			return nil, effectOut{}, ctx.Err()
		}
		return nil, effectOut{Key: in.Key, Count: n}, nil
	}
}

// addEcho registers an echo tool under name with description.
func addEcho(s *mcp.Server, name, description string) {
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: description, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
}

// toolsFile is the content of TOOLS_FILE.
type toolsFile struct {
	EchoDescription string   `json:"echo_description"`
	ExtraTools      []string `json:"extra_tools"`
}

// applyToolsFile applies TOOLS_FILE if it changed since last.
func applyToolsFile(s *mcp.Server, path string, last *string) {
	b, err := os.ReadFile(path)
	if err != nil || string(b) == *last {
		return
	}
	*last = string(b)
	var tf toolsFile
	if err := json.Unmarshal(b, &tf); err != nil {
		log.Printf("TOOLS_FILE %s: %v", path, err)
		return
	}
	if tf.EchoDescription != "" {
		addEcho(s, "echo", tf.EchoDescription)
	}
	for _, name := range tf.ExtraTools {
		addEcho(s, name, "Echo text back (added later).")
	}
}

func newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "testupstream", Version: "1"}, serverOptions())
	addResources(s) // resources.go
	desc := os.Getenv("ECHO_DESCRIPTION")
	if desc == "" {
		desc = "Echo text back."
	}
	addEcho(s, "echo", desc)
	mcp.AddTool(s, &mcp.Tool{Name: "append", Description: "Append a record (not idempotent)."}, effect("append"))
	mcp.AddTool(s, &mcp.Tool{Name: "put", Description: "Put a record (idempotent)."}, effect("put"))
	// wait runs until it is cancelled (notifications/cancelled) or a
	// minute passes, logging "wait-started <key>" and then
	// "wait-cancelled <key>" or "wait-done <key>".
	mcp.AddTool(s, &mcp.Tool{Name: "wait", Description: "Wait until cancelled (at most a minute)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in effectIn) (*mcp.CallToolResult, effectOut, error) {
			record("wait-started", in.Key)
			select {
			case <-ctx.Done():
				record("wait-cancelled", in.Key)
				return nil, effectOut{}, ctx.Err()
			case <-time.After(time.Minute):
				record("wait-done", in.Key)
				return nil, effectOut{}, nil
			}
		})
	// progress reports steps progress notifications (1..steps of steps),
	// interval_ms apart, to the call's progress token, then answers with
	// the token it got.
	mcp.AddTool(s, &mcp.Tool{Name: "progress", Description: "Report progress for a while."},
		func(ctx context.Context, req *mcp.CallToolRequest, in progressIn) (*mcp.CallToolResult, any, error) {
			tok := req.Params.GetProgressToken()
			for i := 1; i <= in.Steps; i++ {
				select {
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				case <-time.After(time.Duration(in.IntervalMS) * time.Millisecond):
				}
				if tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok,
						Progress: float64(i), Total: float64(in.Steps), Message: fmt.Sprintf("step %d", i)})
				}
				// A log message per step too (sent at whatever level the
				// client set; the SDK drops it when none is set).
				_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "progress", Data: fmt.Sprintf("step %d of %d", i, in.Steps)})
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(tok)}}}, nil, nil
		})
	// ask_later waits delay_ms, then asks the client for a username
	// (elicitation) and answers "username:<it>": a request that comes
	// while the call runs, after the client may have stopped waiting.
	mcp.AddTool(s, &mcp.Tool{Name: "ask_later", Description: "Ask the client for a username after a while."},
		func(ctx context.Context, req *mcp.CallToolRequest, in askLaterIn) (*mcp.CallToolResult, any, error) {
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(time.Duration(in.DelayMS) * time.Millisecond):
			}
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: in.Message, RequestedSchema: &jsonschema.Schema{
				Type: "object", Properties: map[string]*jsonschema.Schema{"username": {Type: "string"}}}})
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s username:%v", res.Action, res.Content["username"])}}}, nil, nil
		})
	// list_roots asks the client for its roots (roots/list) and answers
	// their URIs, one a line.
	mcp.AddTool(s, &mcp.Tool{Name: "list_roots", Description: "List the client's roots."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ echoIn) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.ListRoots(ctx, nil)
			if err != nil {
				return nil, nil, err
			}
			var uris []string
			for _, r := range res.Roots {
				uris = append(uris, r.URI)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(uris, "\n")}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always reports a tool error."},
		func(context.Context, *mcp.CallToolRequest, echoIn) (*mcp.CallToolResult, any, error) {
			return nil, nil, fmt.Errorf("the disk is full")
		})
	// rawargs answers with the arguments exactly as they arrived, and
	// appends them to RAW_ARGS_LOG when it is set: what a parser that is
	// not encoding/json would act on.
	s.AddTool(&mcp.Tool{Name: "rawargs", Description: "Returns its raw arguments.", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			raw := string(req.Params.Arguments)
			if p := os.Getenv("RAW_ARGS_LOG"); p != "" {
				logMu.Lock()
				f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
				if err == nil {
					_, _ = f.WriteString(raw + "\n")
					_ = f.Close()
				}
				logMu.Unlock()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: raw}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "content", Description: "Returns every content type.", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{
				Content: []mcp.Content{
					&mcp.TextContent{Text: "hello"},
					&mcp.ImageContent{Data: []byte{0x89, 'P', 'N', 'G'}, MIMEType: "image/png"},
					&mcp.AudioContent{Data: []byte{'R', 'I', 'F', 'F'}, MIMEType: "audio/wav"},
					&mcp.ResourceLink{URI: "file:///tmp/x.txt", Name: "x.txt", MIMEType: "text/plain"},
					&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "mem://note", MIMEType: "text/plain", Text: "embedded"}},
				},
				StructuredContent: map[string]any{"answer": 42.0, "items": []any{"a", "b"}},
			}, nil
		})
	return s
}

func main() {
	addr := flag.String("http", "", "serve streamable HTTP on this address instead of stdio")
	flag.Parse()
	s := newServer()
	if path := os.Getenv("TOOLS_FILE"); path != "" {
		// As it is at start, then whenever it changes.
		var last string
		applyToolsFile(s, path, &last)
		go func() {
			for {
				time.Sleep(100 * time.Millisecond)
				applyToolsFile(s, path, &last)
			}
		}()
	}
	if *addr != "" {
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
		log.Fatal(http.ListenAndServe(*addr, h))
	}
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Printf("testupstream: %v", err)
	}
}
