package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestProgramCrossesContinueAsNew: a task that continues as new after 4
// calls runs a program of 10 writes. The program is not cut short by the
// drain: it finishes ok with all its calls, each run once; the task
// continues as new after it; and the same program key sent again, now in
// the new run, gets the first run's result (carried), running nothing.
func TestProgramCrossesContinueAsNew(t *testing.T) {
	t.Parallel()
	const canAfter, calls = 4, 10
	m, effects := counterManifest(t, `  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, timeout: 60s}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1000, continueAsNewAfter: canAfter,
		programs: &gateway.ProgramOptions{}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__put", gateway.ToolRunProgram)

	// A direct call first: the task exists, in its first run.
	first := call(t, cs, "counter__echo", map[string]any{"text": "before"}, "")
	if first.IsError {
		t.Fatalf("echo: %s", text(first))
	}
	task := resultTask(t, first)
	run1 := historyLengths(t, s.client, map[string]bool{task: true})[task].run

	src := fmt.Sprintf(`def main():
    done = []
    for i in range(%d):
        counter.put(key="can-%%d" %% i)
        done.append(i)
    return done
`, calls)
	res, sc := programOK(t, cs, src, "across-can", calls)
	want := mustJSON(t, sc["result"])
	if want != mustJSON(t, rangeInts(calls)) {
		t.Fatalf("program result %s, want 0..%d", want, calls-1)
	}
	if got := resultTask(t, res); got != task {
		t.Fatalf("program ran in task %s, want %s", got, task)
	}

	waitFor(t, "the task to continue as new after the program", 30*time.Second, func() bool {
		return historyLengths(t, s.client, map[string]bool{task: true})[task].run != run1
	})
	if st := status(t, s, task); st.Runs < 2 {
		t.Fatalf("the task's status shows %d runs, want it continued as new", st.Runs)
	}

	again, sc2 := programOK(t, cs, src, "across-can", calls)
	if got := mustJSON(t, sc2["result"]); got != want {
		t.Errorf("the program's key sent again in the new run answered %s, want the first result %s", got, want)
	}
	if got, want := mustJSON(t, sc2["calls"]), mustJSON(t, sc["calls"]); got != want {
		t.Errorf("the retry's calls %s, want the first run's %s", got, want)
	}
	if got, want := again.Meta[gateway.MetaCall], res.Meta[gateway.MetaCall]; got != want {
		t.Errorf("the retry answered for program %v, want %v", got, want)
	}
	for i := range calls {
		if n := sideEffects(t, effects, "put", fmt.Sprintf("can-%d", i)); n != 1 {
			t.Errorf("put can-%d ran %d times, want once", i, n)
		}
	}
}

// rangeInts is [0, n).
func rangeInts(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestProgramRetryAfterItsResultIsForgotten: a task carries the results of
// its newest programs across continue-as-new (16), not all. A program
// older than that, sent again with its key, is not run again, and gets
// its first result byte for byte: the task names the run that ran it,
// and the gateway reads the result from that run's history (issue 28
// item 6, for programs as for calls). Before, the retry got an error
// saying only that the program had run.
func TestProgramRetryAfterItsResultIsForgotten(t *testing.T) {
	t.Parallel()
	const canAfter, later = 4, 20
	m, effects := counterManifest(t, `  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true, timeout: 60s}
`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, maxCalls: 1000, continueAsNewAfter: canAfter,
		programs: &gateway.ProgramOptions{}})
	cs := s.connect(t, nil)
	waitTools(t, cs, "counter__put", gateway.ToolRunProgram)

	src := func(key string) string {
		return fmt.Sprintf("def main():\n    counter.put(key=%q)\n    print(\"put\", %q)\n    return {\"key\": %q}\n", key, key, key)
	}
	first, _ := programOK(t, cs, src("old"), "old", 1)
	task := resultTask(t, first)
	for i := range later {
		programOK(t, cs, src(fmt.Sprint("later-", i)), fmt.Sprint("later-", i), 1)
	}
	if st := status(t, s, task); st.Runs < 3 {
		t.Fatalf("the task ran %d runs, want it continued as new several times", st.Runs)
	}
	again, sc := runProgram(t, cs, src("old"), false, "old")
	if got, want := resultJSON(t, again), resultJSON(t, first); got != want {
		t.Fatalf("the oldest program's key sent again answered\n%s\nwant its first result\n%s", got, want)
	}
	if sc["outcome"] != "ok" {
		t.Errorf("retry outcome %v", sc["outcome"])
	}
	// airlock_await of it, and of a program of an earlier run the task
	// still carries, answer at once with their results (they waited out
	// the wait and answered "still running": no Update of the current
	// run has their IDs).
	if aw := call(t, cs, gateway.ToolAwait, map[string]any{"call": "prog-k-old"}, ""); resultJSON(t, aw) != resultJSON(t, first) {
		t.Errorf("%s of the oldest program answered %s, want its first result", gateway.ToolAwait, resultJSON(t, aw))
	}
	if aw := call(t, cs, gateway.ToolAwait, map[string]any{"call": "prog-k-later-10"}, ""); !strings.Contains(text(aw), `{"key":"later-10"}`) {
		t.Errorf("%s of a carried program answered %s, want its result", gateway.ToolAwait, resultJSON(t, aw))
	}
	// A newer one, still carried, is answered from the task.
	last := fmt.Sprint("later-", later-1)
	if _, sc := programOK(t, cs, src(last), last, 1); mustJSON(t, sc["result"]) != fmt.Sprintf(`{"key":%q}`, last) {
		t.Errorf("the newest program sent again answered %v", sc["result"])
	}
	if n := sideEffects(t, effects, "put", "old"); n != 1 {
		t.Errorf("put old ran %d times, want once", n)
	}
}
