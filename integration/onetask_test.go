package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/timeline"
	"github.com/airlock-run/airlock/manifests"
)

// updateRefusals counts the attempts of the gateway's Updates the server
// refused, by gRPC code: RESOURCE_EXHAUSTED is its in-flight limit,
// UNAVAILABLE "workflow update was aborted". The SDK retries both, so
// only an interceptor inside its retries sees them.
type updateRefusals struct {
	mu    sync.Mutex
	codes map[codes.Code]int
	msgs  []string
}

func (u *updateRefusals) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil && (strings.HasSuffix(method, "/UpdateWorkflowExecution") || strings.HasSuffix(method, "/PollWorkflowExecutionUpdate") || strings.HasSuffix(method, "/ExecuteMultiOperation")) {
		if c := grpcstatus.Code(err); c == codes.ResourceExhausted || c == codes.Unavailable {
			u.mu.Lock()
			if u.codes == nil {
				u.codes = map[codes.Code]int{}
			}
			u.codes[c]++
			if len(u.msgs) < 5 {
				u.msgs = append(u.msgs, err.Error())
			}
			u.mu.Unlock()
		}
	}
	return err
}

func (u *updateRefusals) total() (int, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, c := range u.codes {
		n += c
	}
	return n, u.msgs
}

// TestOneTaskTakesConcurrentCalls is issue 28 §1: 64 calls at once in one
// task (four sessions naming it in Airlock-Task, sixteen calls each) are
// all answered ok on their first send, each ran once (the upstream's
// side-effect log), each is in the task's history once with its result,
// and the server refused none of the gateway's Updates: the gateway
// queued what was past the task's concurrency instead of sending it into
// the server's in-flight limit. Twice: with the default concurrency (32,
// under the embedded server's 64) and with 8, where most calls wait.
func TestOneTaskTakesConcurrentCalls(t *testing.T) {
	for _, n := range []int{0, 8} {
		t.Run(fmt.Sprintf("concurrency=%d", n), func(t *testing.T) {
			t.Parallel()
			oneTaskTakesConcurrentCalls(t, n)
		})
	}
}

