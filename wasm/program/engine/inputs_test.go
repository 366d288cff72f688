package engine

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// TestInputs: Request.Inputs is the frozen global dict inputs, in the
// document's order with exact integers; without Inputs there is no such
// global; Inputs that are not one JSON object are refused before anything
// runs.
func TestInputs(t *testing.T) {
	req := func(src, inputs string) wire.Request {
		r := wire.Request{ProgramID: "p1", Source: src, Tools: fsTools, Limits: testLimits}
		if inputs != "" {
			r.Inputs = []byte(inputs)
		}
		return r
	}
	d := Run(req(`result = [inputs["vars"]["who"], list(inputs.keys()), inputs["n"] + 1]`,
		`{"vars": {"who": "ada"}, "z": 1, "n": 9007199254740993}`), newHost(t, nil))
	if d.Outcome != wire.OutcomeOK || string(d.Result) != `["ada",["vars","z","n"],9007199254740994]` {
		t.Errorf("inputs read: %+v (%s)", d, d.Result)
	}
	if d := Run(req(`inputs["x"] = 1`, `{"x": 0}`), newHost(t, nil)); d.Outcome != wire.OutcomeError || !strings.Contains(d.Error, "frozen") {
		t.Errorf("inputs written: %+v; want an error (frozen)", d)
	}
	if d := Run(req(`result = inputs`, ""), newHost(t, nil)); d.Outcome != wire.OutcomeInvalid || !strings.Contains(d.Error, "inputs") {
		t.Errorf("no inputs: %+v; want an undefined name", d)
	}
	for _, bad := range []string{`[1, 2]`, `"x"`, `{"a": 1} trailing`, `{`} {
		if d := Run(req(`result = 1`, bad), newHost(t, nil)); d.Outcome != wire.OutcomeInvalid || !strings.Contains(d.Error, "Inputs must be one JSON object") {
			t.Errorf("Inputs %q: %+v; want invalid", bad, d)
		}
	}
}
