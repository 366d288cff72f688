package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

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

// resultJSON is a tool result as the client got it, as JSON: what a
// retry must match byte for byte.
func resultJSON(t testing.TB, res *mcp.CallToolResult) string {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// resendAll sends every key again from workers goroutines, checking that
// none runs: each answer is its first result, byte for byte (firsts, by
// key), whether the task still held it or the gateway read it from the
// history of the run that ran it.
func resendAll(t *testing.T, cs *mcp.ClientSession, keys []string, firsts map[string]string, workers int) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan string)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				res := call(t, cs, "counter__append", map[string]any{"key": k}, k)
				if got := resultJSON(t, res); got != firsts[k] {
					t.Errorf("key %s sent again answered\n%s\nwant its first result\n%s", k, got, firsts[k])
				}
			}
		}()
	}
	for _, k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
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
// ran again (the first answered {"count":2}). Now each key ran once, and
// its retry gets the first result byte for byte, for the task's whole
// life (issue 28 item 6): from the task while it holds it, else read by
// the gateway from the history of the run that ran it.
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
			firsts := map[string]string{}
			taskID := ""
			for i := range keys {
				keys[i] = fmt.Sprintf("key-%d", i)
				res := call(t, cs, "counter__append", map[string]any{"key": keys[i]}, keys[i])
				if c := appendCount(res); c != 1 {
					t.Fatalf("first call of %s: %s; want count 1", keys[i], text(res))
				}
				firsts[keys[i]] = resultJSON(t, res)
				taskID, _ = res.Meta[gateway.MetaTask].(string)
			}
			st := status(t, s, taskID)
			if st.Runs < tc.minRuns || st.Calls != tc.calls {
				t.Fatalf("the task made %d calls in %d runs; want %d in at least %d", st.Calls, st.Runs, tc.calls, tc.minRuns)
			}

			// The check: the first key, many runs ago, gets
			// what it got the first time, structuredContent and all.
			first := call(t, cs, "counter__append", map[string]any{"key": keys[0]}, keys[0])
			if got := resultJSON(t, first); got != firsts[keys[0]] || first.StructuredContent == nil {
				t.Fatalf("the first key sent again answered\n%s\nwant its first result\n%s", got, firsts[keys[0]])
			}
			// The last key: the task still holds its result.
			if last := call(t, cs, "counter__append", map[string]any{"key": keys[len(keys)-1]}, keys[len(keys)-1]); resultJSON(t, last) != firsts[keys[len(keys)-1]] {
				t.Errorf("the last key sent again answered %q; want its first result", text(last))
			}
			// airlock_await collects a call of an earlier run too (not
			// sent again yet, so no Update of the current run: the
			// task's memory says where it ran, that run's history what
			// it returned).
			aw := call(t, cs, gateway.ToolAwait, map[string]any{"call": api.CallIDForKey(keys[1])}, "")
			if got := resultJSON(t, aw); got != firsts[keys[1]] {
				t.Errorf("%s for the second call answered\n%s\nwant its first result\n%s", gateway.ToolAwait, got, firsts[keys[1]])
			}
			// airlock_status describes such a call from the ledger too:
			// finished, its outcome and its run, and airlock_await gets
			// its result.
			sc := call(t, cs, gateway.ToolStatus, map[string]any{"call": api.CallIDForKey(keys[2])}, "")
			if txt := text(sc); sc.IsError || !strings.HasPrefix(txt, "call k-"+keys[2]) || !strings.Contains(txt, "finished: ok") ||
				!strings.Contains(txt, "in run 1 (") || strings.Contains(txt, "has no call") || !strings.Contains(txt, "Call "+gateway.ToolAwait+" to get its result") {
				t.Errorf("%s for the third call answered %q (isError %v); want it finished ok in run 1, its result from %s", gateway.ToolStatus, txt, sc.IsError, gateway.ToolAwait)
			}
			resendAll(t, cs, keys, firsts, 8)
			t.Logf("%d calls in %d runs; every key sent again got its first result", tc.calls, st.Runs)
			checkOnce(t, effects, keys)
			if st := status(t, s, taskID); st.Calls != tc.calls {
				t.Errorf("after the retries the task counts %d calls, want %d", st.Calls, tc.calls)
			}
		})
	}
}

