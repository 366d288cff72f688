package gateway

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	failurepb "go.temporal.io/api/failure/v1"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
)

// historyTemporal serves one run's history: the Update completions it
// holds, by call ID, after pad events of padBytes each. Other runs'
// histories are gone (NotFound, as after the namespace's retention).
type historyTemporal struct {
	*fakeTemporal
	run       string
	completed map[string]api.CallResult
	raw       map[string]*updatepb.Outcome // completions as they are, by Update ID
	pad       int
	padBytes  int
	asked     []string // the runs whose history was read
	read      int      // events handed out
	// entered, when set, is told of each read started, which then waits
	// for release; reading and most count the reads in progress.
	entered, release chan struct{}
	reading, most    int
}

func (h *historyTemporal) GetWorkflowHistory(ctx context.Context, _, runID string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	h.mu.Lock()
	h.asked = append(h.asked, runID)
	h.reading++
	h.most = max(h.most, h.reading)
	n := len(h.asked)
	h.mu.Unlock()
	if h.entered != nil {
		h.entered <- struct{}{}
		if n <= historyReaders {
			<-h.release // held until the test lets go
		} else {
			select { // past the bound: a failure, which must not hang
			case <-h.release:
			case <-ctx.Done():
			}
		}
	}
	it := &eventIterator{h: h}
	if runID != h.run {
		it.err = serviceerror.NewNotFound("workflow execution not found")
		return it
	}
	for range h.pad {
		it.events = append(it.events, &historypb.HistoryEvent{
			EventType: enumspb.EVENT_TYPE_MARKER_RECORDED,
			Attributes: &historypb.HistoryEvent_MarkerRecordedEventAttributes{MarkerRecordedEventAttributes: &historypb.MarkerRecordedEventAttributes{
				MarkerName: strings.Repeat("m", h.padBytes)}},
		})
	}
	outcomes := map[string]*updatepb.Outcome{}
	for call, res := range h.completed {
		p, err := converter.GetDefaultDataConverter().ToPayloads(res)
		if err != nil {
			panic(err)
		}
		outcomes[call] = &updatepb.Outcome{Value: &updatepb.Outcome_Success{Success: p}}
	}
	maps.Copy(outcomes, h.raw)
	for id, o := range outcomes {
		it.events = append(it.events, &historypb.HistoryEvent{
			EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
			Attributes: &historypb.HistoryEvent_WorkflowExecutionUpdateCompletedEventAttributes{
				WorkflowExecutionUpdateCompletedEventAttributes: &historypb.WorkflowExecutionUpdateCompletedEventAttributes{
					Meta: &updatepb.Meta{UpdateId: id}, Outcome: o,
				},
			},
		})
	}
	return it
}

type eventIterator struct {
	h      *historyTemporal
	events []*historypb.HistoryEvent
	err    error
}

func (i *eventIterator) HasNext() bool {
	if len(i.events) > 0 || i.err != nil {
		return true
	}
	i.h.mu.Lock()
	i.h.reading-- // the gateway reads until it finds the call or the end
	i.h.mu.Unlock()
	return false
}

func (i *eventIterator) Next() (*historypb.HistoryEvent, error) {
	if i.err != nil {
		i.h.mu.Lock()
		i.h.reading--
		i.h.mu.Unlock()
		return nil, i.err
	}
	ev := i.events[0]
	i.events = i.events[1:]
	i.h.mu.Lock()
	i.h.read++
	i.h.mu.Unlock()
	return ev, nil
}

// ranBefore is the task's answer to a repeated call whose result it no
// longer holds: the call ran in run 5, run-5.
func ranBefore(u sentUpdate) api.CallResult {
	text := "call " + u.req.CallID + " already ran in task t, in run 5 (run-5), with outcome ok, and was not run again. The task no longer holds its result; that run's history records it: airlock audit show --run run-5 t"
	b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}, "isError": false})
	return api.CallResult{CallID: u.req.CallID, Outcome: api.OutcomeOK, Reason: text, Result: b, Repeat: &api.Repeat{Run: 5, RunID: "run-5"}}
}

// upstreamFirst is a call's first result as the upstream answered it: content,
// structuredContent and the upstream's own _meta.
func upstreamFirst(call string) api.CallResult {
	b, _ := json.Marshal(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "the real result"}},
		StructuredContent: map[string]any{"count": 1, "nested": []any{"a", map[string]any{"b": 2.5}}}, Meta: mcp.Meta{"upstream": "x"}})
	return api.CallResult{CallID: call, Outcome: api.OutcomeOK, Result: b, Attempts: 1}
}

