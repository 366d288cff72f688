package gateway

// Approvals as protocol: SEP-2848 (the io.modelcontextprotocol/tool-approval
// extension) and SEP-2643 (structured authorization denials), on top of
// the Tasks extension (mcptasks.go). Both are opt-in: a client declares
// them in its per-request capabilities (SEP-2575's clientCapabilities
// extensions, which a go-sdk client fills from its ClientOptions), and a
// client that declares neither gets exactly today's answers.
//
//   - tool-approval (with tasks): a call waiting for approval is answered
//     with a task handle whose _meta carries the SEP-2643 envelope
//     (remediation "available", a "task" hint), repeated on every
//     tasks/get while it waits; once decided, the task's result carries
//     the disposition (approved-executed, denied-not-executed,
//     execution-error, outcome-unknown), a denial is a completed task with
//     isError and the envelope (remediation "unavailable"), and its body
//     says whether the tool ran.
//   - authorization (SEP-2643): a call that policy denies comes back as
//     today's isError result with the envelope in its _meta: the
//     classification, remediation "unavailable", a retry handle
//     (authorizationContextId) and airlock's hint naming the check.
//
// Everything here reads the call's recorded result (api.CallResult and
// its Decision) from its task: the shapes are derived from what the
// workflow decided, never decided again here.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
)

// Extension identifiers and _meta keys of the drafts (README "Approvals
// as protocol" names the revisions).
const (
	// ExtToolApproval is SEP-2848's extension.
	ExtToolApproval = "io.modelcontextprotocol/tool-approval"
	// ExtAuthorization is the declaration of SEP-2643 structured denials.
	// SEP-2643 is a Standards Track proposal and defines no capability;
	// airlock uses the envelope's own _meta key (RATIONALE.md).
	ExtAuthorization = "io.modelcontextprotocol/authorization"

	// MetaAuthorization carries the SEP-2643 envelope in a result's _meta.
	MetaAuthorization = "io.modelcontextprotocol/authorization"
	// MetaDisposition is SEP-2848's execution outcome of a decided call.
	MetaDisposition = "io.modelcontextprotocol/tool-approval-disposition"
	// MetaModelResponse is the model-facing text of a task handle.
	MetaModelResponse = "io.modelcontextprotocol/model-immediate-response"
	// MetaRelatedTask names the task handle inside a result's _meta (the
	// 2025-11-25 Tasks key), so a client whose SDK reads a handle as a
	// CallToolResult (go-sdk v1.8.0) still finds its taskId.
	MetaRelatedTask = "io.modelcontextprotocol/related-task"
	// MetaAuthorizationContext is where a client echoes
	// authorizationContextId on a retry (SEP-2643 "Retry Echo").
	MetaAuthorizationContext = "io.modelcontextprotocol/authorization-context-id"
)

// Dispositions (SEP-2848 "Execution disposition").
const (
	DispositionExecuted     = "approved-executed"
	DispositionDenied       = "denied-not-executed"
	DispositionExecError    = "execution-error"
	DispositionUnknown      = "outcome-unknown"
	reasonInsufficientAuthz = "insufficient_authorization"
	remediationAvailable    = "available"
	remediationUnavailable  = "unavailable"
	// HintPolicy is airlock's remediation hint type: which check of which
	// policy denied the call (clients ignore hint types they do not know).
	HintPolicy = "airlock.dev/policy"
)

// approvalExts is what a request declared of the two extensions.
type approvalExts struct {
	tasks    bool // io.modelcontextprotocol/tasks
	approval bool // tool-approval (implies tasks)
	authz    bool // structured denials (tool-approval implies it)
}

func (e approvalExts) any() bool { return e.approval || e.authz }

// authzEnvelope is the SEP-2643 denial envelope.
type authzEnvelope struct {
	Reason                 string       `json:"reason"`
	Remediation            string       `json:"remediation,omitempty"`
	AuthorizationContextID string       `json:"authorizationContextId,omitempty"`
	RemediationHints       []remedyHint `json:"remediationHints,omitempty"`
}

// remedyHint is one remediationHints entry: "task" (SEP-2848: wait on the
// task), or HintPolicy.
type remedyHint struct {
	Type          string `json:"type"`
	Check         string `json:"check,omitempty"`
	Rule          string `json:"rule,omitempty"`
	PolicyVersion string `json:"policyVersion,omitempty"`
}

// declaredApprovalExts reads a request's declarations. A declaration of
// either extension whose settings are not a JSON object, or tool-approval
// without tasks (it builds on tasks), is refused: the call does not run.
func declaredApprovalExts(meta mcp.Meta) (approvalExts, *jsonrpc.Error) {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	raw, err := json.Marshal(meta[metaClientCapabilities])
	if err != nil || json.Unmarshal(raw, &caps) != nil {
		return approvalExts{}, nil // not ours to judge: no declaration read
	}
	_, tasks := caps.Extensions[ExtTasks]
	e := approvalExts{tasks: tasks}
	for _, name := range []string{ExtToolApproval, ExtAuthorization} {
		v, ok := caps.Extensions[name]
		if !ok {
			continue
		}
		var settings map[string]json.RawMessage
		if json.Unmarshal(v, &settings) != nil || settings == nil {
			return approvalExts{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
				"params._meta[%q].extensions[%q] is %s: an extension's settings are a JSON object; declare it as {} or leave it out",
				metaClientCapabilities, name, clip(string(v), 64))}
		}
		if name == ExtToolApproval {
			e.approval = true
		} else {
			e.authz = true
		}
	}
	if e.approval && !e.tasks {
		return approvalExts{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"params._meta[%q].extensions declares %q without %q: tool approval answers with a task handle, so declare both (or neither)",
			metaClientCapabilities, ExtToolApproval, ExtTasks)}
	}
	e.authz = e.authz || e.approval
	return e, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// authorizationDenial reports whether a denied call was refused on
