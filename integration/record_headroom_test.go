package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// TestRecordFastHeadroomHistory records an agent task under
// changeFastHeadroom on the real server: max_calls 66, so that the first
// two echo calls (65 and 64 calls left) take the fast path and the third
// (63 left, within the headroom of 64 the server's
// history.maxInFlightUpdates now allows) takes the regular pipeline,
// where a run from before the change (headroom 10) took the fast path.
// With -record it writes fast_headroom_v1_run1.json.
func TestRecordFastHeadroomHistory(t *testing.T) {
	t.Parallel()
	m, _ := counterManifest(t, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{m}})
	waitTools(t, s.connect(t, nil), "counter__echo")

	ctx := context.Background()
	const taskID = "record-fast-headroom"
	in := api.TaskInput{TaskID: taskID, Principal: "recorder",
		Identity: &api.Identity{Name: "recorder", Permissions: []string{"*"}, DataLevel: "restricted", AllowTools: []string{"counter__*"}},
		Limits:   api.Limits{MaxCalls: 66, IdleTimeout: time.Hour}}
	run, err := s.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: taskID, TaskQueue: api.DefaultTaskQueue}, api.AgentTaskName, in)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		c := api.CallRequest{CallID: fmt.Sprintf("e%d", i), Tool: "counter__echo", Server: "counter", UpstreamTool: "echo",
			Arguments: json.RawMessage(fmt.Sprintf(`{"text":"e%d"}`, i)), Spec: api.SpecFor(m.Tools["echo"])}
		res, err := sendCall(ctx, s, taskID, c)
		if err != nil || res.Outcome != api.OutcomeOK {
			t.Fatalf("call %s: %+v %v", c.CallID, res, err)
		}
	}
	finishTask(t, s, taskID)
	hist := fetchHistory(t, s.client, taskID, "")
	var local, regular []string
	marker := false
	for _, ev := range hist.Events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			regular = append(regular, a.GetActivityType().GetName())
		}
		if mk := ev.GetMarkerRecordedEventAttributes(); mk != nil {
			if mk.GetMarkerName() == "LocalActivity" {
				local = append(local, string(mk.GetDetails()["data"].GetPayloads()[0].GetData()))
			}
			if strings.Contains(mk.String(), "fast-headroom-64") {
				marker = true
			}
		}
	}
	if !marker {
		t.Error("no fast-headroom-64 version marker in the history")
	}
	if len(regular) != 1 || regular[0] != api.CallToolName || len(local) != 3 ||
		!strings.Contains(local[0], api.DecideAndCallName) || !strings.Contains(local[1], api.DecideAndCallName) || !strings.Contains(local[2], `"`+api.DecideName+`"`) {
		t.Fatalf("activities %q, local activities %q; want DecideAndCall for e1 and e2, Decide and CallTool for e3", regular, local)
	}
	replayClientRuns(t, s.client, taskID, run.GetRunID(), "fast_headroom_v1")
}
