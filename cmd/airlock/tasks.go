package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/workflows"
)

const tasksUsage = `Usage:
  airlock tasks list [--status running|completed|...] [--limit N]
  airlock tasks show [--json] TASK_ID

Talks to the Temporal of a running "airlock dev" (127.0.0.1:7233) unless
--temporal-address or TEMPORAL_ADDRESS says otherwise.
`

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
	if sub != "list" && sub != "show" {
		fmt.Fprintf(stderr, "airlock tasks: unknown subcommand %q\n%s", sub, tasksUsage)
		return 2
	}
	fs := flag.NewFlagSet("airlock tasks "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("temporal-address", firstNonEmpty(os.Getenv("TEMPORAL_ADDRESS"), "127.0.0.1:7233"), "Temporal frontend `host:port`")
	ns := fs.String("namespace", firstNonEmpty(os.Getenv("TEMPORAL_NAMESPACE"), "default"), "Temporal `namespace`")
	status := fs.String("status", "", "list only tasks in this execution `status` (running, completed, failed, canceled, terminated, timedout)")
	limit := fs.Int("limit", 50, "list at most `N` tasks")
	asJSON := fs.Bool("json", false, "print JSON")
	var tf tlsFlags
	tf.register(fs)
	fs.Usage = func() { fmt.Fprint(stderr, tasksUsage); fs.PrintDefaults() }
	if err := fs.Parse(rest); err != nil {
		return parseExit(err)
	}
	// Check the arguments before dialing, so a typo is not reported as a
	// connection problem.
	q := "WorkflowType = '" + workflows.AgentTaskName + "'"
	switch sub {
	case "list":
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "airlock tasks list: unexpected argument %q (to see one task: airlock tasks show TASK_ID)\n", fs.Arg(0))
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
	case "show":
		if fs.NArg() != 1 {
			fmt.Fprint(stderr, "airlock tasks show: name one TASK_ID (airlock tasks list shows them)\n")
			return 2
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Dialing has its own bound, shorter than the command's, so a host that
	// accepts connections but never answers is reported quickly (the SDK's
	// own health check gives up after about 5s).
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	copts := client.Options{HostPort: *addr, Namespace: *ns, Logger: quietLogger{}}
	if err := tf.clientOptions(&copts); err != nil {
		fmt.Fprintf(stderr, "airlock tasks: %v\n", err)
		return 2
	}
	c, err := client.DialContext(dctx, copts)
	if err != nil {
		fmt.Fprintf(stderr, "airlock tasks: cannot connect to Temporal at %s (namespace %s): %v\nIs airlock dev running? For another cluster pass --temporal-address HOST:PORT (or set TEMPORAL_ADDRESS).\n", *addr, *ns, err)
		return 1
	}
	defer c.Close()

	switch sub {
	case "list":
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: *ns, Query: q, PageSize: int32(*limit)})
		if err != nil {
			fmt.Fprintf(stderr, "airlock tasks list: %v\n", err)
			return 1
		}
		tw := tabwriter.NewWriter(stdout, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tSTATUS\tPRINCIPAL\tSTARTED\tTOOLS")
		for _, ex := range resp.GetExecutions() {
			sa := ex.GetSearchAttributes().GetIndexedFields()
			principal, tools := "", ""
			if p, ok := sa[workflows.SAPrincipal.GetName()]; ok {
				_ = json.Unmarshal(p.GetData(), &principal)
			}
			if p, ok := sa[workflows.SATools.GetName()]; ok {
				var ts []string
				_ = json.Unmarshal(p.GetData(), &ts)
				tools = strings.Join(ts, ",")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ex.GetExecution().GetWorkflowId(),
				strings.ToLower(strings.TrimPrefix(ex.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")),
				principal, ex.GetStartTime().AsTime().Local().Format(time.DateTime), tools)
		}
		_ = tw.Flush()
		return 0
	case "show":
		id := fs.Arg(0)
		v, err := c.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
		if err != nil {
			fmt.Fprintf(stderr, "airlock tasks show %s: %v\n", id, err)
			return 1
		}
		var st workflows.Status
		if err := v.Get(&st); err != nil {
			fmt.Fprintf(stderr, "airlock tasks show %s: decoding status: %v\n", id, err)
			return 1
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(st)
			return 0
		}
		fmt.Fprintf(stdout, "task:      %s\nprincipal: %s\nstate:     %s\nstarted:   %s\ncalls:     %d (limit %d)\nin flight: %s\ntools:     %s\n",
			st.TaskID, st.Principal, st.State, st.StartedAt.Local().Format(time.DateTime), st.Calls, st.MaxCalls,
			strings.Join(st.InFlight, ", "), strings.Join(st.ToolsUsed, ", "))
		if len(st.Recent) > 0 {
			fmt.Fprintln(stdout, "recent calls:")
			for _, r := range st.Recent {
				fmt.Fprintf(stdout, "  %s  %-28s %-12s %s\n", r.Started.Local().Format(time.TimeOnly), r.Tool, r.Outcome, r.Reason)
			}
		}
		return 0
	}
	fmt.Fprintf(stderr, "airlock tasks: unknown subcommand %q\n%s", sub, tasksUsage)
	return 2
}

// quietLogger drops the SDK's client logs in one-shot commands.
type quietLogger struct{}

func (quietLogger) Debug(string, ...interface{}) {}
func (quietLogger) Info(string, ...interface{})  {}
func (quietLogger) Warn(string, ...interface{})  {}
func (quietLogger) Error(string, ...interface{}) {}
