package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
)

// talksToDev says where the one-shot commands find Temporal.
const talksToDev = `Talks to the Temporal of a running "airlock dev" (127.0.0.1:7233) unless
--temporal-address or TEMPORAL_ADDRESS says otherwise.`

func tasksCommand() *Command {
	return &Command{Name: "tasks", Short: "inspect, undo, stop agent tasks and plans",
		Long: "Agent tasks and plans alike.\n\n" + talksToDev,
		Sub: []*Command{
			{Name: "list", Usage: "[--status running|completed|...] [--state STATE] [--principal NAME]\n [--tool TOOL] [--pending-approval] [--limit N]",
				Short: "the newest tasks, with their state", Long: tasksListLong, Flags: bind(tasksFlags, tasksList)},
			{Name: "show", Usage: "[--json] TASK_ID", Short: "one task: calls, plan steps, running programs, pending compensations",
				Long: "Shows one task: its calls, plan steps, running programs (code mode) and pending compensations.\n\n" + talksToDev, Flags: bind(tasksFlags, tasksShow)},
			{Name: "rollback", Usage: "[--reason TEXT] [--queue] TASK_ID", Short: "undo the task's changes (compensations, newest first, each once)",
				Long: tasksRollbackLong, Flags: bind(tasksFlags, tasksRollback)},
			{Name: "withdraw", Usage: "[--reason TEXT] TASK~CALL", Short: "withdraw a pending approval request (the call does not run)",
				Long: tasksWithdrawLong, Flags: bind(tasksFlags, tasksWithdraw)},
			{Name: "cancel", Usage: "TASK_ID", Short: "cancel the task: it rolls back, then ends",
				Long: "Cancels the task: it rolls back, then ends.\n\n" + talksToDev, Flags: bind(tasksFlags, tasksCancel)},
			{Name: "finish", Usage: "TASK_ID", Short: "end the task once its running calls are done, without rolling back",
				Long: tasksFinishLong, Flags: bind(tasksFlags, tasksFinish)},
			{Name: "reset-labels", Usage: "--reason TEXT [--audit-log DEST] TASK_ID", Short: "reset the task's information-flow labels (audited)",
				Long: tasksResetLabelsLong, Flags: bind(tasksFlags, tasksResetLabels)},
			{Name: "stop-program", Usage: "[--reason TEXT] TASK_ID PROGRAM_ID", Short: "stop a running program (code mode) at its next tool call",
				Long: tasksStopProgramLong, Flags: bind(tasksFlags, tasksStopProgram)},
		}}
}

const tasksListLong = `Lists the newest tasks, agent tasks and plans alike, with their state. The
filters combine (AND): --status the Temporal execution status, --state
airlock's own (running, finished, rolled_back, rollback_failed, ...),
--principal who started it, --tool a tool it called (exposed name, e.g.
filesystem__write_file), --pending-approval waiting for an approval now.

` + talksToDev

const tasksRollbackLong = `Undoes the task's changes (compensations, newest first, each once); waits for
it and prints what was undone and what was not. Also retries a rollback that
failed, and undoes a task that has ended (a completed plan), once, as
workflow rollback-TASK_ID.

A rollback starts once the task's running calls are done, and a call waiting
for approval is not done until it is decided, withdrawn or expires. So while
the task has a pending approval request, rollback refuses at once and lists
them: deny them (airlock approvals deny TASK~CALL), withdraw them (airlock
tasks withdraw TASK~CALL), or pass --queue to leave the rollback queued (it
returns at once and the rollback runs when the last of them is closed).

` + talksToDev

const tasksWithdrawLong = `Withdraws the pending approval request TASK~CALL (airlock approvals list
shows them): nobody may decide on it any more, the call ends as cancelled
without running, and the agent is told so. Only a pending request can be
withdrawn; to stop the whole task, use airlock tasks cancel.

` + talksToDev

const tasksFinishLong = `Ends the task once its running calls are done, without rolling back (also
how an operator closes a task whose rollback failed, after fixing what
remained by hand).

` + talksToDev

