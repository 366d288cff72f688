package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// appendOnly serves testupstream's append: not idempotent, every run of
// it a line in the side-effect log.
const appendOnly = "  append: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: false, timeout: 60s}\n"

// effectCounts counts the lines of a side-effect log.
func effectCounts(t testing.TB, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		n[line]++
	}
	return n
}

// appendCount is the count an append answered, or -1 when the answer is
// not an append result.
func appendCount(res *mcp.CallToolResult) int {
	var out struct {
		Count *int `json:"count"`
	}
	if res.IsError || json.Unmarshal([]byte(text(res)), &out) != nil || out.Count == nil {
		return -1
	}
	return *out.Count
}

// alreadyRan reports whether res is the answer to a repeat whose result
// the task no longer holds.
func alreadyRan(res *mcp.CallToolResult) bool {
	s := text(res)
	return strings.Contains(s, "already ran in task") && strings.Contains(s, "was not run again") &&
		strings.Contains(s, "with outcome ok") && strings.Contains(s, "airlock audit show --run ")
}

// resendAll sends every key again from workers goroutines, checking that
// none runs: each answer is the first result (count 1) or says the call
// already ran.
func resendAll(t *testing.T, cs *mcp.ClientSession, keys []string, workers int) (held, ran int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan string)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				res := call(t, cs, "counter__append", map[string]any{"key": k}, k)
				c, ar := appendCount(res), alreadyRan(res)
				mu.Lock()
				switch {
				case c == 1:
					held++
				case ar:
					ran++
				default:
					t.Errorf("key %s sent again: %s (isError %v); want its first result or that it already ran", k, text(res), res.IsError)
				}
				mu.Unlock()
			}
		}()
	}
	for _, k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
	return held, ran
}

// checkOnce checks that the upstream ran append once for each key and for
// nothing else.
func checkOnce(t *testing.T, effects string, keys []string) {
	t.Helper()
	got := effectCounts(t, effects)
	for _, k := range keys {
		if n := got["append "+k]; n != 1 {
			t.Errorf("append %s ran %d times, want once", k, n)
		}
	}
	if len(got) != len(keys) {
		t.Errorf("the log has %d distinct side effects, want %d", len(got), len(keys))
	}
}

// TestRetryAfterContinueAsNew is issue 12's reproduction: in one task,
// hundreds of append calls with unique idempotency keys, over several
// runs, then every key sent again. Temporal deduplicates Update IDs only
// within a run, so before the call ledger the re-sent keys of earlier runs
// ran again (the first answered {"count":2}). Now each key ran once: its
// retry gets the first result while the task holds it, else the answer
// that it already ran, where.
func TestRetryAfterContinueAsNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		calls    int
		canAfter int // 0: when Temporal suggests it, or the default 500
		minRuns  int
	}{
		{name: "natural continue-as-new", calls: 520, minRuns: 2},
		{name: "every 25 calls", calls: 150, canAfter: 25, minRuns: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a stack each
			m, effects := counterManifest(t, appendOnly)
			s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1000, continueAsNewAfter: tc.canAfter})
			cs := s.connect(t, nil)
			waitTools(t, cs, "counter__append")

			keys := make([]string, tc.calls)
			taskID := ""
			for i := range keys {
				keys[i] = fmt.Sprintf("key-%d", i)
				res := call(t, cs, "counter__append", map[string]any{"key": keys[i]}, keys[i])
				if c := appendCount(res); c != 1 {
					t.Fatalf("first call of %s: %s; want count 1", keys[i], text(res))
				}
				taskID, _ = res.Meta[gateway.MetaTask].(string)
			}
			st := status(t, s, taskID)
			if st.Runs < tc.minRuns || st.Calls != tc.calls {
				t.Fatalf("the task made %d calls in %d runs; want %d in at least %d", st.Calls, st.Runs, tc.calls, tc.minRuns)
			}

			// The check: the first key, many runs ago.
			first := call(t, cs, "counter__append", map[string]any{"key": keys[0]}, keys[0])
			if !alreadyRan(first) || first.IsError {
				t.Fatalf("the first key sent again answered %q (isError %v); want that it already ran, in run 1", text(first), first.IsError)
			}
			if !strings.Contains(text(first), "in run 1 (") {
				t.Errorf("the answer does not name run 1: %s", text(first))
			}
			// The last key: the task still holds its result.
			if last := call(t, cs, "counter__append", map[string]any{"key": keys[len(keys)-1]}, keys[len(keys)-1]); appendCount(last) != 1 {
				t.Errorf("the last key sent again answered %q; want its first result", text(last))
			}
			// airlock_await collects a call of an earlier run too (not
			// sent again yet, so no Update of the current run: the
			// task's memory answers).
			aw := call(t, cs, gateway.ToolAwait, map[string]any{"call": api.CallIDForKey(keys[1])}, "")
			if !alreadyRan(aw) {
				t.Errorf("%s for the second call answered %q; want that it already ran", gateway.ToolAwait, text(aw))
			}
			// airlock_status describes such a call from the ledger too:
			// finished, its outcome and its run.
			sc := call(t, cs, gateway.ToolStatus, map[string]any{"call": api.CallIDForKey(keys[2])}, "")
			if txt := text(sc); sc.IsError || !strings.HasPrefix(txt, "call k-"+keys[2]) || !strings.Contains(txt, "finished: ok") ||
				!strings.Contains(txt, "in run 1 (") || strings.Contains(txt, "has no call") {
				t.Errorf("%s for the third call answered %q (isError %v); want it finished ok in run 1", gateway.ToolStatus, txt, sc.IsError)
			}
			held, ran := resendAll(t, cs, keys, 8)
			t.Logf("%d calls in %d runs; sent again: %d answered with their result, %d that they already ran", tc.calls, st.Runs, held, ran)
			checkOnce(t, effects, keys)
			if st := status(t, s, taskID); st.Calls != tc.calls {
				t.Errorf("after the retries the task counts %d calls, want %d", st.Calls, tc.calls)
			}
		})
	}
}

