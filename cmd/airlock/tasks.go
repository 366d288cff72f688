package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
	"github.com/airlock-run/airlock/gateway"
)

const tasksUsage = `Usage:
  airlock tasks list [--status running|completed|...] [--state STATE] [--principal NAME]
                     [--tool TOOL] [--pending-approval] [--limit N]
  airlock tasks show [--json] TASK_ID
  airlock tasks rollback [--reason TEXT] TASK_ID
  airlock tasks cancel TASK_ID
  airlock tasks finish TASK_ID

Agent tasks and plans alike:
  list      the newest tasks, with their state; the filters combine (AND):
            --status the Temporal execution status, --state airlock's own
            (running, finished, rolled_back, rollback_failed, ...),
            --principal who started it, --tool a tool it called (exposed
            name, e.g. filesystem__write_file), --pending-approval waiting
            for an approval now
  show      one task: calls, plan steps, pending compensations
  rollback  undo the task's changes (compensations, newest first, each once);
            waits for it and prints what was undone and what was not. Also
            retries a rollback that failed, and undoes a task that has
            ended (a completed plan), once, as workflow rollback-TASK_ID.
  cancel    cancel the task: it rolls back, then ends
  finish    end the task once its running calls are done, without rolling
            back (also how an operator closes a task whose rollback failed,
            after fixing what remained by hand)

Talks to the Temporal of a running "airlock dev" (127.0.0.1:7233) unless
--temporal-address or TEMPORAL_ADDRESS says otherwise.
`

// taskKinds is the visibility query for every kind of task.
var taskKinds = "(WorkflowType = '" + api.AgentTaskName + "' OR WorkflowType = '" + api.PlanName +
	"' OR WorkflowType = '" + api.RollbackTaskName + "')"