// taskKinds is the visibility query for every kind of task.
var taskKinds = "(WorkflowType = '" + api.AgentTaskName + "' OR WorkflowType = '" + api.PlanName +
	"' OR WorkflowType = '" + api.RollbackTaskName + "')"

// tasksOptions are the flags of every tasks subcommand.
type tasksOptions struct {
	conn            temporalFlags
	status, state   string
	principal, tool string
	pendingApproval bool
	limit           int
	asJSON          bool
	reason          string
	wait            time.Duration
	queue           bool
	auditLog        string
}

func tasksFlags(fs *flag.FlagSet, o *tasksOptions) {
	o.conn.register(fs)
	fs.StringVar(&o.status, "status", "", "list only tasks in this execution `status` (running, completed, failed, canceled, terminated, timedout)")
	fs.StringVar(&o.state, "state", "", "list only tasks in this airlock `state` ("+strings.Join(taskStates, ", ")+")")
	fs.StringVar(&o.principal, "principal", "", "list only tasks of this `principal`")
	fs.StringVar(&o.tool, "tool", "", "list only tasks that called this `tool` (exposed name, server__tool)")
	fs.BoolVar(&o.pendingApproval, "pending-approval", false, "list only tasks waiting for an approval")
	fs.IntVar(&o.limit, "limit", 50, "list at most `N` tasks")
	fs.BoolVar(&o.asJSON, "json", false, "print JSON")
	fs.StringVar(&o.reason, "reason", "", "why (rollback, reset-labels; kept in the task's record)")
	fs.DurationVar(&o.wait, "wait", 10*time.Minute, "how long rollback waits for the compensations to run")
	fs.StringVar(&o.auditLog, "audit-log", "", "reset-labels: where the reset is audited: stdout, stderr, off or a `file` (default: the running airlock dev's)")
	fs.BoolVar(&o.queue, "queue", false, "rollback: when calls wait for approval, leave the rollback queued behind them and return at once")
}

// withTemporal dials and runs f, the whole bounded by the longest a
// subcommand may take (rollback's --wait, and some).
func (o *tasksOptions) withTemporal(c *Call, f func(ctx context.Context, tc client.Client) int) int {
	return o.conn.run(c, 30*time.Second+o.wait, f)
}

// taskID is the one TASK_ID argument, checked before dialing so a typo is
// not reported as a connection problem.
func taskID(c *Call) (string, int) {
	if len(c.Args) != 1 {
		return "", c.usage("name one TASK_ID (airlock tasks list shows them)")
	}
	return c.Args[0], 0
}

func tasksList(c *Call, o *tasksOptions) int {
	if len(c.Args) > 0 {
		return c.usage("unexpected argument %q (to see one task: airlock tasks show TASK_ID)", c.Args[0])
	}
	q, code := o.listQuery(c)
	if q == "" {
		return code
	}
	return o.withTemporal(c, func(ctx context.Context, tc client.Client) int {
		return listTasks(ctx, c, tc, o.conn.namespace, q, o.limit)
	})
}

// listQuery is the visibility query of the filters ("" after reporting a
// bad one).
func (o *tasksOptions) listQuery(c *Call) (string, int) {
	if o.limit < 1 {
		return "", c.usage("--limit %d: must be at least 1", o.limit)
	}
	q := taskKinds
	if o.status != "" {
		names := map[string]string{"running": "Running", "completed": "Completed", "failed": "Failed", "canceled": "Canceled",
			"terminated": "Terminated", "timedout": "TimedOut", "continuedasnew": "ContinuedAsNew"}
		v, ok := names[strings.ToLower(o.status)]
		if !ok {
			return "", c.usage("--status %q: use running, completed, failed, canceled, terminated or timedout", o.status)
		}
		q += " AND ExecutionStatus = '" + v + "'"
	}
	if o.state != "" && !slices.Contains(taskStates, o.state) {
		return "", c.usage("--state %q: use one of %s", o.state, strings.Join(taskStates, ", "))
	}
	for _, f := range []struct {
		flag, value string
		attr        string
	}{
		{"state", o.state, api.SAStatus.GetName()},
		{"principal", o.principal, api.SAPrincipal.GetName()},
		{"tool", o.tool, api.SATools.GetName()}, // a keyword list: = means "contains"
	} {
		if f.value == "" {
			continue
		}
		lit, err := queryLiteral(f.value)
		if err != nil {
			return "", c.usage("--%s %q: %v", f.flag, f.value, err)
		}
		q += " AND " + f.attr + " = " + lit
	}
	if o.pendingApproval {
		q += " AND " + api.SAApproval.GetName() + " = '" + api.ApprovalPending + "'"
	}
	return q, 0
}

