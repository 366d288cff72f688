package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-run/airlock/api"
)

// A retried call whose result the task no longer holds (it ran in an
// earlier run, before the task continued as new, and its result was not
// carried) is answered by the task with where it ran: CallResult.Repeat
// names the run, not Held. The gateway then reads that run's history for
// the result the call's Update completed with, so the retry gets the
// first result itself, byte for byte. This happens only on such retries.

// Bounds of one such read. The history is read a page at a time (the
// server's page, 256 events by default) and each page is dropped once
// looked at, so memory holds one page; the read stops at the call's
// completed Update, or after maxHistoryScan bytes of events (a run's
// history is at most Temporal's limit.historySize.error, 50 MiB by
// default, and a task's runs continue as new at about 4 MiB), or after
// historyReadTimeout. At most historyReaders reads run at once per
// gateway, so a burst of retries cannot turn into a burst of history
// scans against the frontend. The first two are variables for tests.
var (
	maxHistoryScan     = 32 << 20
	historyReadTimeout = 10 * time.Second
)

const historyReaders = 4

// resultInRun reads call's result from the history of the task's run
// runID: the result its Update completed with. The run is one the task
// itself named (the task was authorized for the caller, and Temporal looks
// the run up under the task's workflow ID, so no other task's run can be
// read this way), and the event must carry call's exact Update ID (and
// call ID, when it names one). The error says, for the answer's reader,
// why it could not be had.
func (g *Gateway) resultInRun(ctx context.Context, task, runID, call string) (api.CallResult, error) {
	var res api.CallResult
	err := g.updateInRun(ctx, task, runID, call, "call "+call, func(s *commonpb.Payloads) bool {
		// Failed, not a call's result, or itself a repeat: not the run
		// that ran the call.
		return converter.GetDefaultDataConverter().FromPayloads(s, &res) == nil && (res.CallID == "" || res.CallID == call) && res.Repeat == nil
	})
	return res, err
}

// programInRun reads a program's result from the history of the run that
// ran it (api.ErrTypeProgramRanBefore names it), as resultInRun a call's.
func (g *Gateway) programInRun(ctx context.Context, task, runID, program string) (api.ProgramResult, error) {
	var res api.ProgramResult
	err := g.updateInRun(ctx, task, runID, program, "program "+program, func(s *commonpb.Payloads) bool {
		return converter.GetDefaultDataConverter().FromPayloads(s, &res) == nil && res.ProgramID == program
	})
	return res, err
}

// updateInRun finds the completion of Update id in the history of the
// task's run runID (what names it in errors), and hands its success payload to take, which decodes
// it and says whether it is the result looked for.
func (g *Gateway) updateInRun(ctx context.Context, task, runID, id, what string, take func(*commonpb.Payloads) bool) error {
	ctx, cancel := context.WithTimeout(ctx, historyReadTimeout)
	defer cancel()
	select {
	case g.histories <- struct{}{}:
		defer func() { <-g.histories }()
	case <-ctx.Done():
		return fmt.Errorf("the gateway was busy reading other histories for %s; send the call again to retry", historyReadTimeout)
	}
	it := g.opts.Temporal.GetWorkflowHistory(ctx, task, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	scanned := 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				return fmt.Errorf("the history of run %s is no longer kept (the namespace's retention has passed since that run closed)", runID)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("reading the history of run %s took longer than %s", runID, historyReadTimeout)
			}
			return fmt.Errorf("reading the history of run %s failed: %v", runID, err)
		}
		if scanned += proto.Size(ev); scanned > maxHistoryScan {
			return fmt.Errorf("the history of run %s is larger than the %d MiB the gateway reads to answer a retry", runID, maxHistoryScan>>20)
		}
		a := ev.GetWorkflowExecutionUpdateCompletedEventAttributes()
		if a == nil || a.GetMeta().GetUpdateId() != id {
			continue
		}
		if s := a.GetOutcome().GetSuccess(); s == nil || !take(s) {
			return fmt.Errorf("the history of run %s does not hold the result of %s", runID, what)
		}
		return nil
	}
	return fmt.Errorf("the history of run %s has no result of %s", runID, what)
}

// firstResult turns the task's answer to a repeated call into the call's
// first result: unchanged when the task held it (or is no repeat), else
// read from the history of the run that ran it (resultInRun). When that
// history cannot be read, the answer stays the pointer to it (what the
// call's outcome was and where its result is recorded), saying why the
// result itself could not be had.
func (g *Gateway) firstResult(ctx context.Context, task, call string, res api.CallResult) api.CallResult {
	r := res.Repeat
	if r == nil || r.Held || r.RunID == "" {
		return res
	}
	full, err := g.resultInRun(ctx, task, r.RunID, call)
	if err == nil {
		full.Repeat = &api.Repeat{Run: r.Run, RunID: r.RunID, Held: true}
		return full
	}
	g.log.Info().Str("task", task).Str("call", call).Str("run", r.RunID).Err(err).Msg("retry answered without its result")
	res.Reason += fmt.Sprintf(" (The gateway could not read that result itself: %s.)", err)
	var out struct {
		IsError bool `json:"isError"`
	}
	_ = json.Unmarshal(res.Result, &out)
	res.Result, _ = json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": res.Reason}}, "isError": out.IsError})
	return res
}