func oneTaskTakesConcurrentCalls(t *testing.T, concurrency int) {
	const calls, sessions = 64, 4
	m, effects := counterManifest(t, "  put: {side_effects: [write], data_access_level: internal, risk: low, idempotent: true, timeout: 30s}\n")
	refused := &updateRefusals{}
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, taskConcurrency: concurrency, grpcUnary: []grpc.UnaryClientInterceptor{refused.intercept}})
	taskID := fmt.Sprintf("one-task-concurrent-%d", concurrency)
	var css []*mcp.ClientSession
	for range sessions {
		css = append(css, s.connect(t, map[string]string{gateway.HeaderTask: taskID}))
	}
	waitTools(t, css[0], "counter__put")

	keys := burstKeys("conc", calls)
	results := make([]*mcp.CallToolResult, calls)
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			results[i], errs[i] = css[i%sessions].CallTool(ctx, &mcp.CallToolParams{Name: "counter__put",
				Arguments: map[string]any{"key": k}, Meta: mcp.Meta{gateway.MetaIdempotencyKey: k}})
		})
	}
	wg.Wait()
	for i, k := range keys {
		switch res := results[i]; {
		case errs[i] != nil:
			t.Errorf("call %s: %v", k, errs[i])
		case res.IsError || pending(res):
			t.Errorf("call %s answered %q (error %v), want its result", k, text(res), res.IsError)
		case res.Meta[gateway.MetaTask] != taskID:
			t.Errorf("call %s ran in task %v, want %s", k, res.Meta[gateway.MetaTask], taskID)
		}
	}
	if inFlight, waiting := s.gw.TaskLoad(taskID); inFlight != 0 || waiting != 0 {
		t.Errorf("after every answer the gateway holds %d in flight and %d waiting for the task", inFlight, waiting)
	}
	ran := effectsByKey(t, effects, "put")
	for _, k := range keys {
		if ran[k] != 1 {
			t.Errorf("put %s reached the upstream %d times, want once", k, ran[k])
		}
	}
	if n, msgs := refused.total(); n > 0 {
		t.Errorf("the server refused or aborted %d attempts of the gateway's Updates, want none: %q", n, msgs)
	}

	finishTask(t, s, taskID)
	tl, err := timeline.Build(fetchHistory(t, s.client, taskID, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var last time.Time
	for _, c := range tl.Calls {
		seen[c.ID]++
		if c.Requested.Before(last) {
			t.Errorf("call %s requested at %s, before the call recorded ahead of it (%s)", c.ID, c.Requested, last)
		}
		last = c.Requested
		if c.Result == nil || c.Result.Outcome != string(api.OutcomeOK) {
			t.Errorf("call %s: result %+v in the history, want ok", c.ID, c.Result)
		}
	}
	for _, k := range keys {
		if n := seen[api.CallIDForKey(k)]; n != 1 {
			t.Errorf("call of %s is in the history %d times, want once", k, n)
		}
	}
	if len(tl.Calls) != calls {
		t.Errorf("the history holds %d calls, want %d", len(tl.Calls), calls)
	}
}

// TestBusyTaskAnswersPastTheBacklog: with gateway.task_concurrency 1 and
// gateway.task_backlog 2, a call that holds the task's one slot (wait)
// and two queued behind it, the next calls are answered at once that the
// task is busy, naming the bound, with a retry-after in _meta; they did
// not run and are not in the history; sent again once the task has room,
// they run, once.
func TestBusyTaskAnswersPastTheBacklog(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, "  put: {side_effects: [write], data_access_level: internal, risk: low, idempotent: true, timeout: 30s}\n"+
		"  wait: {side_effects: [none], data_access_level: public, risk: low, idempotent: true, timeout: 2m}\n")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, taskConcurrency: 1, taskBacklog: 2, inlineWait: 2 * time.Minute})
	const taskID = "busy-task"
	cs := s.connect(t, map[string]string{gateway.HeaderTask: taskID})
	waitTools(t, cs, "counter__put", "counter__wait")
	put := func(ctx context.Context, key string) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__put",
			Arguments: map[string]any{"key": key}, Meta: mcp.Meta{gateway.MetaIdempotencyKey: key}})
	}

	waitCtx, stopWait := context.WithCancel(context.Background())
	defer stopWait()
	waitDone := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(waitCtx, &mcp.CallToolParams{Name: "counter__wait", Arguments: map[string]any{"key": "w"}})
		waitDone <- err
	}()
	waitFor(t, "the wait call to reach the upstream", 30*time.Second, func() bool { return effectsByKey(t, effects, "wait-started")["w"] == 1 })

	queued := make([]chan *mcp.CallToolResult, 2)
	for i := range queued {
		queued[i] = make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := put(context.Background(), fmt.Sprintf("q%d", i))
			if err != nil {
				t.Errorf("queued call q%d: %v", i, err)
			}
			queued[i] <- res
		}()
		waitFor(t, fmt.Sprintf("call q%d to queue", i), 30*time.Second, func() bool {
			_, waiting := s.gw.TaskLoad(taskID)
			return waiting == i+1
		})
	}

	refused := []string{"over0", "over1", "over2"}
	var wg sync.WaitGroup
	answers := make([]*mcp.CallToolResult, len(refused))
	for i, k := range refused { // a burst past the backlog
		wg.Go(func() {
			res, err := put(context.Background(), k)
			if err != nil {
				t.Errorf("call %s: %v", k, err)
			}
			answers[i] = res
		})
	}
	wg.Wait()
	for i, res := range answers {
		if res == nil {
			continue
		}
		msg := text(res)
		if !res.IsError || res.Meta[gateway.MetaLimitCheck] != gateway.LimitCheckBusy || res.Meta[gateway.MetaLimit] != "gateway.task_backlog" || res.Meta[gateway.MetaRetryAfter] == nil {
			t.Errorf("call %s past the backlog: error %v, _meta %v, %q; want a busy answer naming gateway.task_backlog with a retry-after", refused[i], res.IsError, res.Meta, msg)
		}
		for _, want := range []string{"task " + taskID + " is busy", "gateway.task_concurrency", "gateway.task_backlog = 2", "nothing ran", "Call again"} {
			if !strings.Contains(msg, want) {
				t.Errorf("busy answer %q lacks %q", msg, want)
			}
		}
		if res.Meta[gateway.MetaCall] != nil {
			t.Errorf("busy answer names call %v; nothing was sent", res.Meta[gateway.MetaCall])
		}
	}
	if _, waiting := s.gw.TaskLoad(taskID); waiting != 2 {
		t.Errorf("the refused calls changed the queue: %d waiting, want 2", waiting)
	}

	stopWait() // the client cancels the wait: the queue moves
	if err := <-waitDone; err == nil {
		t.Error("the cancelled wait call answered without an error")
	}
	for i, ch := range queued {
		if res := <-ch; res == nil || res.IsError {
			t.Errorf("queued call q%d: %+v, want ok", i, res)
		}
	}
	ran := effectsByKey(t, effects, "put")
	for _, k := range refused {
		if ran[k] != 0 {
			t.Errorf("refused call %s reached the upstream %d times", k, ran[k])
		}
	}
	// What was refused is not in the history either; sent again, it runs once.
	hist := fetchHistory(t, s.client, taskID, "")
	tl, err := timeline.Build(hist, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range tl.Calls {
		for _, k := range refused {
			if c.ID == api.CallIDForKey(k) {
				t.Errorf("refused call %s is in the history: %+v", k, c.Result)
			}
		}
	}
	for _, k := range refused {
		res, err := put(context.Background(), k)
		if err != nil || res.IsError {
			t.Errorf("call %s sent again once the task had room: %v %v", k, err, res)
		}
	}
	ran = effectsByKey(t, effects, "put")
	for _, k := range append(refused, "q0", "q1") {
		if ran[k] != 1 {
			t.Errorf("put %s reached the upstream %d times, want once", k, ran[k])
		}
	}
}

