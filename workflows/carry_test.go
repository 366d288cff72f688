package workflows

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
)

func TestCarryKeepsWithinBudget(t *testing.T) {
	big := json.RawMessage(`"` + strings.Repeat("x", 200<<10) + `"`)
	small := json.RawMessage(`{"content":[]}`)
	tk := &task{in: api.TaskInput{TaskID: "t1"}, recent: []api.CallRecord{
		{CallID: "old-big", Outcome: api.OutcomeOK, Result: big},
		{CallID: "old-small", Outcome: api.OutcomeOK, Result: small},
		{CallID: "new-big", Outcome: api.OutcomeOK, Result: big},
	}}
	got := tk.carriedRecent()
	if got[2].Result == nil || got[2].ResultDropped {
		t.Error("the newest result fits the budget and must be kept")
	}
	if got[0].Result != nil || !got[0].ResultDropped {
		t.Error("an older large result beyond the budget must be dropped")
	}
	if got[1].Result == nil {
		t.Error("a small result still fits and must be kept")
	}
	if tk.recent[0].Result == nil {
		t.Error("carriedRecent changed the task's own records")
	}
	if r := string(tk.droppedResult(got[0])); !strings.Contains(r, "old-big") || !strings.Contains(r, "airlock audit show t1") {
		t.Errorf("dropped result %s", r)
	}

	tk.compensations = []api.CompensationEntry{{CallID: "a", Compensation: &api.ToolCall{Arguments: json.RawMessage(strings.Repeat("y", 600<<10))}}}
	if !tk.carriable() {
		t.Error("600 KiB of compensations fit the next run's input")
	}
	tk.compensations = append(tk.compensations, tk.compensations[0])
	if tk.carriable() {
		t.Error("1.2 MiB of compensations must keep the task in its run rather than fail to continue as new")
	}
}