// A call whose attempt was moved to a later run (its run continued as new
// while it ran) and that run answers "already ran" without the result: the
// client that sent it gets the result from the history of the run that
// ran it. So does a plain retry of an old call (issue 28 item 6).
func TestMovedCallGetsItsResultFromHistory(t *testing.T) {
	defer func(d time.Duration) { pinnedAttempt = d }(pinnedAttempt)
	pinnedAttempt = 100 * time.Millisecond
	ft := &fakeTemporal{hangPinned: true}
	ht := &historyTemporal{fakeTemporal: ft, run: "run-5", completed: map[string]api.CallResult{}}
	ft.answer = func(u sentUpdate, n int) (api.CallResult, error) {
		if n == 1 {
			return okResult("first"), nil
		}
		ht.completed[u.req.CallID] = okResult("the real result")
		return ranBefore(u), nil
	}
	cs := connectMemory(t, newTestGatewayWith(t, ht, Options{InlineWait: 8 * time.Second}))
	if res := callTool(t, cs, "counter__echo", map[string]any{}, ""); res.IsError || textOf(res) != "first" {
		t.Fatalf("first call: %q", textOf(res))
	}
	res := callTool(t, cs, "counter__echo", map[string]any{}, "moved-1")
	if res.IsError || textOf(res) != "the real result" {
		t.Fatalf("moved call: isError=%v %q; want the result recorded in run-5's history", res.IsError, textOf(res))
	}
}

// TestRetryGetsItsFirstResultFromHistory: a plain retry of a call that ran
// in an earlier run (the task answers where, not what) gets the result
// the call's Update completed with there, the same CallToolResult as the
// first call got, byte for byte; and airlock_await the same.
func TestRetryGetsItsFirstResultFromHistory(t *testing.T) {
	call := api.CallIDForKey("old-1")
	var sent bool
	ft := &fakeTemporal{answer: func(u sentUpdate, n int) (api.CallResult, error) {
		if !sent {
			sent = true
			return upstreamFirst(u.req.CallID), nil
		}
		return ranBefore(u), nil
	}}
	ht := &historyTemporal{fakeTemporal: ft, run: "run-5", pad: 1000, padBytes: 10,
		completed: map[string]api.CallResult{call: upstreamFirst(call), api.CallIDForKey("other"): okResult("another call's result")}}
	g := newTestGatewayWith(t, ht, Options{})
	cs := connectMemory(t, g)
	res1 := callTool(t, cs, "counter__echo", map[string]any{}, "old-1")
	res2 := callTool(t, cs, "counter__echo", map[string]any{}, "old-1")
	if a, b := mustMarshal(t, res1), mustMarshal(t, res2); a != b {
		t.Fatalf("the retry answered\n%s\nthe first call\n%s", b, a)
	}
	if textOf(res2) != "the real result" || len(ht.asked) != 1 || ht.asked[0] != "run-5" {
		t.Fatalf("retry: %q, histories read %v; want the real result from run-5", textOf(res2), ht.asked)
	}

	// airlock_await of the call: the task's memory answers where it ran,
	// the history what it returned.
	ft.queries = map[string]any{api.QueryCall: ranBefore(sentUpdate{req: api.CallRequest{CallID: call}})}
	ft.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		return describedTask(g.open.Name, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING), nil
	}
	aw := callTool(t, cs, ToolAwait, map[string]any{"call": call}, "")
	if a, b := mustMarshal(t, res1), mustMarshal(t, aw); a != b {
		t.Fatalf("%s answered\n%s\nthe first call\n%s", ToolAwait, b, a)
	}
}

