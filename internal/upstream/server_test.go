package upstream

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The test binary doubles as a stdio MCP server: a pool under test runs
// os.Args[0] with envServer=1 and TestMain serves MCP instead of testing.
const (
	envServer      = "AIRLOCK_UPSTREAM_TEST_SERVER"
	envPIDFile     = "AIRLOCK_TEST_PID_FILE"     // each start appends its PID
	envCounterFile = "AIRLOCK_TEST_COUNTER_FILE" // the counter tool appends a line
	envSlowFile    = "AIRLOCK_TEST_SLOW_FILE"    // the slow tool appends a line when it starts
	envGrandchild  = "AIRLOCK_TEST_GRANDCHILD"   // start a `sleep` child and append its PID here
	envCrash       = "AIRLOCK_TEST_CRASH"        // print this to stderr and exit 3
)

// testToolNames are the tools newTestServer registers.
var testToolNames = []string{"add_resource", "add_tool", "counter", "echo", "fail", "reject", "slow", "touch"}

func TestMain(m *testing.M) {
	if os.Getenv(envServer) == "1" {
		os.Exit(runStdioServer())
	}
	if m := os.Getenv(envHostile); m != "" {
		os.Exit(runHostileServer(m))
	}
	os.Exit(m.Run())
}

func runStdioServer() int {
	if msg := os.Getenv(envCrash); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		return 3
	}
	appendLine(os.Getenv(envPIDFile), strconv.Itoa(os.Getpid()))
	if f := os.Getenv(envGrandchild); f != "" {
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		appendLine(f, strconv.Itoa(cmd.Process.Pid))
	}
	fmt.Fprintln(os.Stderr, "test server ready")
	s := newTestServer(testHooks{
		count: func() int {
			f := os.Getenv(envCounterFile)
			appendLine(f, "x")
			return len(readLines(f))
		},
		slowStarted: func() { appendLine(os.Getenv(envSlowFile), "started") },
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// testHooks connect the tools' side effects to the test.
type testHooks struct {
	count       func() int
	slowStarted func()
}

type echoIn struct {
	Text string `json:"text,omitempty"`
}

type slowIn struct {
	MS int `json:"ms"`
}

type addToolIn struct {
	Name string `json:"name"`
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// newTestServer is the upstream used over both stdio and HTTP. PageSize 2
// makes listing take several pages.
func newTestServer(h testHooks) *mcp.Server {
	subs := &testSubscribers{n: map[string]int{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "test-upstream", Version: "1"}, &mcp.ServerOptions{
		PageSize:           2,
		SubscribeHandler:   func(_ context.Context, req *mcp.SubscribeRequest) error { return subs.add(req.Params.URI, 1) },
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error { return subs.add(req.Params.URI, -1) },
	})
	addTestResources(s, subs)
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return textResult(in.Text), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
		h.slowStarted()
		select {
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
			return textResult("slept"), nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	mcp.AddTool(s, &mcp.Tool{Name: "fail"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "boom"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "counter"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return textResult(strconv.Itoa(h.count())), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "reject"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "bad input"}
	})
	mcp.AddTool(s, &mcp.Tool{Name: "add_tool"}, func(_ context.Context, _ *mcp.CallToolRequest, in addToolIn) (*mcp.CallToolResult, any, error) {
		name := in.Name
		s.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return textResult("I am " + name), nil
			})
		return textResult("added"), nil, nil
	})
	return s
}

func appendLine(file, line string) {
	if file == "" {
		return
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

func readLines(file string) []string {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}