// TestServerBusyTaskAnswersBusy: calls answered pending (their inline wait
// ran out; they still run) no longer hold the gateway's slots, but their
// Updates stay in flight at the server. Once the task holds the embedded
// server's 64, the next call is refused by the server's
// history.maxInFlightUpdates; it is answered busy at once, naming that
// limit, not retried into it until its inline wait ends, and it did not run.
func TestServerBusyTaskAnswersBusy(t *testing.T) {
	t.Parallel()
	const waits = 64 // devserver.MaxInFlightUpdates
	m, effects := counterManifest(t, "  put: {side_effects: [write], data_access_level: internal, risk: low, idempotent: true, timeout: 30s}\n"+
		"  wait: {side_effects: [none], data_access_level: public, risk: low, idempotent: true, timeout: 2m}\n")
	refused := &updateRefusals{}
	// The gateway's concurrency at the server's limit, so that no wait
	// call waits in the gateway's queue (where its inline wait of 1s
	// would run out: a busy answer of its own).
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, inlineWait: time.Second, taskConcurrency: waits,
		grpcUnary: []grpc.UnaryClientInterceptor{refused.intercept}})
	taskID := fmt.Sprintf("server-busy-task-%d", time.Now().UnixNano())
	cs := s.connect(t, map[string]string{gateway.HeaderTask: taskID})
	waitTools(t, cs, "counter__put", "counter__wait")

	var wg sync.WaitGroup
	for i := range waits {
		wg.Go(func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "counter__wait", Arguments: map[string]any{"key": fmt.Sprintf("w%d", i)}})
			if err != nil || !pending(res) {
				t.Errorf("wait w%d: %v %v, want a pending answer", i, err, res)
			}
		})
	}
	wg.Wait()
	waitFor(t, "every wait call to reach the upstream", time.Minute, func() bool { return len(effectsByKey(t, effects, "wait-started")) == waits })
	if inFlight, waiting := s.gw.TaskLoad(taskID); inFlight != 0 || waiting != 0 {
		t.Fatalf("the gateway holds %d in flight and %d waiting for calls it answered pending", inFlight, waiting)
	}

	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "counter__put",
		Arguments: map[string]any{"key": "over"}, Meta: mcp.Meta{gateway.MetaIdempotencyKey: "over"}})
	if err != nil {
		t.Fatal(err)
	}
	msg := text(res)
	if !res.IsError || pending(res) || res.Meta[gateway.MetaLimitCheck] != gateway.LimitCheckBusy || res.Meta[gateway.MetaLimit] != "history.maxInFlightUpdates" {
		t.Fatalf("call past the server's limit: error %v, _meta %v, %q; want a busy answer naming history.maxInFlightUpdates", res.IsError, res.Meta, msg)
	}
	for _, want := range []string{"task " + taskID + " is busy", "history.maxInFlightUpdates", "(64)", "nothing ran"} {
		if !strings.Contains(msg, want) {
			t.Errorf("busy answer %q lacks %q", msg, want)
		}
	}
	if n := effectsByKey(t, effects, "put")["over"]; n != 0 {
		t.Errorf("the refused call reached the upstream %d times", n)
	}
	if n, msgs := refused.total(); n != 1 {
		t.Errorf("the server refused %d attempts of the gateway's Updates, want 1 (the call past its limit, not retried): %q", n, msgs)
	}
	tl, err := timeline.Build(fetchHistory(t, s.client, taskID, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range tl.Calls {
		if c.ID == api.CallIDForKey("over") {
			t.Errorf("the refused call is in the history: %+v", c.Result)
		}
	}
}