// TestRetryHistoryUnreadable: when the run's history cannot give the
// result (gone past retention, too large to scan, holding no such call,
// holding a failure or a repeat under the call's Update ID), the retry
// gets the task's answer (the call ran, its outcome, where) and why the
// result itself could not be had; never another call's result.
func TestRetryHistoryUnreadable(t *testing.T) {
	defer func(n int) { maxHistoryScan = n }(maxHistoryScan)
	maxHistoryScan = 64 << 10
	call := api.CallIDForKey("old-2")
	repeat := upstreamFirst(call)
	repeat.Repeat = &api.Repeat{Run: 4, RunID: "run-4"}
	tests := []struct {
		name string
		ht   historyTemporal
		want string
	}{
		{"retention", historyTemporal{run: "run-other"}, "the history of run run-5 is no longer kept (the namespace's retention has passed"},
		{"too large", historyTemporal{run: "run-5", pad: 1000, padBytes: 100, completed: map[string]api.CallResult{call: upstreamFirst(call)}},
			"the history of run run-5 is larger than the 0 MiB the gateway reads"},
		{"no such call", historyTemporal{run: "run-5", completed: map[string]api.CallResult{api.CallIDForKey("old-3"): upstreamFirst(api.CallIDForKey("old-3"))}},
			"the history of run run-5 has no result of call " + call},
		{"another call's result under its ID", historyTemporal{run: "run-5", completed: map[string]api.CallResult{call: upstreamFirst("k-someone-else")}},
			"the history of run run-5 does not hold the result of call " + call},
		{"a repeat", historyTemporal{run: "run-5", completed: map[string]api.CallResult{call: repeat}},
			"the history of run run-5 does not hold the result of call " + call},
		{"a failed update", historyTemporal{run: "run-5", raw: map[string]*updatepb.Outcome{call: {Value: &updatepb.Outcome_Failure{Failure: &failurepb.Failure{Message: "x"}}}}},
			"the history of run run-5 does not hold the result of call " + call},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ft := &fakeTemporal{answer: func(u sentUpdate, n int) (api.CallResult, error) { return ranBefore(u), nil }}
			ht := tc.ht
			ht.fakeTemporal = ft
			cs := connectMemory(t, newTestGatewayWith(t, &ht, Options{}))
			res := callTool(t, cs, "counter__echo", map[string]any{}, "old-2")
			txt := textOf(res)
			if res.IsError || !strings.Contains(txt, "already ran in task t, in run 5 (run-5), with outcome ok") ||
				!strings.Contains(txt, "airlock audit show --run run-5 t") || !strings.Contains(txt, "The gateway could not read that result itself: "+tc.want) ||
				strings.Contains(txt, "the real result") || res.StructuredContent != nil {
				t.Fatalf("retry answered (isError %v) %q; want the pointer and %q", res.IsError, txt, tc.want)
			}
			if tc.name == "too large" && ht.read > 700 {
				t.Errorf("read %d events of 1000 padding ones; want the scan stopped near 64 KiB", ht.read)
			}
		})
	}
}

// TestRetryHistoryReadsBounded: a burst of retries of old calls reads at
// most historyReaders histories at once; a retry that finds no free
// reader within historyReadTimeout gets the pointer answer saying the
// gateway was busy and that sending it again retries. The reads that had
// a reader answer with the first result.
func TestRetryHistoryReadsBounded(t *testing.T) {
	defer func(d time.Duration) { historyReadTimeout = d }(historyReadTimeout)
	historyReadTimeout = 300 * time.Millisecond
	const burst = historyReaders + 3
	call := api.CallIDForKey("old-4")
	ft := &fakeTemporal{answer: func(u sentUpdate, n int) (api.CallResult, error) { return ranBefore(u), nil }}
	ht := &historyTemporal{fakeTemporal: ft, run: "run-5", completed: map[string]api.CallResult{call: upstreamFirst(call)},
		entered: make(chan struct{}, burst), release: make(chan struct{})}
	g := newTestGatewayWith(t, ht, Options{})
	answers := make(chan *mcp.CallToolResult, burst)
	for range burst {
		cs := connectMemory(t, g)
		go func() { answers <- callToolErr(cs, "old-4") }()
	}
	for range historyReaders { // every reader taken, and held
		<-ht.entered
	}
	// The others find none free and give up; only then are the readers
	// let go.
	for range burst - historyReaders {
		res := <-answers
		if txt := textOf(res); res == nil || !strings.Contains(txt, "already ran in task t") || !strings.Contains(txt, "the gateway was busy reading other histories") {
			t.Errorf("a retry past the readers answered %q; want the pointer, saying the gateway was busy", txt)
		}
	}
	close(ht.release)
	for range historyReaders {
		if res := <-answers; res == nil || textOf(res) != "the real result" {
			t.Errorf("a retry with a reader answered %q; want its first result", textOf(res))
		}
	}
	if ht.most > historyReaders {
		t.Errorf("%d history reads at once; want at most %d", ht.most, historyReaders)
	}
}

// callToolErr is callTool for a goroutine: nil when the call failed.
func callToolErr(cs *mcp.ClientSession, key string) *mcp.CallToolResult {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__echo", Arguments: map[string]any{}, Meta: mcp.Meta{MetaIdempotencyKey: key}})
	if err != nil {
		return nil
	}
	return res
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