func tasksShow(c *Call, o *tasksOptions) int {
	id, code := taskID(c)
	if code != 0 {
		return code
	}
	return o.withTemporal(c, func(ctx context.Context, tc client.Client) int {
		return showTask(ctx, c, tc, id, o.asJSON)
	})
}

func tasksRollback(c *Call, o *tasksOptions) int {
	id, code := taskID(c)
	if code != 0 {
		return code
	}
	return o.withTemporal(c, func(ctx context.Context, tc client.Client) int {
		req := api.RollbackRequest{By: "operator", Reason: o.reason}
		// A rollback waits for the running calls, and a call waiting for
		// approval runs until people act: say so now rather than wait.
		if pending := pendingApprovals(ctx, tc, id); len(pending) > 0 {
			if !o.queue {
				return c.failOn(id, errors.New(describePending(id, pending, time.Now())))
			}
			return queueRollback(ctx, c, tc, id, req, pending)
		}
		rctx, rcancel := context.WithTimeout(ctx, o.wait)
		defer rcancel()
		res, err := rollbackTask(rctx, tc, id, req, o.conn.taskQueue)
		if err != nil {
			if rctx.Err() != nil {
				// A call that began to wait for approval after the check
				// above holds the rollback: say which.
				if pending := pendingApprovals(ctx, tc, id); len(pending) > 0 {
					return c.failOn(id, fmt.Errorf("still waiting after %s, and it goes on without you: %s", o.wait, describePending(id, pending, time.Now())))
				}
				return c.failOn(id, fmt.Errorf("still running after %s; it goes on without you (airlock tasks show %s)", o.wait, id))
			}
			return c.failOn(id, err)
		}
		if o.asJSON {
			printJSON(c.Stdout, res)
		} else {
			fmt.Fprintln(c.Stdout, gateway.DescribeRollback(res))
		}
		if res.State == api.StateRollbackFailed {
			return 1
		}
		return 0
	})
}

// pendingApprovals are the task's approval requests still pending; none
// when the task cannot be asked (it has ended, or it is a plan).
func pendingApprovals(ctx context.Context, tc client.Client, id string) []api.ApprovalRequest {
	v, err := tc.QueryWorkflow(ctx, id, "", api.QueryApprovals)
	var reqs []api.ApprovalRequest
	if err != nil || v.Get(&reqs) != nil {
		return nil
	}
	return slices.DeleteFunc(reqs, func(r api.ApprovalRequest) bool { return r.State != api.ApprovalPending })
}

// describePending says what a rollback of task id would wait for, and how
// to end the wait.
func describePending(id string, pending []api.ApprovalRequest, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "not rolled back: a rollback starts once the task's calls are done, and %d call(s) wait for approval:\n", len(pending))
	for _, r := range pending {
		fmt.Fprintf(&b, "  %s  %s  asked by %s, group %s (%d of %d approvals), expires %s (in %s)\n",
			r.ID, r.Tool, r.Principal, r.Group, approvedVotes(r), r.Quorum, r.ExpiresAt.UTC().Format(time.RFC3339), r.ExpiresAt.Sub(now).Round(time.Second))
	}
	fmt.Fprintf(&b, "close each first: airlock approvals deny %s (as an approver of its group), or airlock tasks withdraw %s (nothing runs);\n", pending[0].ID, pending[0].ID)
	fmt.Fprintf(&b, "or queue the rollback behind them: airlock tasks rollback --queue %s", id)
	return b.String()
}