// TestCallsInFlightAcrossContinueAsNew: 8 callers in one task, each call
// slow enough that others are running when the run reaches
// ContinueAsNewAfter, and each key sent twice at nearly the same time (a
// client retrying a call in flight). The drain rejects new calls and the
// gateway retries them against the next run; a retry that lands in the old
// run joins the running call, one that lands in the new run finds it in
// the ledger. Every key ran once, and sent again later runs nothing.
func TestCallsInFlightAcrossContinueAsNew(t *testing.T) {
	t.Parallel()
	const canAfter, callers, perCaller = 10, 8, 15
	m, effects := counterManifest(t, appendOnly)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1000, continueAsNewAfter: canAfter})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__append")

	var keys []string
	var mu sync.Mutex
	taskID := ""
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perCaller {
				k := fmt.Sprintf("c%d-%d", c, i)
				args := map[string]any{"key": k, "sleep_ms": 20 + rand.IntN(180)}
				answers := make([]*mcp.CallToolResult, 2)
				var both sync.WaitGroup
				for j := range answers {
					both.Add(1)
					go func() {
						defer both.Done()
						if j == 1 { // the retry, while the first is in flight
							time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
						}
						answers[j] = call(t, cs, "counter__append", args, k)
					}()
				}
				both.Wait()
				for j, res := range answers {
					if appendCount(res) != 1 && !(j == 1 && alreadyRan(res)) {
						t.Errorf("%s, send %d: %s (isError %v); want count 1", k, j+1, text(res), res.IsError)
					}
				}
				mu.Lock()
				keys = append(keys, k)
				taskID, _ = answers[0].Meta[gateway.MetaTask].(string)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	st := status(t, s, taskID)
	if want := callers * perCaller; st.Calls != want || st.Runs < want/canAfter/2 {
		t.Fatalf("the task made %d calls in %d runs; want %d in at least %d", st.Calls, st.Runs, want, want/canAfter/2)
	}
	// The histories show that runs drained with calls still running:
	// when a run accepted its canAfter-th call, others were in flight.
	drained := inFlightAtThreshold(t, s, taskID, canAfter)
	if drained == 0 {
		t.Errorf("no run reached %d calls with others in flight; the test did not exercise the drain", canAfter)
	}
	held, ran := resendAll(t, cs, keys, callers)
	t.Logf("%d calls in %d runs, %d runs drained with calls in flight; sent again: %d with their result, %d that they already ran", st.Calls, st.Runs, drained, held, ran)
	checkOnce(t, effects, keys)
}

// inFlightAtThreshold walks the task's runs (newest to oldest) and counts
// those in which other calls were running when the run accepted its n-th
// call, so that the run had to drain them before continuing as new.
func inFlightAtThreshold(t *testing.T, s *stack, taskID string, n int) int {
	t.Helper()
	desc, err := s.client.DescribeWorkflowExecution(context.Background(), taskID, "")
	if err != nil {
		t.Fatal(err)
	}
	drained := 0
	for runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(); runID != ""; {
		hist := fetchHistory(t, s.client, taskID, runID)
		running := map[string]bool{}
		accepted := 0
		for _, ev := range hist.Events {
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
				a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes()
				if a.GetAcceptedRequest().GetInput().GetName() != api.UpdateCallTool {
					continue
				}
				running[a.GetAcceptedRequest().GetMeta().GetUpdateId()] = true
				if accepted++; accepted == n && len(running) > 1 {
					drained++
				}
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
				delete(running, ev.GetWorkflowExecutionUpdateCompletedEventAttributes().GetMeta().GetUpdateId())
			}
		}
		runID = hist.Events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
	}
	return drained
}
