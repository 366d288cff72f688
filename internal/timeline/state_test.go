package timeline

import (
	"bytes"
	"strings"
	"testing"
)

// TestStateCallsInTimeline: calls of the built-in state tools (recorded by
// integration.TestTaskState as state_v1) appear in the audit timeline like
// any call, with the decision the task recorded (task_state, or why it was
// refused) and the compensation that undid them.
func TestStateCallsInTimeline(t *testing.T) {
	tl := build(t, []string{"state_v1_run1", "state_v1_run2", "state_v1_run3", "state_v1_run4"}, nil)
	checks := map[string]int{}
	undone := 0
	for _, c := range tl.Calls {
		if !strings.HasPrefix(c.Tool, "airlock_state_") {
			continue
		}
		if c.Decision == nil {
			t.Errorf("call %s (%s) has no decision", c.ID, c.Tool)
			continue
		}
		checks[string(c.Decision.Effect)+"/"+c.Decision.Check]++
		if c.Compensation != nil {
			undone++
		}
	}
	if checks["allow/task_state"] < 6 || checks["deny/state_schema"] != 1 || checks["deny/state_size"] != 1 {
		t.Errorf("decisions of state calls: %v", checks)
	}
	if undone != 3 {
		t.Errorf("%d state calls show a compensation, want 3 (two sets and a delete)", undone)
	}
	var b bytes.Buffer
	if err := Render(&b, tl, &RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"airlock_state_set", "state_schema", "airlock_state_restore"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("audit show lacks %q:\n%s", want, b.String())
		}
	}
}