func approvedVotes(r api.ApprovalRequest) int {
	n := 0
	for _, v := range r.Votes {
		if v.Approve {
			n++
		}
	}
	return n
}

// queueRollback sends the rollback and returns once the task has accepted
// it: it runs when the pending calls are closed.
func queueRollback(ctx context.Context, c *Call, tc client.Client, id string, req api.RollbackRequest, pending []api.ApprovalRequest) int {
	_, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: api.UpdateRollback,
		Args: []any{req}, WaitForStage: client.WorkflowUpdateStageAccepted})
	if err != nil {
		return c.failOn(id, err)
	}
	ids := make([]string, len(pending))
	for i, r := range pending {
		ids[i] = r.ID
	}
	fmt.Fprintf(c.Stdout, "rollback queued: task %s rolls back once %s %s decided, withdrawn or expired; new calls are refused until it is done (airlock tasks show %s)\n",
		id, strings.Join(ids, ", "), map[bool]string{true: "is", false: "are"}[len(ids) == 1], id)
	return 0
}

// tasksWithdraw withdraws a pending approval request (api.SignalCancelCall,
// as a client's cancellation does).
func tasksWithdraw(c *Call, o *tasksOptions) int {
	if len(c.Args) != 1 {
		return c.usage("name one approval request TASK~CALL (airlock approvals list shows them)")
	}
	rid := c.Args[0]
	task, err := approver.TaskOf(rid)
	if err != nil {
		return c.usage("%v", err)
	}
	if len(o.reason) > api.MaxReasonBytes {
		return c.usage("--reason is %d bytes; keep it under %d", len(o.reason), api.MaxReasonBytes)
	}
	return o.withTemporal(c, func(ctx context.Context, tc client.Client) int {
		var req *api.ApprovalRequest
		for _, r := range pendingApprovals(ctx, tc, task) {
			if r.ID == rid {
				req = &r
			}
		}
		if req == nil {
			return c.failOn(rid, fmt.Errorf("no pending approval request of that ID (it was decided, withdrawn or expired, or the task has ended); airlock approvals show %s says what became of it", rid))
		}
		why := "withdrawn by an operator (airlock tasks withdraw)"
		if o.reason != "" {
			why += ": " + o.reason
		}
		if err := tc.SignalWorkflow(ctx, task, "", api.SignalCancelCall, api.CancelCall{CallID: req.CallID, Reason: why}); err != nil {
			return c.failOn(rid, err)
		}
		fmt.Fprintf(c.Stdout, "%s: withdrawn; the call %s (%s) ends cancelled and does not run\n", rid, req.CallID, req.Tool)
		return 0
	})
}

func tasksCancel(c *Call, o *tasksOptions) int {
	id, code := taskID(c)
	if code != 0 {
		return code
	}
	return o.withTemporal(c, func(ctx context.Context, tc client.Client) int {
		if err := tc.CancelWorkflow(ctx, id, ""); err != nil {
			return c.failOn(id, err)
		}
		fmt.Fprintf(c.Stdout, "cancel requested: task %s rolls back what it changed, then ends (airlock tasks show %s)\n", id, id)
		return 0
	})
}

const tasksStopProgramLong = `Stops a running program (code mode) of a task: the call it waits for (an
approval, a slow tool) is cancelled, or the next call it starts is refused,
and the program ends with outcome "stopped" and the reason. Its finished
calls stay done (airlock tasks rollback undoes them). A program computing
between two calls stops at its next call; its step limit bounds how long
that takes. airlock tasks show TASK_ID lists the running programs.

` + talksToDev

