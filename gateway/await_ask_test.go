package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
)

// runningCall is fakeTemporal with calls that keep running: the handle's
// Get waits until the caller gives up, and then calls waited (when set).
type runningCall struct {
	*fakeTemporal
	waited func()
}

func (f runningCall) GetWorkflowUpdateHandle(client.GetWorkflowUpdateHandleOptions) client.WorkflowUpdateHandle {
	return runningHandle{waited: f.waited}
}

type runningHandle struct {
	client.WorkflowUpdateHandle
	waited func()
}

func (h runningHandle) Get(ctx context.Context, _ any) error {
	<-ctx.Done()
	if h.waited != nil {
		h.waited()
	}
	return ctx.Err()
}

// heartbeatWith is a task of alice whose CallTool activity of call publishes asks
// in its heartbeat details (api.CallProgress), as a worker does for an
// upstream's elicitation that no client in its process waited for.
func heartbeatWith(t *testing.T, call string, asks ...api.CallAsk) *workflowservice.DescribeWorkflowExecutionResponse {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayloads(api.CallProgress{CallID: call, Asks: asks})
	if err != nil {
		t.Fatal(err)
	}
	// The task is alice's, the test gateway's principal (owner.go).
	d := describedTask("alice", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING)
	d.PendingActivities = []*workflowpb.PendingActivityInfo{{ActivityType: &commonpb.ActivityType{Name: api.CallToolName},
		HeartbeatDetails: p}}
	return d
}

func elicitAsk(id, message string) api.CallAsk {
	return api.CallAsk{ID: id, Kind: "elicitation", Request: []byte(`{"message":"` + message + `","requestedSchema":{"type":"object","properties":{"username":{"type":"string"}}}}`),
		Key: make([]byte, 32)}
}

// TestAwaitAnswersWhenAsked (issue 25, medium 7): an airlock_await of a
// 2026-07-28 client answers within its timeout when the call's upstream
// asks while it waits, however the requests reach it, and a request it
// could not take is not lost: the next airlock_await gets it. Before the
// fix, a request the gateway read from the call's heartbeats once the
// await had stopped waiting (an upstream's second request, or one read
// just as the timeout ran out) held the await until its client went away,
// and that await never answered.
func TestAwaitAnswersWhenAsked(t *testing.T) {
	t.Parallel() // its own gateways and servers
	connect := func(t *testing.T, g *Gateway) *mcp.ClientSession {
		// The owner is known (owner.go), so the fake's DescribeWorkflowExecution
		// is read only for the call's heartbeats.
		g.owners.put("t-ask", "alice")
		srv := httptest.NewServer(g.Handler())
		t.Cleanup(srv.Close)
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: &headerRT{h: map[string]string{HeaderTask: "t-ask"}}}},
			&mcp.ClientSessionOptions{ProtocolVersion: StatelessProtocol})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	// await calls airlock_await; a minute without an answer is the hang
	// (it waits at most timeout_seconds, 1 s here).
	await := func(t *testing.T, cs *mcp.ClientSession) *mcp.CallToolResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolAwait, Arguments: map[string]any{"call": "c-1", "timeout_seconds": 1}})
		if err != nil {
			t.Fatalf("airlock_await did not answer: %v", err)
		}
		return res
	}
	asked := func(t *testing.T, res *mcp.CallToolResult, id, message string) {
		t.Helper()
		p, ok := res.InputRequests[id].(*mcp.ElicitParams)
		if !res.NeedsInput() || !ok || p.Message != message {
			t.Fatalf("airlock_await answered %q (input requests %v), want input-required for %s (%q)", textOf(res), res.InputRequests, id, message)
		}
	}

	t.Run("two requests at once", func(t *testing.T) {
		var mu sync.Mutex
		asks := []api.CallAsk{elicitAsk("ask-1", "first?"), elicitAsk("ask-2", "second?")}
		ft := &fakeTemporal{describe: func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			return heartbeatWith(t, "c-1", asks...), nil
		}}
		g := newTestGatewayWith(t, runningCall{fakeTemporal: ft}, Options{Principal: "alice", ProgressPoll: 10 * time.Millisecond, InlineWait: time.Minute})
		cs := connect(t, g)
		asked(t, await(t, cs), "ask-1", "first?")
		// The second is still in the heartbeats once the first is
		// answered; the next await takes it.
		mu.Lock()
		asks = asks[1:]
		mu.Unlock()
		asked(t, await(t, cs), "ask-2", "second?")
	})

	t.Run("a request read as the wait runs out", func(t *testing.T) {
		ended := make(chan struct{})
		var once sync.Once
		first := true
		var mu sync.Mutex
		ft := &fakeTemporal{}
		ft.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
			mu.Lock()
			f := first
			first = false
			mu.Unlock()
			if f {
				<-ended // the heartbeat is read while the wait ends
			}
			return heartbeatWith(t, "c-1", elicitAsk("ask-1", "late?")), nil
		}
		g := newTestGatewayWith(t, runningCall{fakeTemporal: ft, waited: func() { once.Do(func() { close(ended) }) }},
			Options{Principal: "alice", ProgressPoll: 10 * time.Millisecond, InlineWait: time.Minute})
		cs := connect(t, g)
		res := await(t, cs)
		if sc, _ := res.StructuredContent.(map[string]any); !res.NeedsInput() && sc["status"] != "pending" {
			t.Fatalf("airlock_await answered %q, want input-required or pending", textOf(res))
		}
		if !res.NeedsInput() {
			// Not lost: the next await takes it.
			asked(t, await(t, cs), "ask-1", "late?")
		}
	})
}
