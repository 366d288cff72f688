package api

import (
	"encoding/json"
	"testing"
)

// TestRenamedFieldsKeepTheirJSON: Go names changed in issue 26 (Verdict
// embedded in DecideOutput, compensation for saga/undo), the JSON keys
// that recorded histories hold did not.
func TestRenamedFieldsKeepTheirJSON(t *testing.T) {
	tc := &ToolCall{Tool: "fs__restore"}
	e := CompensationEntry{CallID: "c1", Compensation: tc, State: CompensationPending}
	for _, c := range []struct {
		name      string
		v         any
		want, not []string
	}{
		{"DecideOutput", DecideOutput{Verdict: Verdict{Effect: Deny, Check: CheckRule, Rule: "r", Reason: "no", Version: "v1"}},
			[]string{"Effect", "Check", "Rule", "Reason", "Version"}, []string{"Verdict"}},
		{"Decision", Verdict{Effect: Allow, Check: CheckDefault, Version: "v1"}.Recorded(),
			[]string{"Effect", "Check", "PolicyVersion"}, []string{"Version", "Reason"}},
		{"CompensationEntry", e, []string{"CallID", "Undo", "State"}, []string{"Compensation"}},
		{"CompensationOutput", CompensationOutput{Compensation: tc}, []string{"Undo"}, []string{"Compensation"}},
		{"RemainingCompensation", RemainingCompensation{CallID: "c1", Compensation: "fs__restore"}, []string{"Undo"}, []string{"Compensation"}},
		{"RollbackTaskInput", RollbackTaskInput{TaskID: "t"}, []string{"Saga"}, []string{"Compensations"}},
		{"Status", Status{Compensations: []CompensationEntry{e}}, []string{"Saga"}, []string{"Compensations"}},
		{"Carried", Carried{Compensations: []CompensationEntry{e}}, []string{"Saga"}, []string{"Compensations"}},
	} {
		b, err := json.Marshal(c.v)
		var m map[string]json.RawMessage
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, k := range c.want {
			if m[k] == nil {
				t.Errorf("%s has no key %q: %s", c.name, k, b)
			}
		}
		for _, k := range c.not {
			if m[k] != nil {
				t.Errorf("%s has a key %q it never had: %s", c.name, k, b)
			}
		}
	}
	var back CompensationEntry
	if err := json.Unmarshal([]byte(`{"CallID":"c1","Undo":{"Tool":"fs__restore"}}`), &back); err != nil || back.Compensation == nil || back.Compensation.Tool != "fs__restore" {
		t.Errorf("a recorded entry decodes as %+v (%v)", back, err)
	}
}
