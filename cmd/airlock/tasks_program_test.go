package main

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/testenv"
)

// TestTasksStopProgram: `airlock tasks stop-program` stops a program whose
// call waits for approval; the call is withdrawn and the program ends
// "stopped" with the operator's reason. A program that is not running, or
// the wrong number of arguments, is refused with what to do.
func TestTasksStopProgram(t *testing.T) {
	cfg, _ := approvalsConfig(t, buildTestupstream(t))
	ctx, s := approvalsDev(t, cfg, t.TempDir())
	temporal := []string{"--config", cfg, "--temporal-address", s.srv.HostPort()}
	var spec api.ToolSpec
	for _, m := range s.env.snap.Manifests {
		if tool, ok := m.Tools["append"]; ok && m.Server.Name == "counter" {
			spec = api.SpecFor(tool)
		}
	}
	task := "stop-program-task"
	if _, err := s.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: task, TaskQueue: s.env.tq}, api.AgentTaskName,
		api.TaskInput{TaskID: task, Principal: "alice", Identity: &api.Identity{Name: "alice", Permissions: []string{"*"}, AllowTools: []string{"*"}, DataLevel: "restricted"}, Limits: api.Limits{MaxCalls: 10, IdleTimeout: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	req := api.ProgramRequest{ProgramID: "prog-stop", Principal: "alice", Limits: api.DefaultProgramLimits,
		Source: "counter.append(key=\"waits\")\n", Tools: []api.ProgramTool{
			{Name: "counter__append", Module: "counter", Function: "append", Server: "counter", UpstreamTool: "append", Spec: spec}}}
	h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: task, UpdateID: req.ProgramID,
		UpdateName: api.UpdateRunProgram, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageAccepted})
	if err != nil {
		t.Fatalf("run_program: %v", err)
	}
	testenv.WaitFor(t, "the program's call to wait for approval", time.Minute, func() bool {
		_, out, _ := runCLI(t, append([]string{"approvals", "list"}, temporal...)...)
		return strings.Contains(out, api.RequestID(task, api.ProgramCallID("prog-stop", 1)))
	})
	tc := []string{"tasks", "stop-program", "--temporal-address", s.srv.HostPort()}
	if code, _, stderr := runCLI(t, append(tc, task)...); code != 2 || !strings.Contains(stderr, "PROGRAM_ID") {
		t.Errorf("one argument: exit %d %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, append(tc, task, "prog-other")...); code != 1 || !strings.Contains(stderr, `no running program "prog-other"`) {
		t.Errorf("another program: exit %d %s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, append(tc, "--reason", "stuck", task, "prog-stop")...)
	if code != 0 || !strings.Contains(stdout, "stop requested") {
		t.Fatalf("stop-program: exit %d %s %s", code, stdout, stderr)
	}
	var r api.ProgramResult
	if err := h.Get(ctx, &r); err != nil || r.Outcome != api.ProgramStopped || !strings.Contains(r.Error, "stuck") {
		t.Fatalf("the stopped program: %+v %v", r, err)
	}
}
