package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/plans"
)

const runLong = `Starts the plan as a durable task and follows it: each step goes through the
same policy, approvals, capture and compensation as an agent's call. A step
that fails rolls the plan back unless its on_failure says stop or continue.

The plan keeps running if this command stops (Ctrl-C detaches; so does
--detach): follow it with "airlock tasks show ID", undo it with "airlock tasks
rollback ID", stop and undo it with "airlock tasks cancel ID".

Exit status: 0 when the plan completed, 1 when it stopped, was rolled back or
failed, 2 for a bad plan or flag.`

func runCommand() *Command {
	return &Command{Name: "run", Usage: "[flags] PLAN.yaml", Short: "run a plan (declared steps) as a durable task",
		Long: runLong, Flags: bind(runFlags, runPlan)}
}

// varFlags collects repeated --var name=value flags.
type varFlags map[string]string

func (v varFlags) String() string { return "" }

func (v varFlags) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: write name=value", s)
	}
	v[name] = val
	return nil
}

type runOptions struct {
	common commonFlags
	as, id string
	detach bool
	vars   varFlags
}

func runFlags(fs *flag.FlagSet, o *runOptions) {
	o.common.register(fs)
	fs.StringVar(&o.as, "as", "", "`principal` the plan runs as (default: the plan's principal, else local_principal)")
	fs.StringVar(&o.id, "id", "", "task `ID` (default: plan-<name>-<random>); starting an ID that exists is refused")
	fs.BoolVar(&o.detach, "detach", false, "start the plan and return at once, printing its task ID")
	o.vars = varFlags{}
	fs.Var(o.vars, "var", "override a plan var: `name=value` (repeatable)")
}

func runPlan(c *Call, o *runOptions) int {
	if len(c.Args) != 1 {
		return c.usage("name one plan file, e.g. airlock run plans/examples/seed-project.yaml")
	}
	o.common.logLevel, o.common.logFormat = "warn", "console"
	e, err := load(o.common, c.Stderr)
	if err != nil {
		return c.usage("%v", err)
	}
	in, code := planInput(c, e, o)
	if in == nil {
		return code
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tf := temporalFlags{address: firstNonEmpty(e.flags.address, "127.0.0.1:7233"), namespace: e.ns, tls: o.common.tls}
	tc, code := tf.dial(ctx, c)
	if tc == nil {
		return code
	}
	defer tc.Close()
	if code := startPlan(ctx, c, tc, e.tq, in); code != 0 {
		return code
	}
	fmt.Fprintf(c.Stdout, "plan %s started as task %s (principal %s, %d steps)\n", in.Plan.Name, in.TaskID, in.Principal, len(in.Plan.Steps))
	if o.detach {
		fmt.Fprintf(c.Stdout, "follow it with: airlock tasks show %s\n", in.TaskID)
		return 0
	}
	return followPlan(ctx, tc, in.TaskID, c.Stdout, c.Stderr)
}

// planInput reads, checks and resolves the plan file for the principal it
// runs as; nil after reporting a problem (every problem at once, the tool
// names included).
func planInput(c *Call, e *env, o *runOptions) (*api.PlanInput, int) {
	data, err := os.ReadFile(c.Args[0])
	if err != nil {
		return nil, c.usage("%v", manifests.ReadProblem(c.Args[0], err))
	}
	p, err := plans.Parse(c.Args[0], data)
	if err != nil {
		return nil, c.usage("%v", err)
	}
	if probs := p.Validate(exposedTools(e.snap.Manifests)); len(probs) > 0 {
		return nil, c.usage("%v", manifests.Problems(probs))
	}
	resolved, err := p.ResolveVars(o.vars)
	if err != nil {
		return nil, c.usage("--var: %v", err)
	}
	who := firstNonEmpty(o.as, p.Principal, e.snap.Config.LocalPrincipal)
	if who == "" {
		return nil, c.usage("who does the plan run as? pass --as PRINCIPAL, set principal: in the plan, or local_principal in the configuration")
	}
	pr, ok := identity.New(e.snap.Config).Lookup(who)
	if !ok {
		return nil, c.usage("principal %q is not one of the configuration's principals", who)
	}
	taskID := o.id
	if taskID != "" {
		if err := api.ClaimTaskID(taskID, pr.Name); err != nil {
			return nil, c.usage("--id: %v", err)
		}
	}
	if taskID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		taskID = "plan-" + p.Name + "-" + hex.EncodeToString(b[:])
	}
	cfg := e.snap.Config
	in := &api.PlanInput{TaskID: taskID, Principal: pr.Name, Plan: p, Vars: resolved,
		Identity: &api.Identity{Name: pr.Name, Roles: pr.Roles, Permissions: pr.Permissions,
			DataLevel: string(pr.DataLevel), SlackUserID: pr.SlackUserID, AllowTools: pr.AllowTools},
		Limits:         api.Limits{MaxCalls: firstPositive(p.MaxCalls(), pr.MaxCalls, cfg.Task.MaxCalls)},
		RollbackNotify: cfg.Task.RollbackNotify,
		State:          cfg.StateConfig(), // task.state
		// Rate limits and budget (issue 16 §3): the task's, then the roles'.
		Quota: api.NewQuota(append(cfg.TaskRateLimits(), pr.RateLimits...), firstPositive(pr.Budget, cfg.Task.Budget)),
	}
	if d := firstPositiveDur(p.Deadline(), pr.Deadline, cfg.Task.Deadline.D()); d > 0 {
		in.Limits.Deadline = time.Now().Add(d).UTC()
	}
	return in, 0
}

