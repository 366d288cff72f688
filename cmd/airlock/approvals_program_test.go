package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/testenv"
	"github.com/airlock-run/airlock/workflows"
)

// TestApprovalsProgramCall (issue 27 §5), end to end on airlock dev: a
// call a program makes waits for approval next to one the agent made, and
// `airlock approvals list` and `show` and airlock_approvals_list say which
// program and line made it, and nothing of programs for the agent's own.
func TestApprovalsProgramCall(t *testing.T) {
	workflows.UseProgramRunner(&testenv.ScriptRunner{})
	t.Cleanup(func() { workflows.UseProgramRunner(nil) })
	cfg, _ := approvalsConfig(t, buildTestupstream(t))
	ctx, s := approvalsDev(t, cfg, t.TempDir())
	temporal := []string{"--config", cfg, "--temporal-address", s.srv.HostPort()}

	// alice's own call waits; its request names her task.
	cs := approvalsSession(t, ctx, s, "alice-key")
	waitAvailable(t, ctx, cs, "counter__append")
	called := make(chan struct{})
	go func() {
		defer close(called)
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "counter__append", Arguments: map[string]any{"key": "direct"}})
	}()
	direct := listedRequest(t, temporal, regexp.MustCompile(`(?m)^(\S+~\S+)\s+\S+\s+counter__append\s+alice\s`))
	task, _, _ := api.SplitRequestID(direct)

	// A program in the same task makes the same call at its line 2.
	var spec api.ToolSpec
	for _, m := range s.env.snap.Manifests {
		if tool, ok := m.Tools["append"]; ok && m.Server.Name == "counter" {
			spec = api.SpecFor(tool)
		}
	}
	req := api.ProgramRequest{ProgramID: "prog-7", Principal: "alice", Limits: api.DefaultProgramLimits,
		Source: "counter.append(key=\"p\")", Tools: []api.ProgramTool{
			{Name: "counter__append", Module: "counter", Function: "append", Server: "counter", UpstreamTool: "append", Spec: spec}}}
	req.Source = "# the program's first line\n" + req.Source
	h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: task, UpdateID: req.ProgramID,
		UpdateName: api.UpdateRunProgram, Args: []any{req}, WaitForStage: client.WorkflowUpdateStageAccepted})
	if err != nil {
		t.Fatalf("run_program: %v", err)
	}
	prog := api.RequestID(task, api.ProgramCallID("prog-7", 1))
	var list string
	testenv.WaitFor(t, "approvals list to show the program's call", time.Minute, func() bool {
		_, list, _ = runCLI(t, append([]string{"approvals", "list"}, temporal...)...)
		return strings.Contains(list, prog)
	})
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "PROGRAM") {
		t.Fatalf("approvals list:\n%s", list)
	}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, prog+" ") && !strings.HasSuffix(l, "prog-7, line 2") || strings.HasPrefix(l, direct+" ") && !strings.HasSuffix(l, " -") {
			t.Errorf("approvals list row %q", l)
		}
	}
	_, show, _ := runCLI(t, append([]string{"approvals", "show", prog}, temporal...)...)
	if !strings.Contains(show, "\nprogram:       prog-7, line 2\n") {
		t.Errorf("approvals show %s:\n%s", prog, show)
	}
	_, show, _ = runCLI(t, append([]string{"approvals", "show", direct}, temporal...)...)
	if strings.Contains(show, "program") {
		t.Errorf("approvals show %s mentions a program:\n%s", direct, show)
	}

	// bob lists both over MCP; only the program's says where it comes from.
	res, err := approvalsSession(t, ctx, s, "bob-key").CallTool(ctx, &mcp.CallToolParams{Name: gateway.ToolApprovalsList, Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("airlock_approvals_list: %v %+v", err, res)
	}
	if text := textOf(res); strings.Count(text, "from program") != 1 || !strings.Contains(text, "\n  from program prog-7, line 2") {
		t.Errorf("airlock_approvals_list:\n%s", text)
	}

	// bob denies both: the program and the call end (a stack stopped with
	// them waiting takes its shutdown timeout).
	t.Setenv(envAPIKey, "bob-key")
	for _, id := range []string{prog, direct} {
		if code, _, stderr := runCLI(t, append([]string{"approvals", "deny", id}, temporal...)...); code != 0 {
			t.Fatalf("deny %s: %s", id, stderr)
		}
	}
	var r api.ProgramResult
	if err := h.Get(ctx, &r); err != nil || r.Outcome != api.ProgramError || r.Line != 2 {
		t.Errorf("the program whose call was denied: %+v %v", r, err)
	}
	<-called
}