// tasksStopProgram stops a running program (api.SignalStopProgram).
func tasksStopProgram(c *Call, o *tasksOptions) int {
	if len(c.Args) != 2 {
		return c.usage("name a TASK_ID and one of its running programs' PROGRAM_ID (airlock tasks show TASK_ID lists them)")
	}
	id, prog := c.Args[0], c.Args[1]
	if len(o.reason) > api.MaxReasonBytes {
		return c.usage("--reason is %d bytes; keep it under %d", len(o.reason), api.MaxReasonBytes)
	}
	return o.withTemporal(c, func(ctx context.Context, tc client.Client) int {
		st, err := queryStatus(ctx, tc, id)
		if err != nil {
			return c.failOn(id, explainFetch(err, id, o.conn.namespace))
		}
		running := false
		for _, p := range st.Programs {
			running = running || p.ProgramID == prog
		}
		if !running {
			return c.failOn(id, fmt.Errorf("no running program %q in this task (it finished, or never ran here); airlock tasks show %s lists the running ones", prog, id))
		}
		why := "stopped by an operator (airlock tasks stop-program)"
		if o.reason != "" {
			why += ": " + o.reason
		}
		if err := tc.SignalWorkflow(ctx, id, "", api.SignalStopProgram, api.StopProgram{ProgramID: prog, By: "operator", Reason: why}); err != nil {
			return c.failOn(id, err)
		}
		fmt.Fprintf(c.Stdout, "stop requested: program %s of task %s ends \"stopped\" at its next tool call\n", prog, id)
		return 0
	})
}

func tasksFinish(c *Call, o *tasksOptions) int {
	id, code := taskID(c)
	if code != 0 {
		return code
	}
	return o.withTemporal(c, func(ctx context.Context, tc client.Client) int {
		if err := tc.SignalWorkflow(ctx, id, "", api.SignalFinish, nil); err != nil {
			return c.failOn(id, err)
		}
		fmt.Fprintf(c.Stdout, "finish requested: task %s ends once its running calls are done\n", id)
		return 0
	})
}

// taskStates are the values of AirlockStatus (agent tasks and plans).
var taskStates = []string{api.StateRunning, api.StateFinished, api.StateCompleted, api.StateStopped,
	api.StateRolledBack, api.StateRollbackFailed, api.StateCanceled, api.StateDeadline, api.StateIdle}

// queryLiteral quotes a filter value for a visibility query. Values with
// quotes, backslashes or control characters are refused rather than
// escaped: no principal, tool or state name has them, and refusing leaves
// no way to reshape the query.
func queryLiteral(v string) (string, error) {
	if i := strings.IndexFunc(v, func(r rune) bool { return r == '\'' || r == '"' || r == '\\' || r == '`' || unicode.IsControl(r) }); i >= 0 {
		r, _ := utf8.DecodeRuneInString(v[i:])
		return "", fmt.Errorf("the value may not contain %q (quotes, backslashes and control characters are refused in filters)", r)
	}
	return "'" + v + "'", nil
}

// rollbackTask rolls a task back: a running one by its rollback Update; an
// ended one (whose workflow can run nothing more) by a RollbackTask
// workflow seeded with the compensations it left, one per task, so an
// ended task is rolled back at most once.
func rollbackTask(ctx context.Context, c client.Client, id string, req api.RollbackRequest, taskQueue string) (api.RollbackResult, error) {
	var res api.RollbackResult
	uo := client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: api.UpdateRollback,
		Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted}
	h, err := c.UpdateWorkflow(ctx, uo)
	if err == nil {
		if err = h.Get(ctx, &res); err == nil {
			return res, nil
		}
		// Refused: because the task has ended (and its workflow has yet
		// to close), or for a reason that is the answer.
		var refused *temporal.ApplicationError
		if !errors.As(err, &refused) {
			return res, err
		}
		if st, qerr := queryStatus(ctx, c, id); qerr == nil && st.Ended {
			return rollbackEnded(ctx, c, id, st, uo, taskQueue)
		}
		return res, err
	}
	if !isCompleted(err) {
		return res, err
	}
	// The workflow has closed: what did it leave undone?
	st, qerr := queryStatus(ctx, c, id)
	if qerr != nil {
		return res, fmt.Errorf("the task has ended and its state cannot be read: %w", qerr)
	}
	return rollbackEnded(ctx, c, id, st, uo, taskQueue)
}

