package integration

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/manifests"
)

// TestOversizedCallsDoNotWedgeTheTask: arguments or a result too large for
// a task's history are refused or replaced with a clear error, and the task
// goes on taking calls. (Before the checks, a 3 MB argument left the task's
// workflow task failing for good: every later call failed.)
func TestOversizedCallsDoNotWedgeTheTask(t *testing.T) {
	t.Parallel()
	m, _ := counterManifest(t, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true, retry: {max_attempts: 1}}\n")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}, maxResultBytes: 64 << 10})
	cs := s.connect(t, map[string]string{gateway.HeaderTask: "big-task"})
	waitTools(t, cs, "counter__echo")
	if res := call(t, cs, "counter__echo", map[string]any{"text": "first"}, ""); res.IsError {
		t.Fatalf("first call: %s", text(res))
	}
	res := call(t, cs, "counter__echo", map[string]any{"text": strings.Repeat("x", 3<<20)}, "")
	if !res.IsError || !strings.Contains(text(res), "more than the 1048576 a task can record") {
		t.Fatalf("3 MB of arguments: isError=%v %.300s", res.IsError, text(res))
	}
	// Between the policy's limit and the history's, the policy denies (and
	// the denial is recorded with the task).
	res = call(t, cs, "counter__echo", map[string]any{"text": strings.Repeat("z", 300<<10)}, "")
	if !res.IsError || !strings.Contains(text(res), "denied") || !strings.Contains(text(res), "bytes") {
		t.Fatalf("300 KB of arguments: isError=%v %.300s", res.IsError, text(res))
	}
	res = call(t, cs, "counter__echo", map[string]any{"text": strings.Repeat("y", 100<<10)}, "")
	if !res.IsError || !strings.Contains(text(res), "ran, but its result is") {
		t.Fatalf("a 100 KB result over a 64 KB limit: isError=%v %.300s", res.IsError, text(res))
	}
	if res := call(t, cs, "counter__echo", map[string]any{"text": "after"}, ""); res.IsError || text(res) != "after" {
		t.Fatalf("the task after the oversized calls: isError=%v %s", res.IsError, text(res))
	}
}