// startPlan starts the plan's workflow; an ID that exists is refused.
func startPlan(ctx context.Context, c *Call, tc client.Client, taskQueue string, in *api.PlanInput) int {
	_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: in.TaskID, TaskQueue: taskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			api.SAPrincipal.ValueSet(in.Principal), api.SAStatus.ValueSet(api.StateRunning)),
	}, api.PlanName, *in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &started):
		return c.usage("task %s already exists; pick another --id", in.TaskID)
	case err != nil:
		return c.fail(fmt.Errorf("starting plan %s: %w", in.Plan.Name, err))
	}
	return 0
}

// followPlan prints each step as it changes and the plan's end.
func followPlan(ctx context.Context, c client.Client, taskID string, stdout, stderr io.Writer) int {
	done := make(chan error, 1)
	var res api.TaskResult
	go func() { done <- c.GetWorkflow(ctx, taskID, "").Get(ctx, &res) }()
	w := &planWatch{c: c, taskID: taskID, out: stdout, shown: map[string]string{}, asked: map[string]bool{}}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if ctx.Err() != nil {
				break
			}
			w.show(ctx)
			if err != nil {
				fmt.Fprintf(stderr, "airlock run: task %s: %v\n", taskID, err)
				return 1
			}
			fmt.Fprintf(stdout, "plan %s: %s\n", taskID, res.State)
			if len(res.Undone) > 0 {
				fmt.Fprintf(stdout, "NOT undone (%d): see airlock tasks show %s\n", len(res.Undone), taskID)
			}
			if res.State == api.StateCompleted {
				return 0
			}
			return 1
		case <-tick.C:
			w.show(ctx)
			continue
		case <-ctx.Done():
		}
		fmt.Fprintf(stdout, "detached; plan %s keeps running. airlock tasks show %s follows it, airlock tasks cancel %s stops and undoes it\n", taskID, taskID, taskID)
		return 1
	}
}

// planWatch prints what changed in a running plan since it last looked:
// steps that moved on, approvals newly asked for.
type planWatch struct {
	c      client.Client
	taskID string
	out    io.Writer
	shown  map[string]string // step ID: the state last printed
	asked  map[string]bool   // approval request IDs printed
}

func (w *planWatch) show(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := queryStatus(qctx, w.c, w.taskID)
	if err != nil || st.Plan == nil {
		return
	}
	for _, s := range st.Plan.Steps {
		if w.shown[s.ID] == s.State || s.State == api.StepPending {
			continue
		}
		w.shown[s.ID] = s.State
		line := fmt.Sprintf("  %-8s %-20s %s", s.State, s.ID, stepWhat(s))
		if s.Reason != "" && s.State != api.StepOK {
			line += ": " + s.Reason
		}
		fmt.Fprintln(w.out, line)
	}
	v, err := w.c.QueryWorkflow(qctx, w.taskID, "", api.QueryApprovals)
	if err != nil {
		return
	}
	var reqs []api.ApprovalRequest
	if v.Get(&reqs) != nil {
		return
	}
	for _, a := range reqs {
		if a.State == api.ApprovalPending && !w.asked[a.ID] {
			w.asked[a.ID] = true
			fmt.Fprintf(w.out, "  waiting  %s needs approval by %q: airlock approvals approve %s (or in Slack)\n", a.Tool, a.Group, a.ID)
		}
	}
}

// exposedTools lists every tool the manifests expose, for plan validation.
func exposedTools(ms []*manifests.Manifest) []string {
	var out []string
	for _, m := range ms {
		for name := range m.Tools {
			out = append(out, m.Exposed(name))
		}
	}
	sort.Strings(out)
	return out
}

func firstPositive(v ...int) int {
	for _, x := range v {
		if x > 0 {
			return x
		}
	}
	return 0
}

func firstPositiveDur(v ...time.Duration) time.Duration {
	for _, x := range v {
		if x > 0 {
			return x
		}
	}
	return 0
}

// stepWhat is what a step runs: its tool, or its program (with how many
// calls it made, once it has ended).
func stepWhat(s api.StepStatus) string {
	switch {
	case s.Tool != "":
		return s.Tool
	case s.Program != nil:
		return fmt.Sprintf("program (%d calls, %s)", len(s.Program.Calls), s.Program.Outcome)
	}
	return "program"
}