// TestRetryAfterContinueAsNewOtherPrincipal: the gateway reads an old
// run's history only for the task the caller owns. alice's call ran in
// run 1 of her task, since continued as new; bob sends the same
// idempotency key in his own task (it is a new call there: it runs, with
// his arguments), and names alice's task on a tools/call and on
// airlock_await with her call's ID: each is refused, nothing of her
// result comes back, and her call ran once. Her own retry still gets her
// first result.
func TestRetryAfterContinueAsNewOtherPrincipal(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, appendOnly)
	dir := allGrants(nil, "alice", "bob")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1000, continueAsNewAfter: 5, directory: dir})
	alice := s.connect(t, map[string]string{"Authorization": "Bearer alice-key"})
	waitTools(t, alice, "counter__append")
	const key = "shared-key"
	firstRes := call(t, alice, "counter__append", map[string]any{"key": "alice-secret"}, key)
	if appendCount(firstRes) != 1 {
		t.Fatalf("alice's call: %s", text(firstRes))
	}
	firstJSON := resultJSON(t, firstRes)
	taskID, _ := firstRes.Meta[gateway.MetaTask].(string)
	for i := range 12 { // past two continue-as-new
		k := fmt.Sprintf("filler-%d", i)
		if res := call(t, alice, "counter__append", map[string]any{"key": k}, k); appendCount(res) != 1 {
			t.Fatalf("%s: %s", k, text(res))
		}
	}
	if st := status(t, s, taskID); st.Runs < 3 {
		t.Fatalf("alice's task is in run %d; want at least 3", st.Runs)
	}

	leaks := func(what string, res *mcp.CallToolResult) {
		t.Helper()
		if j := resultJSON(t, res); strings.Contains(j, "alice-secret") {
			t.Errorf("%s answered with alice's result: %s", what, j)
		}
	}
	// bob's own task: the key is his, a new call that runs with his
	// arguments.
	bob := s.connect(t, map[string]string{"Authorization": "Bearer bob-key"})
	waitTools(t, bob, "counter__append")
	own := call(t, bob, "counter__append", map[string]any{"key": "bob-side"}, key)
	if appendCount(own) != 1 || !strings.Contains(text(own), "bob-side") || own.Meta[gateway.MetaTask] == taskID {
		t.Errorf("bob's call with alice's key in his own task answered %s; want it run, in his task", resultJSON(t, own))
	}
	leaks("bob's call with alice's key", own)
	// bob naming alice's task: refused, on a tools/call with her key and
	// on airlock_await with her call's ID.
	bobIn := connectStateless(t, s.url, map[string]string{"Authorization": "Bearer bob-key", gateway.HeaderTask: taskID})
	res := call(t, bobIn, "counter__append", map[string]any{"key": "alice-secret"}, key)
	if !res.IsError || !strings.Contains(text(res), "belongs to another principal") {
		t.Errorf("bob's call naming alice's task answered %s; want it refused", resultJSON(t, res))
	}
	leaks("bob's call naming alice's task", res)
	aw := call(t, bobIn, gateway.ToolAwait, map[string]any{"call": api.CallIDForKey(key)}, "")
	if !aw.IsError {
		t.Errorf("bob's %s naming alice's task answered %s; want it refused", gateway.ToolAwait, resultJSON(t, aw))
	}
	leaks("bob's "+gateway.ToolAwait+" naming alice's task", aw)

	// alice's retry: her first result, byte for byte; her call ran once.
	again := call(t, alice, "counter__append", map[string]any{"key": "alice-secret"}, key)
	if got := resultJSON(t, again); got != firstJSON {
		t.Errorf("alice's retry answered\n%s\nwant her first result\n%s", got, firstJSON)
	}
	if n := effectCounts(t, effects)["append alice-secret"]; n != 1 {
		t.Errorf("alice's call ran %d times, want once", n)
	}
	if n := effectCounts(t, effects)["append bob-side"]; n != 1 {
		t.Errorf("bob's call ran %d times, want once", n)
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
	firsts := map[string]string{}
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
					if appendCount(res) != 1 {
						t.Errorf("%s, send %d: %s (isError %v); want count 1", k, j+1, text(res), res.IsError)
					}
				}
				if a, b := resultJSON(t, answers[0]), resultJSON(t, answers[1]); a != b {
					t.Errorf("%s: the retry in flight answered\n%s\nthe first send\n%s", k, b, a)
				}
				mu.Lock()
				keys = append(keys, k)
				firsts[k] = resultJSON(t, answers[0])
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
	resendAll(t, cs, keys, firsts, callers)
	t.Logf("%d calls in %d runs, %d runs drained with calls in flight; every key sent again got its first result", st.Calls, st.Runs, drained)
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

