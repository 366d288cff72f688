package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
)

// finishingTemporal answers the task's queries for a call that finishes
// between tasks/get's first look (not finished) and its status query (no
// longer in flight).
type finishingTemporal struct {
	*fakeTemporal
	callAsks  int
	statusErr error
}

func (f *finishingTemporal) QueryWorkflow(ctx context.Context, id, run, queryType string, args ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	switch queryType {
	case api.QueryCall:
		f.callAsks++
		if f.callAsks == 1 {
			f.mu.Unlock()
			return nil, fmt.Errorf("task %s has no record of call %v", id, args)
		}
	case api.QueryStatus:
		if f.statusErr != nil {
			f.mu.Unlock()
			return nil, f.statusErr
		}
	}
	f.mu.Unlock()
	return f.fakeTemporal.QueryWorkflow(ctx, id, run, queryType, args...)
}

// tasks/get of a call that finishes while it is being read reports the
// call completed, not "no call in flight or finished"; a status query that
// fails is reported as that failure, not as an unknown call.
func TestTaskOfCallThatFinishesMeanwhile(t *testing.T) {
	done := okResult("done")
	done.CallID, done.Tool = "call-1", "counter__echo"
	ft := &fakeTemporal{queries: map[string]any{
		api.QueryCall:   done,
		api.QueryStatus: api.Status{TaskID: "task-1"},
	}}
	ff := &finishingTemporal{fakeTemporal: ft}
	g := newTestGatewayWith(t, ff, Options{})
	st, jerr := g.taskOfCall(context.Background(), "task-1", "call-1", approvalExts{})
	if jerr != nil || st.Status != "completed" || !strings.Contains(string(*st.Result), "done") {
		t.Fatalf("tasks/get of a call that finished meanwhile: %+v %v; want it completed with its result", st, jerr)
	}

	// A call not finished (no QueryCall answer) whose status cannot be read.
	ft = &fakeTemporal{queries: map[string]any{}}
	ff = &finishingTemporal{fakeTemporal: ft, statusErr: errors.New("frontend unreachable")}
	g = newTestGatewayWith(t, ff, Options{})
	_, jerr = g.taskOfCall(context.Background(), "task-1", "call-2", approvalExts{})
	if jerr == nil || jerr.Code != jsonrpc.CodeInternalError || !strings.Contains(jerr.Message, "frontend unreachable") {
		t.Fatalf("tasks/get while the task cannot be read: %v; want an internal error naming the failure", jerr)
	}
}
