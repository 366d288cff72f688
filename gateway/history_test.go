package gateway

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
)

// historyTemporal serves one run's history: the Update completions it
// holds, by call ID.
type historyTemporal struct {
	*fakeTemporal
	run       string
	completed map[string]api.CallResult
	asked     []string // the runs whose history was read
}

func (h *historyTemporal) GetWorkflowHistory(_ context.Context, _, runID string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	h.mu.Lock()
	h.asked = append(h.asked, runID)
	h.mu.Unlock()
	it := &eventIterator{}
	if runID != h.run {
		return it
	}
	for call, res := range h.completed {
		p, err := converter.GetDefaultDataConverter().ToPayloads(res)
		if err != nil {
			panic(err)
		}
		it.events = append(it.events, &historypb.HistoryEvent{
			EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
			Attributes: &historypb.HistoryEvent_WorkflowExecutionUpdateCompletedEventAttributes{
				WorkflowExecutionUpdateCompletedEventAttributes: &historypb.WorkflowExecutionUpdateCompletedEventAttributes{
					Meta:    &updatepb.Meta{UpdateId: call},
					Outcome: &updatepb.Outcome{Value: &updatepb.Outcome_Success{Success: p}},
				},
			},
		})
	}
	return it
}

type eventIterator struct{ events []*historypb.HistoryEvent }

func (i *eventIterator) HasNext() bool { return len(i.events) > 0 }

func (i *eventIterator) Next() (*historypb.HistoryEvent, error) {
	ev := i.events[0]
	i.events = i.events[1:]
	return ev, nil
}

// A call whose attempt was moved to a later run (its run continued as new
// while it ran) and that run answers "already ran" without the result: the
// client that sent it gets the result from the history of the run that
// ran it. A plain repeat of an old call (its attempt not moved) is
// answered by the task as before, without reading any history.
func TestMovedCallGetsItsResultFromHistory(t *testing.T) {
	defer func(d time.Duration) { pinnedAttempt = d }(pinnedAttempt)
	pinnedAttempt = 100 * time.Millisecond
	ranBefore := func(u sentUpdate) api.CallResult {
		return api.CallResult{Outcome: api.OutcomeOK, Reason: "call " + u.req.CallID + " already ran in run 5; the task no longer holds its result",
			Result: okResult("already ran").Result, Repeat: &api.Repeat{Run: 5, RunID: "run-5"}}
	}
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

	// Not held up: a retry sent to the run the gateway knew, which has
	// ended since (NotFound), then to the current run, gets the task's
	// answer, and no history is read.
	ft2 := &fakeTemporal{answer: func(u sentUpdate, n int) (api.CallResult, error) {
		switch n {
		case 1:
			return okResult("first"), nil
		case 2:
			return api.CallResult{}, serviceerror.NewNotFound("workflow execution already completed")
		}
		return ranBefore(u), nil
	}}
	ht2 := &historyTemporal{fakeTemporal: ft2, run: "run-5", completed: map[string]api.CallResult{"k-old-1": okResult("the real result")}}
	cs2 := connectMemory(t, newTestGatewayWith(t, ht2, Options{}))
	if res := callTool(t, cs2, "counter__echo", map[string]any{}, ""); textOf(res) != "first" {
		t.Fatalf("first call: %q", textOf(res))
	}
	res = callTool(t, cs2, "counter__echo", map[string]any{}, "old-1")
	if textOf(res) != "already ran" || len(ht2.asked) != 0 || ft2.count() != 3 {
		t.Fatalf("repeat of an old call: %q, histories read %v, %d updates; want the task's answer, none read, 3 updates", textOf(res), ht2.asked, ft2.count())
	}
}