// rollbackEnded undoes what an ended task left, by the RollbackTask
// workflow of that task.
func rollbackEnded(ctx context.Context, c client.Client, id string, st api.Status, uo client.UpdateWorkflowOptions, taskQueue string) (api.RollbackResult, error) {
	var res api.RollbackResult
	if len(st.Compensations) == 0 {
		return api.RollbackResult{TaskID: id, State: api.RollbackNothing,
			Reason: "the task has ended (" + st.State + ") and left no pending compensation"}, nil
	}
	rid := api.RollbackTaskID(id)
	start := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: rid, TaskQueue: taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, api.RollbackTaskName, api.RollbackTaskInput{TaskID: id, Principal: st.Principal, Compensations: st.Compensations})
	uo.WorkflowID = rid
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: start, UpdateOptions: uo})
	if err == nil {
		err = h.Get(ctx, &res)
	}
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) || isCompleted(err) {
		return res, fmt.Errorf("task %s has ended and was already rolled back by %s (airlock tasks show %s)", id, rid, rid)
	}
	return res, err
}

// isCompleted reports an error saying the workflow is no longer running
// (the server's "workflow execution already completed" is a NotFound).
func isCompleted(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

func listTasks(ctx context.Context, c *Call, tc client.Client, ns, q string, limit int) int {
	resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns, Query: q, PageSize: int32(limit)})
	if err != nil {
		return c.fail(err)
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKIND\tSTATUS\tSTATE\tPRINCIPAL\tSTARTED\tTOOLS\tSCHEDULE")
	for _, ex := range resp.GetExecutions() {
		sa := ex.GetSearchAttributes().GetIndexedFields()
		principal, state, tools := "", "", ""
		if p, ok := sa[api.SAPrincipal.GetName()]; ok {
			_ = json.Unmarshal(p.GetData(), &principal)
		}
		if p, ok := sa[api.SAStatus.GetName()]; ok {
			_ = json.Unmarshal(p.GetData(), &state)
		}
		if p, ok := sa[api.SATools.GetName()]; ok {
			var ts []string
			_ = json.Unmarshal(p.GetData(), &ts)
			tools = strings.Join(ts, ",")
		}
		// Temporal marks the runs a schedule starts with its ID.
		schedule := "-"
		if p, ok := sa["TemporalScheduledById"]; ok {
			_ = json.Unmarshal(p.GetData(), &schedule)
		}
		kind := map[string]string{api.PlanName: "plan", api.RollbackTaskName: "rollback"}[ex.GetType().GetName()]
		if kind == "" {
			kind = "agent"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ex.GetExecution().GetWorkflowId(), kind,
			strings.ToLower(strings.TrimPrefix(ex.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")),
			state, principal, ex.GetStartTime().AsTime().Local().Format(time.DateTime), tools, schedule)
	}
	_ = tw.Flush()
	return 0
}

func showTask(ctx context.Context, c *Call, tc client.Client, id string, asJSON bool) int {
	st, err := queryStatus(ctx, tc, id)
	if err != nil {
		return c.failOn(id, err)
	}
	stdout := c.Stdout
	if asJSON {
		printJSON(stdout, st)
		return 0
	}
	fmt.Fprintf(stdout, "task:      %s\nprincipal: %s\nstate:     %s\nstarted:   %s\ncalls:     %d (limit %d)\nin flight: %s\ntools:     %s\n",
		st.TaskID, st.Principal, st.State, st.StartedAt.Local().Format(time.DateTime), st.Calls, st.MaxCalls,
		strings.Join(st.InFlight, ", "), strings.Join(st.ToolsUsed, ", "))
	if st.Labels != nil { // information-flow labels (labels.go)
		fmt.Fprintf(stdout, "labels:    %s\n", st.Labels.String())
		if r := st.Labels.LastReset; r != nil {
			fmt.Fprintf(stdout, "           reset %d time(s); last by %s at %s (%q), clearing: %s\n", st.Labels.Resets, r.By, r.At.Local().Format(time.DateTime), r.Reason, r.Before.String())
		}
	}
	if st.Budget > 0 { // rate limits and budgets (issue 16 §3)
		fmt.Fprintf(stdout, "budget:    %d of %d cost units spent\n", st.Spent, st.Budget)
	}
	if st.Plan != nil {
		fmt.Fprintf(stdout, "plan:      %s\n", st.Plan.Name)
		for _, s := range st.Plan.Steps {
			fmt.Fprintf(stdout, "  %-9s %-20s %-28s %s\n", s.State, s.ID, stepWhat(s), s.Reason) // run.go
		}
	}
	printLocks(stdout, st.Locks)       // locks.go
	printPrograms(stdout, st.Programs) // code mode
	if st.TaskState != nil {           // task-scoped state (airlock_state_*)
		fmt.Fprintf(stdout, "state doc: %s\n", describeState(st.TaskState))
	}
	if len(st.Recent) > 0 {
		fmt.Fprintln(stdout, "recent calls:")
		for _, r := range st.Recent {
			fmt.Fprintf(stdout, "  %s  %-28s %-12s %s\n", r.Started.Local().Format(time.TimeOnly), r.Tool, r.Outcome, r.Reason)
			if e := r.Edit; e != nil { // approve with edits: what ran is not what the agent sent
				fmt.Fprintf(stdout, "            arguments edited by %s via %s (digest %s → %s)\n", e.By, e.Via, shortDigest(e.OriginalDigest), shortDigest(e.Digest))
			}
		}
	}
	if len(st.Compensations) > 0 {
		if st.Ended {
			fmt.Fprintf(stdout, "not rolled back (the task has ended; undo it once with airlock tasks rollback %s):\n", st.TaskID)
		} else {
			fmt.Fprintf(stdout, "can be undone, newest first (airlock tasks rollback %s):\n", st.TaskID)
		}
		for i := len(st.Compensations) - 1; i >= 0; i-- {
			e := st.Compensations[i]
			undo := "cannot: " + e.Error
			if e.Compensation != nil {
				undo = "by " + e.Compensation.Tool
			}
			fmt.Fprintf(stdout, "  %-24s %-28s %-8s %s %s\n", e.CallID, e.Tool, e.State, undo, e.Reason)
		}
	}
	if len(st.Undone) > 0 {
		fmt.Fprintln(stdout, "undone:")
		for _, e := range st.Undone {
			fmt.Fprintf(stdout, "  %-24s %-28s by %s\n", e.CallID, e.Tool, e.Compensation.Tool)
		}
	}
	writeGrants(stdout, st.Grants, time.Now())
	writePrincipalGrants(ctx, stdout, tc, st.Principal)
	return 0
}

// shortDigest is the first 12 hex digits of a digest, as airlock prints
// them everywhere else.
func shortDigest(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

func queryStatus(ctx context.Context, c client.Client, id string) (api.Status, error) {
	var st api.Status
	v, err := c.QueryWorkflow(ctx, id, "", api.QueryStatus)
	if err != nil {
		return st, err
	}
	if err := v.Get(&st); err != nil {
		return st, fmt.Errorf("decoding status: %w", err)
	}
	return st, nil
}

// describeState summarises a task's state document: its size and keys.
func describeState(doc json.RawMessage) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		return fmt.Sprintf("%d bytes (unreadable: %v)", len(doc), err)
	}
	keys := slices.Sorted(maps.Keys(m))
	if len(keys) == 0 {
		return fmt.Sprintf("%d bytes, no keys", len(doc))
	}
	return fmt.Sprintf("%d bytes, %d key(s): %s", len(doc), len(keys), strings.Join(keys, ", "))
}
