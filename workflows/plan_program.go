package workflows

// A plan's program step (issue 27 §6): the step's ProgramRequest, which
// PrepareStep resolved (source, the principal's tool table, effective
// limits) and history holds, runs through the same host as the
// run_program Update (execProgram), under the plan's task: each of its
// calls is one t.callTool. The step is ok when the program ends ok.

import (
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/manifests"
)

// caller is who the task's calls run as, as the policy sees them.
func (t *task) caller() (api.Principal, []string) {
	if id := t.in.Identity; id != nil {
		return api.Principal{Name: id.Name, Roles: id.Roles, Permissions: id.Permissions,
			DataLevel: manifests.DataLevel(id.DataLevel), SlackUserID: id.SlackUserID}, id.AllowTools
	}
	return api.Principal{Name: t.in.Principal}, nil
}

// startProgramSteps prepares a plan with program steps, at its start
// (plans from before program steps had none, so they never ask): a
// program can be stopped (SignalStopProgram), and a stopped program
// cancels its running calls, so the plan's calls become cancellable one
// by one (SignalCancelCall, as an agent task's).
func (t *task) startProgramSteps(ctx workflow.Context) {
	if workflow.GetVersion(ctx, changePlanProgram, workflow.DefaultVersion, 1) < 1 {
		return
	}
	if !t.cancelOn {
		t.listenCancels(ctx) // cancel.go
	}
	t.listenProgramStops(ctx) // program.go
}

// runProgramStep runs a program step's request to its end.
func (t *task) runProgramStep(ctx workflow.Context, req api.ProgramRequest) api.ProgramResult {
	invalid := func(why string) api.ProgramResult {
		return api.ProgramResult{ProgramID: req.ProgramID, Outcome: api.ProgramInvalid, Error: why}
	}
	// Whether this worker runs programs is recorded, so that the step's
	// end does not depend on the worker that replays it (one without code
	// mode replaying a program that ran fails its workflow task instead,
	// in execProgram, until a worker with code mode takes it).
	var on bool
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return currentRunner() != nil }).Get(&on); err != nil || !on {
		return invalid("code mode is not enabled on the worker that ran the plan, so the step's program did not run; ask an operator to enable programs on the workers, or write the step as tool steps")
	}
	if pr, _ := t.caller(); req.Principal != pr.Name {
		return invalid(fmt.Sprintf("the step's program was prepared for principal %q, and the plan runs as %q (an airlock bug); run the plan again", req.Principal, pr.Name))
	}
	if err := checkProgramRequest(req); err != nil {
		return invalid(err.Error())
	}
	return t.execProgram(ctx, req)
}

// programStepResult is a program step's end as the plan sees it: ok with
// the program's value (as a tool result whose structuredContent it is,
// for steps.<id>.result), or failed with why.
func programStepResult(stepID string, pr api.ProgramResult) api.CallResult {
	if pr.Outcome == api.ProgramOK {
		value := pr.Result
		if len(value) == 0 {
			value = json.RawMessage("null")
		}
		raw, _ := json.Marshal(map[string]any{
			"content":           []map[string]string{{"type": "text", "text": string(value)}},
			"structuredContent": value,
		})
		return api.CallResult{Outcome: api.OutcomeOK, Result: raw}
	}
	why := fmt.Sprintf("the program of step %s ended %s", stepID, pr.Outcome)
	if pr.Line > 0 {
		why += fmt.Sprintf(" at line %d", pr.Line)
	}
	if pr.Error != "" {
		why += ": " + pr.Error
	}
	if len(pr.RolledBack) > 0 {
		why += fmt.Sprintf(" (atomic: its %d compensable call(s) were rolled back)", len(pr.RolledBack))
	}
	return api.CallResult{Outcome: api.OutcomeFailed, Reason: why}
}

// wholeRollbacks counts the rollbacks of the whole task that undid
// something (an atomic program's rollback of its own calls is not one).
func (t *task) wholeRollbacks() int { return t.rollbacks - t.partialRollbacks }
