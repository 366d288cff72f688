package workflows_test

import (
	"encoding/json"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// TestReplayLabels replays the recorded trifecta (labels_v1, integration's
// TestLabelsTrifectaOnNPMFilesystem) and checks what its runs hold: the
// labels marker in each, the first run's calls raising read confidential
// and then untrusted, the labels carried into the second run, and there the
// operator's reset (who and why) before a send that raised egress.
func TestReplayLabels(t *testing.T) {
	type run struct {
		marker  bool
		raised  []string
		carried *api.Labels
		resets  []api.ResetLabelsRequest
	}
	read := func(file string) run {
		hist := replayedHistory(t, file)
		var out run
		for _, e := range hist.GetEvents() {
			if a := e.GetWorkflowExecutionStartedEventAttributes(); a != nil {
				var in api.TaskInput
				if err := json.Unmarshal(a.GetInput().GetPayloads()[0].GetData(), &in); err != nil {
					t.Fatal(err)
				}
				if in.Carried != nil {
					out.carried = in.Carried.Labels
				}
			}
			if m := e.GetMarkerRecordedEventAttributes(); m != nil {
				if id := m.GetDetails()["change-id"]; id != nil && string(id.GetPayloads()[0].GetData()) == `"labels"` {
					out.marker = true
				}
			}
			if a := e.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil && a.GetAcceptedRequest().GetInput().GetName() == api.UpdateResetLabels {
				var r api.ResetLabelsRequest
				if err := json.Unmarshal(a.GetAcceptedRequest().GetInput().GetArgs().GetPayloads()[0].GetData(), &r); err != nil {
					t.Fatal(err)
				}
				out.resets = append(out.resets, r)
			}
			if a := e.GetWorkflowExecutionUpdateCompletedEventAttributes(); a != nil {
				if p := a.GetOutcome().GetSuccess().GetPayloads(); len(p) > 0 {
					var res api.CallResult
					if json.Unmarshal(p[0].GetData(), &res) == nil && res.Labels != nil {
						out.raised = append(out.raised, res.Tool+": "+res.Labels.String())
					}
				}
			}
		}
		return out
	}
	r1, r2 := read("labels_v1_run1.json"), read("labels_v1_run2.json")
	if !r1.marker || !r2.marker {
		t.Errorf("labels markers: run 1 %v, run 2 %v", r1.marker, r2.marker)
	}
	want1 := []string{"filesystem__read_text_file: read confidential",
		"counter__echo: read confidential; untrusted (counter__echo (open_world))"}
	if len(r1.raised) != 2 || r1.raised[0] != want1[0] || r1.raised[1] != want1[1] {
		t.Errorf("run 1 raised %q, want %q", r1.raised, want1)
	}
	if c := r2.carried; c == nil || c.ReadLevel != "confidential" || !c.Untrusted || len(c.Egress) != 0 {
		t.Errorf("run 2 was carried labels %+v", r2.carried)
	}
	if len(r2.resets) != 1 || r2.resets[0].By != "oscar" || r2.resets[0].Reason == "" {
		t.Errorf("run 2 resets %+v", r2.resets)
	}
	if len(r2.raised) != 1 || r2.raised[0] != "counter__append: read internal; egress counter__append" {
		t.Errorf("run 2 raised %q", r2.raised)
	}
}
