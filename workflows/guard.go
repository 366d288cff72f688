package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// holdResult waits for an approver to approve delivering a result the
// content guard holds (guard.results: require_approval; issue 30 §1;
// changeResultApproval). The call has run: the request says so, and
// names the findings (kind and path, never a value). Its ID is the call's
// with "/result" (api.ResultApprovalCallID), so it never meets the call's
// own approval. Approved, res carries the sealed result (CallResult.Held)
// for the gateway to open and deliver; denied, expired or withdrawn, the
// model gets an error result naming the findings and why, not the result.
// res.Result stays the redacted copy in either case, which is all the
// history holds in clear.
//
// asked is the approval the call itself needed (nil: none): the argument
// paths it masked (its findings under guard.arguments: require_approval)
// stay masked for the result's approver.
func (t *task) holdResult(ctx workflow.Context, req api.CallRequest, res api.CallResult, findings []api.Finding, held *api.HeldResult, asked *api.ApprovalSpec) api.CallResult {
	areq := req
	areq.CallID = api.ResultApprovalCallID(req.CallID)
	spec := &api.ApprovalSpec{OnTimeout: "deny", NoEdits: true}
	if held.Approval != nil {
		c := *held.Approval
		spec = &c
	}
	if asked != nil {
		spec.Redact = append(slices.Clip(spec.Redact), asked.Redact...)
	}
	d := api.Decision{Effect: api.RequireApproval, Check: api.CheckGuard, Reason: held.Reason,
		PolicyVersion: held.PolicyVersion, Group: held.Group, Quorum: held.Quorum}
	ok, why := t.awaitApproval(ctx, areq, d, spec)
	if ok {
		res.Held = &held.SealedResult
		return res
	}
	var where []string
	seen := map[string]bool{}
	for _, f := range findings {
		if w := f.Rule + " at " + f.Path; f.Action == "require_approval" && !seen[w] {
			seen[w] = true
			where = append(where, w)
		}
	}
	text := fmt.Sprintf("airlock withheld the result of %s: it holds %s (guard.results: require_approval), and delivering it was not approved: %s. The call ran (its effects stand); its result is not shown. Ask for the data without these values, or ask an approver again by calling the tool again.",
		req.Tool, strings.Join(where, ", "), why)
	b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}, "isError": true})
	res.Outcome, res.Result = api.OutcomeToolError, b
	return res
}

// guardProgram inspects a program's return value and output by the
// content guard before its outcome is recorded (changeProgramGuard): the
// GuardProgram local activity, whose answer (a marker) replays. The
// result keeps the redacted value and the findings; a blocked one keeps
// neither value nor output. A guard that cannot answer withholds the
// result (fail closed).
func (t *task) guardProgram(ctx workflow.Context, res api.ProgramResult) api.ProgramResult {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	caller, _ := t.caller()
	in := api.GuardProgramInput{TaskID: t.in.TaskID, ProgramID: res.ProgramID, Result: res.Result, Output: res.Output, Roles: caller.Roles}
	var out api.GuardProgramOutput
	if err := workflow.ExecuteLocalActivity(lctx, api.GuardProgramName, in).Get(ctx, &out); err != nil {
		out = api.GuardProgramOutput{Withheld: fmt.Sprintf("airlock could not inspect the program's result (%v); nothing of it is shown", err)}
	}
	res.Result, res.Output, res.Findings, res.Withheld, res.Guarded = out.Result, out.Output, out.Findings, out.Withheld, true
	return res
}
