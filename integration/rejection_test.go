package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// TestCallRejectionsAreTyped: the call_tool validator's refusals that the
// gateway acts on (continuing as new: retry; finishing: say so) reach a
// client of the real server as application errors of their api types, with
// the validator's words as the message, both from a plain Update and from
// Update-with-Start, the two ways the gateway sends a call.
func TestCallRejectionsAreTyped(t *testing.T) {
	t.Parallel()
	counter := testupstreamManifest(t, filepath.Join(t.TempDir(), "effects.log"))
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{counter}})
	waitTools(t, s.connect(t, nil), "counter__put")

	ctx := context.Background()
	taskID := "typed-rejections"
	in := api.TaskInput{TaskID: taskID, Principal: "tester",
		Identity: &api.Identity{Name: "tester", Permissions: []string{"*"}, DataLevel: "restricted", AllowTools: []string{"counter__*"}},
		// One call is enough to make the task continue as new once it is idle.
		Limits: api.Limits{MaxCalls: 10, IdleTimeout: time.Hour, ContinueAsNewAfter: 1}}
	start := client.StartWorkflowOptions{ID: taskID, TaskQueue: api.DefaultTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING}
	if _, err := s.client.ExecuteWorkflow(ctx, start, api.AgentTaskName, in); err != nil {
		t.Fatal(err)
	}
	put := func(id string) api.CallRequest {
		return api.CallRequest{CallID: id, Tool: "counter__put", Server: "counter", UpstreamTool: "put",
			Arguments: json.RawMessage(`{"key":"` + id + `","sleep_ms":5000}`), Spec: api.ToolSpec{Timeout: 30 * time.Second, Idempotent: true}}
	}
	opts := func(c api.CallRequest, stage client.WorkflowUpdateStage) client.UpdateWorkflowOptions {
		return client.UpdateWorkflowOptions{WorkflowID: taskID, UpdateID: c.CallID, UpdateName: api.UpdateCallTool,
			Args: []any{c}, WaitForStage: stage}
	}
	// rejection sends c as the gateway does, plainly or with start, and
	// returns the error it ends with.
	rejection := func(c api.CallRequest, withStart bool) error {
		var h client.WorkflowUpdateHandle
		var err error
		if withStart {
			h, err = s.client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
				StartWorkflowOperation: s.client.NewWithStartWorkflowOperation(start, api.AgentTaskName, in),
				UpdateOptions:          opts(c, client.WorkflowUpdateStageCompleted)})
		} else {
			h, err = s.client.UpdateWorkflow(ctx, opts(c, client.WorkflowUpdateStageCompleted))
		}
		if err == nil {
			var res api.CallResult
			if err = h.Get(ctx, &res); err == nil {
				t.Fatalf("call %s (with start: %v) was accepted: %+v", c.CallID, withStart, res)
			}
		}
		return err
	}
	want := func(err error, errType, msg string) {
		t.Helper()
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != errType || appErr.Message() != msg {
			t.Fatalf("rejection %#v (%v); want an application error of type %s saying %q", err, err, errType, msg)
		}
	}

	// A slow call runs; the task has reached ContinueAsNewAfter and drains.
	h1, err := s.client.UpdateWorkflow(ctx, opts(put("c1"), client.WorkflowUpdateStageAccepted))
	if err != nil {
		t.Fatal(err)
	}
	for _, withStart := range []bool{false, true} {
		want(rejection(put("c2"), withStart), api.ErrTypeContinuingAsNew, fmt.Sprintf("%s: task %s", api.ErrContinuingAsNew, taskID))
	}

	// Asked to finish, it refuses new calls as finishing. The signal and an
	// Update sent right after it may reach the workflow in either order, so
	// wait until a call is refused as finishing, then check both ways.
	if err := s.client.SignalWorkflow(ctx, taskID, "", api.SignalFinish, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	waitFor(t, "the finish signal to reach the task", time.Minute, func() bool {
		n++
		var appErr *temporal.ApplicationError
		return errors.As(rejection(put(fmt.Sprintf("c3-%d", n)), false), &appErr) && appErr.Type() == api.ErrTypeFinishing
	})
	for _, withStart := range []bool{false, true} {
		want(rejection(put("c3"), withStart), api.ErrTypeFinishing, fmt.Sprintf("task %s is finishing; start a new task", taskID))
	}

	var r1 api.CallResult
	if err := h1.Get(ctx, &r1); err != nil || r1.Outcome != api.OutcomeOK {
		t.Fatalf("c1: %+v, %v", r1, err)
	}
	var out api.TaskResult
	if err := s.client.GetWorkflow(ctx, taskID, "").Get(ctx, &out); err != nil || out.State != api.StateFinished || out.Calls != 1 {
		t.Fatalf("task result %+v, %v", out, err)
	}
}