// TestRetryAfterItsRunIsDeleted: the history of the run that ran a call is
// gone (deleted here, as the namespace's retention deletes a closed run):
// its retry is answered that it already ran, with its outcome, the run,
// and why the gateway could not read the result; it does not run again. A
// call of a later run whose history is still kept gets its first result.
func TestRetryAfterItsRunIsDeleted(t *testing.T) {
	t.Parallel()
	m, effects := counterManifest(t, appendOnly)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1000, continueAsNewAfter: 5})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__append")
	ctx := context.Background()
	keys := make([]string, 45) // runs of 5; the last 32 carried
	firsts := map[string]string{}
	taskID, run1 := "", ""
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
		res := call(t, cs, "counter__append", map[string]any{"key": keys[i]}, keys[i])
		if appendCount(res) != 1 {
			t.Fatalf("first call of %s: %s", keys[i], text(res))
		}
		firsts[keys[i]] = resultJSON(t, res)
		if i == 0 {
			taskID, _ = res.Meta[gateway.MetaTask].(string)
			d, err := s.client.DescribeWorkflowExecution(ctx, taskID, "")
			if err != nil {
				t.Fatal(err)
			}
			run1 = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		}
	}
	if _, err := s.client.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: s.srv.Namespace(), WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: taskID, RunId: run1}}); err != nil {
		t.Fatal(err)
	}
	// The server deletes it in the background (about 30 s here).
	t0 := time.Now()
	waitUntil(t, "run 1 to be deleted", 2*time.Minute, func() error {
		it := s.client.GetWorkflowHistory(ctx, taskID, run1, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var nf *serviceerror.NotFound
		if _, err := it.Next(); !errors.As(err, &nf) {
			return fmt.Errorf("run %s's history is still there (%v)", run1, err)
		}
		return nil
	})
	t.Logf("run 1 deleted after %s", time.Since(t0).Round(time.Millisecond))

	res := call(t, cs, "counter__append", map[string]any{"key": keys[0]}, keys[0])
	txt := text(res)
	for _, w := range []string{"already ran in task " + taskID, "in run 1 (" + run1 + ")", "with outcome ok", "airlock audit show --run " + run1,
		"The gateway could not read that result itself: the history of run " + run1 + " is no longer kept"} {
		if !strings.Contains(txt, w) {
			t.Errorf("the retry of a call of a deleted run answered %q; want it to contain %q", txt, w)
		}
	}
	if res.IsError || res.StructuredContent != nil {
		t.Errorf("the retry of a call of a deleted run: isError %v, structuredContent %v; want the pointer, not an error", res.IsError, res.StructuredContent)
	}
	// Run 2's first call is not carried either; its run is kept.
	if got := resultJSON(t, call(t, cs, "counter__append", map[string]any{"key": keys[5]}, keys[5])); got != firsts[keys[5]] {
		t.Errorf("the retry of a call of run 2 answered\n%s\nwant its first result\n%s", got, firsts[keys[5]])
	}
	checkOnce(t, effects, keys)
}