// authorization grounds (who may call what, the approval it needed), as
// opposed to its input (size, JSON, schema, path), a pin or an error,
// which are not SEP-2643 denials.
func authorizationDenial(res api.CallResult) bool {
	if res.Outcome != api.OutcomeDenied || res.Decision == nil {
		return false
	}
	d := res.Decision
	return d.Effect == api.RequireApproval || slices.Contains([]string{
		api.CheckAllowlist, api.CheckPermission, api.CheckDataLevel, api.CheckRule, api.CheckDefault}, d.Check)
}

// approvalCall reports whether a call went through an approval request:
// its recorded decision required one (a grant's decision does not).
func approvalCall(res api.CallResult) bool {
	return res.Decision != nil && res.Decision.Effect == api.RequireApproval
}

// disposition is SEP-2848's outcome of a decided approval call: "" for a
// cancelled call (its task status says it) and for one that failed before
// it ran (limit, unavailable, rejected, failed: a failed task, which the
// draft leaves without a disposition).
func disposition(o api.Outcome) string {
	switch o {
	case api.OutcomeOK:
		return DispositionExecuted
	case api.OutcomeToolError:
		return DispositionExecError
	case api.OutcomeUnknown:
		return DispositionUnknown
	case api.OutcomeDenied: // denied by an approver, expired, or refused by policy
		return DispositionDenied
	}
	return ""
}

// dispositionText states in the body whether the tool ran (the draft
// requires it beside the _meta, for a model that reads only the body).
func dispositionText(tool, disp string) string {
	switch disp {
	case DispositionDenied:
		return fmt.Sprintf("%s did not run (%s): no side effect occurred.", tool, disp)
	case DispositionExecError:
		return fmt.Sprintf("%s ran after approval and reported an error (%s): a side effect may have occurred.", tool, disp)
	case DispositionUnknown:
		return fmt.Sprintf("%s may have run after approval; its outcome is unknown (%s). Do not retry it automatically.", tool, disp)
	}
	return ""
}

// denialEnvelope is the envelope of a call policy denied (remediation
// unavailable: airlock does not invite the same call again). The retry
// handle is the call's request ID; it is a correlation handle only.
func denialEnvelope(task string, res api.CallResult, withContext bool) authzEnvelope {
	env := authzEnvelope{Reason: reasonInsufficientAuthz, Remediation: remediationUnavailable}
	if withContext {
		env.AuthorizationContextID = api.RequestID(task, res.CallID)
	}
	if d := res.Decision; d != nil && d.Effect != api.RequireApproval {
		env.RemediationHints = []remedyHint{{Type: HintPolicy, Check: d.Check, Rule: d.Rule, PolicyVersion: d.PolicyVersion}}
	}
	return env
}

// pendingEnvelope is the envelope of a call waiting for approval.
func pendingEnvelope() authzEnvelope {
	return authzEnvelope{Reason: reasonInsufficientAuthz, Remediation: remediationAvailable,
		RemediationHints: []remedyHint{{Type: "task"}}}
}

// decorateFinished adds what the declared extensions say to the result r
// of a finished call res of task: the disposition, the body line and the
// envelope (tool-approval, for an approval call), or the envelope alone
// (structured denials, for an authorization denial). It is called only
// for a client that declared one of them.
func decorateFinished(r *mcp.CallToolResult, task string, res api.CallResult, e approvalExts) {
	if r.Meta == nil {
		r.Meta = mcp.Meta{}
	}
	if e.approval && approvalCall(res) {
		disp := disposition(res.Outcome)
		if disp == "" {
			return
		}
		r.Meta[MetaDisposition] = disp
		if txt := dispositionText(res.Tool, disp); txt != "" {
			r.Content = append(r.Content, &mcp.TextContent{Text: txt})
			r.IsError = true
		}
		if disp == DispositionDenied {
			r.Meta[MetaAuthorization] = denialEnvelope(task, res, false)
		}
		return
	}
	if e.authz && authorizationDenial(res) {
		r.Meta[MetaAuthorization] = denialEnvelope(task, res, true)
	}
}

// approvalStatus is the task status of a finished call for a client that
// declared tool-approval: a decided approval call that did not fail
// before running is completed (a denial is a completed task with
// isError, SEP-2848's table), the rest as terminalStatus says.
func approvalStatus(res api.CallResult, e approvalExts) string {
	if e.approval && approvalCall(res) && disposition(res.Outcome) != "" {
		return "completed"
	}
	return terminalStatus(res.Outcome)
}

// decorateDenied adds the SEP-2643 envelope to a call's isError result
// when its task recorded it as an authorization denial; anything else is
// left as it is.
func (g *Gateway) decorateDenied(ctx context.Context, r *mcp.CallToolResult, e approvalExts) {
	task, _ := r.Meta[MetaTask].(string)
	call, _ := r.Meta[MetaCall].(string)
	if !e.authz || !r.IsError || task == "" || call == "" {
		return
	}
	res, ok := g.finishedCall(ctx, task, call, TaskHandleWait)
	if !ok || !authorizationDenial(res) {
		return
	}
	r.Meta[MetaAuthorization] = denialEnvelope(task, res, true)
}
