package workflows

// The change IDs of every workflow.GetVersion marker in package workflows,
// in the order they entered recorded histories. Each is recorded in histories
// (the Version marker and the TemporalChangeVersion search attribute), so its
// value never changes; a new change to workflow logic adds a new constant
// here. Each comment names the feature the change guards, the file that
// uses it and the first recorded history in testdata that holds it.
// TestChangeIDs (versions_test.go) keeps this list, the GetVersion calls and
// testdata in step.
const (
	// changePolicyDecision versions the policy decision step of the pipeline.
	//
	// Feature and GetVersion in call.go; first recorded in testdata/agent_task_v2_run1.json.
	changePolicyDecision = "policy-decision"

	// changeApprovals versions the approval wait: before it, calls that needed
	// approval were refused.
	//
	// Feature in approval.go, GetVersion in call.go; first recorded in
	// testdata/agent_task_v3_run1.json.
	changeApprovals = "approvals"

	// changeCompensation versions capture, compensation and rollback (its
	// value, "saga", is the older word; histories record it).
	//
	// Feature and GetVersion in compensation.go; first recorded in
	// testdata/saga_v1_run1.json.
	changeCompensation = "saga"

	// changeCallLedger versions the call ledger: a task remembers every call
	// it ran across continue-as-new, not only its recent ones.
	//
	// Feature and GetVersion in agent_task.go; first recorded in testdata/agent_task_v4_run1.json.
	changeCallLedger = "call-ledger"

	// changeHeartbeat versions the calls' heartbeat timeout: each tool's own
	// (ToolSpec.HeartbeatTimeout, from its manifest) instead of heartbeatTimeout
	// for every tool.
	//
	// Feature and GetVersion in call.go; first recorded in testdata/heartbeat_v1_run1.json.
	changeHeartbeat = "heartbeat-timeout"

	// changeFastPath versions the fast path: a call that policy allows outright,
	// to an idempotent, low-risk tool with no capture and no compensation, is
	// decided and run in one local activity (DecideAndCall), inside the
	// workflow task that accepted its Update: one workflow task and six history
	// events per call instead of two and twelve. Taken once per run.
	//
	// Feature in fastpath.go, GetVersion in agent_task.go; first recorded in
	// testdata/agent_task_v5_run1.json.
	changeFastPath = "fast-path"

	// changeCancelCall versions call cancellation (api.SignalCancelCall): runs
	// from before it neither listen for the signal nor give a call its own
	// cancellable context. Decided once per run, at its start.
	//
	// Feature in cancel.go, GetVersion in agent_task.go; first recorded in
	// testdata/cancel_v1_run1.json.
	changeCancelCall = "cancel-call"

	// changeLimits versions rate limits and budgets (issue 16 §3): a task
	// whose input carries a Quota checks each call against it before the
	// call counts. Tasks without a Quota never ask, so their histories are
	// unchanged.
	//
	// Feature and GetVersion in limits.go; first recorded in testdata/limits_v1_run1.json.
	changeLimits = "limits"

	// changeLocks versions resource locks (issue 16 §4): a call whose decision
	// names locks acquires them, all and in sorted order, from their lock
	// workflows (aux_lock.go) before its capture and execution, and
	// releases them when it ends, whatever its outcome.
	//
	// Feature and GetVersion in locks.go; first recorded in testdata/locks_v1_run1.json.
	changeLocks = "locks"

	// changeGrants versions approval grants (issue 17 §3): an approver may
	// approve a call and also the next calls of the same tool in the task, and
	// a later call covered by such a grant is allowed (check "grant") instead
	// of waiting for approval. Runs recorded before it neither take nor use
	// grants.
	//
	// Feature and GetVersion in grants.go; first recorded in testdata/grants_v1_run1.json.
	changeGrants = "grants"

	// changeTaskState versions task-scoped state: calls of the built-in state
	// tools (api.ToolStateGet, ToolStateSet, ToolStateDelete) are served by the
	// workflow itself, and a set or delete pushes a compensation that restores
	// the previous value. Histories from before never hold such a call.
	//
	// Feature in state.go, GetVersion in call.go; first recorded in
	// testdata/state_v1_run1.json.
	changeTaskState = "task-state"

	// changeApproveEdits versions approve with edits (issue 17 §2): an
	// approver may change a call's arguments when approving it; the edited
	// call is judged again and is what runs. Decided once per run, at its
	// start, so the decide validator (which may not record a marker) knows
	// whether this run takes edits: a run from before refuses them rather
	// than run the original call.
	//
	// Feature in edits.go, GetVersion in agent_task.go; first recorded in
	// testdata/edits_v1_run1.json.
	changeApproveEdits = "approve-edits"

	// changeMRTR versions the task's part in sampling and elicitation across
	// processes (api.SignalCallInput): runs from before it neither keep the
	// clients' sealed answers for their calls' activities nor keep calls that
	// may ask the client off the fast path. Decided once per run, at its
	// start.
	//
	// Feature in mrtr.go, GetVersion in agent_task.go; first recorded in
	// testdata/mrtr_v1_run1.json.
	changeMRTR = "mrtr"

	// changeExactNumbers versions exact numbers (issue 25 item 4): a run
	// computes approval digests (approval.go, takeEdit), edited arguments
	// (takeEdit) and grant values (grants.go) from jsoncanon's canonical form,
	// in which 9007199254740993 stays 9007199254740993; runs recorded before
	// it keep the float64 forms they recorded (api.LegacyRequestDigest,
	// api.LegacyGrantArgValue).
	//
	// Feature in edits.go, GetVersion in agent_task.go; first recorded in
	// testdata/numbers_v1_run1.json.
	changeExactNumbers = "exact-numbers"

	// changeFastUncounted keeps counted calls off the fast path (issue 25): a
	// call whose admission depends on what the task has counted (its budget,
	// a rate limit over its tool, the last calls of max_calls or of the
	// ledger, the minutes before its deadline) takes the regular pipeline, so
	// that its charge and its ScheduleActivityTask command are committed in
	// one workflow task completion before the tool runs. The fast path runs
	// the tool inside the workflow task that admits the call; when that task
	// is dropped (an Update aborted, the in-flight limit, a failed or timed-out
	// attempt), the retry starts again from the last committed state and may
	// admit other calls, so a budget could be spent once per attempt while the
	// history recorded refusals for calls that had run. Taken once per run,
	// with the fast path (RATIONALE.md, "Why do counted calls not take the
	// fast path?").
	//
	// Feature in fastpath.go, GetVersion in agent_task.go; first recorded in
	// testdata/fast_uncounted_v1_run1.json.
	changeFastUncounted = "fast-path-uncounted"

	// changeFastHeadroom widens fastHeadroom from 10 to 64 calls (issue 28
	// §1): the embedded server's history.maxInFlightUpdates went from
	// Temporal's default 10 to 64, so that a task takes the gateway's
	// concurrent calls (gateway.task_concurrency) with room for calls
	// waiting for approval, and one workflow task may now admit up to 64
	// new Updates. A run from before it keeps the headroom of 10 it was
	// recorded with. Taken once per run, with changeFastUncounted.
	//
	// Feature in fastpath.go, GetVersion in agent_task.go; first recorded in
	// testdata/fast_headroom_v1_run1.json.
	changeFastHeadroom = "fast-headroom-64"

	// changeDeliveries versions the delivery of approval requests per
	// notifier (issue 25 §10): a notifier that fails while another succeeds
	// (a webhook bridge answering 500 beside a working Slack) is retried on
	// its own, durably, with backoff over minutes until the request closes or
	// expires, and the request says how each delivery stands.
	//
	// Feature and GetVersion in approval.go; first recorded in testdata/approvals_v2_run1.json.
	changeDeliveries = "approval-deliveries"

	// changeEditOutcome versions telling approvers what became of an edit
	// (issue 25 §8): the decide Update answers once policy has judged the
	// edited call (refused, sent to another approval, or allowed), and the
	// closing notice waits for the same, so no channel reports "approved" for
	// an edit that policy refused and that never ran.
	//
	// Feature and GetVersion in edits.go; first recorded in testdata/approvals_v2_run1.json.
	changeEditOutcome = "edit-outcome"

	// changeEditDiff versions the diff an edit records (issue 25 §11): a
	// change under a masked field is named by its path (redact.Changes)
	// instead of showing the whole value as "[redacted]" → "[redacted]".
	//
	// Feature and GetVersion in edits.go; first recorded in testdata/approvals_v2_run1.json.
	changeEditDiff = "edit-diff"

	// changeJudgedRoute runs the route and spec the decision judged (issue
	// 26): the worker's catalog resolves the tool, judges it and returns
	// its route and spec (api.DecideOutput.Route), and the call runs that
	// instead of the gateway's copy in the CallRequest (server, upstream
	// tool, retries, idempotency, timeout), so a reload between the two
	// cannot judge one declaration and run another. Asked only of a
	// decision that carries a route; runs from before it keep the
	// request's.
	//
	// Feature and GetVersion in call.go (judgedRoute, also for the
	// fast path's retries in fastpath.go); first recorded in
	// testdata/judged_route_v1_run1.json.
	changeJudgedRoute = "judged-route"

	// changeRunProgram versions code mode (issue 27): the run_program
	// Update runs a program whose tool calls go through the call pipeline.
	// Runs from before it never received one (the Update had no handler),
	// so its marker, recorded when a run's first program starts, marks
	// the histories that hold programs; a change to how the host drives a
	// program (the commands per call, the replies it hands the program)
	// bumps it.
	//
	// Feature in program.go and program_host.go, GetVersion in program.go;
	// first recorded in testdata/program_v1_run1.json.
	changeRunProgram = "run-program"

	// changePlanProgram versions program steps of plans (issue 27 §6): a
	// step whose PrepareStep returns a ProgramRequest runs it through the
	// run_program host (execProgram) under the plan's task, and a plan
	// with program steps listens for SignalStopProgram and
	// SignalCancelCall. Asked once, at the start of a plan that has a
	// program step; plans from before it had none, so they never ask.
	//
	// Feature and GetVersion in plan_program.go; first recorded in
	// testdata/plan_program_v1_run1.json.
	changePlanProgram = "plan-program"

	// changeProgramArgs refuses a program's call whose arguments are not
	// one JSON object with each key once (a repeated key is read as its
	// first value by some parsers and its last by others, so policy and
	// the upstream could see different calls). The interpreter never
	// sends such arguments; a broken or older one could. Asked only when
	// a call's arguments fail the check, so runs whose calls all pass
	// record no marker and replay as before.
	//
	// Feature and GetVersion in program_host.go; tested by
	// TestProgramCallWithRepeatedKeyIsRefused (no recorded history: the
	// interpreter cannot produce the case).
	changeProgramArgs = "program-args"

	// changeApprovalRecheck judges an approved call again before it runs
	// (issue 29 §4, SEP-2848's "re-evaluate, then execute"): the decide
	// local activity against the policy and catalog in force after the
	// approval; a deny, or approval now required of another group, refuses
	// the call. Asked once per approved, unedited call, after its
	// approval; runs from before it ran approved calls as first judged.
	//
	// Feature and GetVersion in call.go (recheckApproved); first recorded
	// in testdata/approval_recheck_v1_run1.json.
	changeApprovalRecheck = "approval-recheck"

	// changeLabels versions the information-flow labels (issue 30 §2): a
	// task accumulates read_level, untrusted and egress from its calls,
	// passes them to each decision, carries them across continue-as-new
	// and takes the reset_labels update. Asked once per run, at its start;
	// runs from before it keep no labels.
	//
	// Feature and GetVersion in labels.go; first recorded in
	// testdata/labels_v1_run1.json.
	changeLabels = "labels"

	// changeUserGrant versions what a call that acts as its user (token
	// exchange, issue 31 §2) carries beyond the call itself: its
	// compensation entry keeps the call's sealed grant (api.Subject), so
	// the compensation acts as the same user, and an approval request
	// says when the provider holds the grant (ActsHeld). Asked only for
	// calls that carry a Subject; runs from before it compensate such
	// calls without one (they fail closed, UserGrant).
	//
	// GetVersion in compensation.go (pushUndo) and approval.go; first
	// recorded in testdata/user_grant_v1_run1.json.
	changeUserGrant = "user-grant"

	// changeResultApproval versions holding a result for an approver
	// (guard.results: require_approval; issue 30 §1): a call whose
	// CallTool activity returned a held result waits for an approval to
	// deliver it; approved, its result carries the sealed result for the
	// gateway to open; denied or expired, an error naming the findings.
	// Asked only when a result is held, which no earlier history has.
	//
	// Feature and GetVersion in guard.go (call.go runCall); first
	// recorded in testdata/result_approval_v1_run1.json.
	changeResultApproval = "result-approval"

	// changeProgramGuard versions the content guard's inspection of a
	// program's return value and output in the worker (the GuardProgram
	// local activity at the program's end; issue 30 §1): the program's
	// recorded result holds them redacted, with the findings. Programs
	// from before it were inspected at the gateway only, after their
	// result was recorded.
	//
	// Feature and GetVersion in program.go (execProgram) and guard.go;
	// first recorded in testdata/program_guard_v1_run1.json.
	changeProgramGuard = "program-guard"

	// changeGrantGoneNotice tells the approver when an approved call did
	// not run because its user's grant was gone (UserGrant: refresh
	// revoked, user disabled, sign-in ended without a held grant; issue
	// 31 §2): the request's NotRun is set and its messages are updated
	// once more, after the closing update. Asked only when an approved
	// call fails UserGrant; runs from before it leave the messages at
	// "approved".
	//
	// GetVersion in approval.go (tellNotRun); first recorded in
	// testdata/grant_gone_v1_run1.json.
	changeGrantGoneNotice = "grant-gone-notice"
)