func runTasks(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, tasksUsage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, tasksUsage)
		return 0
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "list", "show", "rollback", "cancel", "finish":
	default:
		fmt.Fprintf(stderr, "airlock tasks: unknown subcommand %q\n%s", sub, tasksUsage)
		return 2
	}
	fs := flag.NewFlagSet("airlock tasks "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tc temporalFlags
	tc.register(fs)
	status := fs.String("status", "", "list only tasks in this execution `status` (running, completed, failed, canceled, terminated, timedout)")
	state := fs.String("state", "", "list only tasks in this airlock `state` ("+strings.Join(taskStates, ", ")+")")
	principal := fs.String("principal", "", "list only tasks of this `principal`")
	tool := fs.String("tool", "", "list only tasks that called this `tool` (exposed name, server__tool)")
	pendingApproval := fs.Bool("pending-approval", false, "list only tasks waiting for an approval")
	limit := fs.Int("limit", 50, "list at most `N` tasks")
	asJSON := fs.Bool("json", false, "print JSON")
	reason := fs.String("reason", "", "why (rollback; kept in the task's record)")
	wait := fs.Duration("wait", 10*time.Minute, "how long rollback waits for the compensations to run")
	fs.Usage = func() { fmt.Fprint(stderr, tasksUsage); fs.PrintDefaults() }
	args, err := parseInterspersed(fs, rest)
	if err != nil {
		return parseExit(err)
	}
	// Check the arguments before dialing, so a typo is not reported as a
	// connection problem.
	q := taskKinds
	switch sub {
	case "list":
		if len(args) > 0 {
			fmt.Fprintf(stderr, "airlock tasks list: unexpected argument %q (to see one task: airlock tasks show TASK_ID)\n", args[0])
			return 2
		}
		if *limit < 1 {
			fmt.Fprintf(stderr, "airlock tasks list: --limit %d: must be at least 1\n", *limit)
			return 2
		}
		if *status != "" {
			s := strings.ToLower(*status)
			names := map[string]string{"running": "Running", "completed": "Completed", "failed": "Failed", "canceled": "Canceled",
				"terminated": "Terminated", "timedout": "TimedOut", "continuedasnew": "ContinuedAsNew"}
			v, ok := names[s]
			if !ok {
				fmt.Fprintf(stderr, "airlock tasks list: --status %q: use running, completed, failed, canceled, terminated or timedout\n", *status)
				return 2
			}
			q += " AND ExecutionStatus = '" + v + "'"
		}
		if *state != "" && !slices.Contains(taskStates, *state) {
			fmt.Fprintf(stderr, "airlock tasks list: --state %q: use one of %s\n", *state, strings.Join(taskStates, ", "))
			return 2
		}
		for _, f := range []struct {
			flag, value string
			attr        string
		}{
			{"state", *state, api.SAStatus.GetName()},
			{"principal", *principal, api.SAPrincipal.GetName()},
			{"tool", *tool, api.SATools.GetName()}, // a keyword list: = means "contains"
		} {
			if f.value == "" {
				continue
			}
			lit, err := queryLiteral(f.value)
			if err != nil {
				fmt.Fprintf(stderr, "airlock tasks list: --%s %q: %v\n", f.flag, f.value, err)
				return 2
			}
			q += " AND " + f.attr + " = " + lit
		}
		if *pendingApproval {
			q += " AND " + api.SAApproval.GetName() + " = '" + api.ApprovalPending + "'"
		}
	default:
		if len(args) != 1 {
			fmt.Fprintf(stderr, "airlock tasks %s: name one TASK_ID (airlock tasks list shows them)\n", sub)
			return 2
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+*wait)
	defer cancel()
	c, code := tc.dial(ctx, "airlock tasks", stderr)
	if c == nil {
		return code
	}
	defer c.Close()

	id := ""
	if len(args) > 0 {
		id = args[0]
	}
	switch sub {
	case "list":
		return listTasks(ctx, c, tc.namespace, q, *limit, stdout, stderr)
	case "show":
		return showTask(ctx, c, id, *asJSON, stdout, stderr)
	case "rollback":
		rctx, rcancel := context.WithTimeout(ctx, *wait)
		defer rcancel()
		req := api.RollbackRequest{By: "operator", Reason: *reason}
		res, err := rollbackTask(rctx, c, id, req, tc.taskQueue)
		if err != nil {
			if rctx.Err() != nil {
				fmt.Fprintf(stderr, "airlock tasks rollback %s: still running after %s; it goes on without you (airlock tasks show %s)\n", id, *wait, id)
				return 1
			}
			fmt.Fprintf(stderr, "airlock tasks rollback %s: %v\n", id, err)
			return 1
		}
		if *asJSON {
			printJSON(stdout, res)
		} else {
			fmt.Fprintln(stdout, gateway.DescribeRollback(res))
		}
		if res.State == api.StateRollbackFailed {
			return 1
		}
		return 0
	case "cancel":
		if err := c.CancelWorkflow(ctx, id, ""); err != nil {
			fmt.Fprintf(stderr, "airlock tasks cancel %s: %v\n", id, err)
			return 1
		}
		fmt.Fprintf(stdout, "cancel requested: task %s rolls back what it changed, then ends (airlock tasks show %s)\n", id, id)
		return 0
	case "finish":
		if err := c.SignalWorkflow(ctx, id, "", api.SignalFinish, nil); err != nil {
			fmt.Fprintf(stderr, "airlock tasks finish %s: %v\n", id, err)
			return 1
		}
		fmt.Fprintf(stdout, "finish requested: task %s ends once its running calls are done\n", id)
		return 0
	}
	return 2
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
	if len(st.Saga) == 0 {
		return api.RollbackResult{TaskID: id, State: api.RollbackNothing,
			Reason: "the task has ended (" + st.State + ") and left no pending compensation"}, nil
	}
	rid := api.RollbackTaskID(id)
	start := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: rid, TaskQueue: taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, api.RollbackTaskName, api.RollbackTaskInput{TaskID: id, Principal: st.Principal, Saga: st.Saga})
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

func listTasks(ctx context.Context, c client.Client, ns, q string, limit int, stdout, stderr io.Writer) int {
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns, Query: q, PageSize: int32(limit)})
	if err != nil {
		fmt.Fprintf(stderr, "airlock tasks list: %v\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKIND\tSTATUS\tSTATE\tPRINCIPAL\tSTARTED\tTOOLS")
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
		kind := map[string]string{api.PlanName: "plan", api.RollbackTaskName: "rollback"}[ex.GetType().GetName()]
		if kind == "" {
			kind = "agent"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ex.GetExecution().GetWorkflowId(), kind,
			strings.ToLower(strings.TrimPrefix(ex.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")),
			state, principal, ex.GetStartTime().AsTime().Local().Format(time.DateTime), tools)
	}
	_ = tw.Flush()
	return 0
}

func showTask(ctx context.Context, c client.Client, id string, asJSON bool, stdout, stderr io.Writer) int {
	st, err := queryStatus(ctx, c, id)
	if err != nil {
		fmt.Fprintf(stderr, "airlock tasks show %s: %v\n", id, err)
		return 1
	}
	if asJSON {
		printJSON(stdout, st)
		return 0
	}
	fmt.Fprintf(stdout, "task:      %s\nprincipal: %s\nstate:     %s\nstarted:   %s\ncalls:     %d (limit %d)\nin flight: %s\ntools:     %s\n",
		st.TaskID, st.Principal, st.State, st.StartedAt.Local().Format(time.DateTime), st.Calls, st.MaxCalls,
		strings.Join(st.InFlight, ", "), strings.Join(st.ToolsUsed, ", "))
	if st.Plan != nil {
		fmt.Fprintf(stdout, "plan:      %s\n", st.Plan.Name)
		for _, s := range st.Plan.Steps {
			fmt.Fprintf(stdout, "  %-9s %-20s %-28s %s\n", s.State, s.ID, s.Tool, s.Reason)
		}
	}
	if len(st.Recent) > 0 {
		fmt.Fprintln(stdout, "recent calls:")
		for _, r := range st.Recent {
			fmt.Fprintf(stdout, "  %s  %-28s %-12s %s\n", r.Started.Local().Format(time.TimeOnly), r.Tool, r.Outcome, r.Reason)
		}
	}
	if len(st.Saga) > 0 {
		if st.Ended {
			fmt.Fprintf(stdout, "not rolled back (the task has ended; undo it once with airlock tasks rollback %s):\n", st.TaskID)
		} else {
			fmt.Fprintf(stdout, "can be undone, newest first (airlock tasks rollback %s):\n", st.TaskID)
		}
		for i := len(st.Saga) - 1; i >= 0; i-- {
			e := st.Saga[i]
			undo := "cannot: " + e.Error
			if e.Undo != nil {
				undo = "by " + e.Undo.Tool
			}
			fmt.Fprintf(stdout, "  %-24s %-28s %-8s %s %s\n", e.CallID, e.Tool, e.State, undo, e.Reason)
		}
	}
	if len(st.Undone) > 0 {
		fmt.Fprintln(stdout, "undone:")
		for _, e := range st.Undone {
			fmt.Fprintf(stdout, "  %-24s %-28s by %s\n", e.CallID, e.Tool, e.Undo.Tool)
		}
	}
	return 0
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

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// temporalFlags are the connection flags of the one-shot commands that
// talk to Temporal (tasks, run).
type temporalFlags struct {
	address, namespace string
	// taskQueue is where workflows these commands start run (tasks
	// rollback of an ended task).
	taskQueue string
	tls       tlsFlags
}

func (t *temporalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.address, "temporal-address", firstNonEmpty(os.Getenv("TEMPORAL_ADDRESS"), "127.0.0.1:7233"), "Temporal frontend `host:port`")
	fs.StringVar(&t.namespace, "namespace", firstNonEmpty(os.Getenv("TEMPORAL_NAMESPACE"), "default"), "Temporal `namespace`")
	fs.StringVar(&t.taskQueue, "task-queue", api.DefaultTaskQueue, "the workers' task `queue` (rolling back a task that has ended starts a workflow there)")
	t.tls.register(fs)
}

// dial connects, or reports why not and returns the exit code.
func (t *temporalFlags) dial(ctx context.Context, cmd string, stderr io.Writer) (client.Client, int) {
	// Dialing has its own bound, shorter than the command's, so a host that
	// accepts connections but never answers is reported quickly (the SDK's
	// own health check gives up after about 5s).
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	copts := client.Options{HostPort: t.address, Namespace: t.namespace, Logger: quietLogger{}}
	if err := t.tls.clientOptions(&copts); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return nil, 2
	}
	c, err := client.DialContext(dctx, copts)
	if err != nil {
		fmt.Fprintf(stderr, "%s: cannot connect to Temporal at %s (namespace %s): %v\nIs airlock dev running? For another cluster pass --temporal-address HOST:PORT (or set TEMPORAL_ADDRESS).\n", cmd, t.address, t.namespace, err)
		return nil, 1
	}
	return c, 0
}

// quietLogger drops the SDK's client logs in one-shot commands.
type quietLogger struct{}

func (quietLogger) Debug(string, ...interface{}) {}
func (quietLogger) Info(string, ...interface{})  {}
func (quietLogger) Warn(string, ...interface{})  {}
func (quietLogger) Error(string, ...interface{}) {}
