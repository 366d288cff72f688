package integration

import (
	"fmt"
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
