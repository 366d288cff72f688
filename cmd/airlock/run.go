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

const runUsage = `Usage: airlock run [flags] PLAN.yaml

Starts the plan as a durable task and follows it: each step goes through the
same policy, approvals, capture and compensation as an agent's call. A step
that fails rolls the plan back unless its on_failure says stop or continue.

The plan keeps running if this command stops (Ctrl-C detaches; so does
--detach): follow it with "airlock tasks show ID", undo it with "airlock tasks
rollback ID", stop and undo it with "airlock tasks cancel ID".

Exit status: 0 when the plan completed, 1 when it stopped, was rolled back or
failed, 2 for a bad plan or flag.

Flags:
`

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

func runRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("airlock run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f commonFlags
	f.register(fs)
	as := fs.String("as", "", "`principal` the plan runs as (default: the plan's principal, else local_principal)")
	id := fs.String("id", "", "task `ID` (default: plan-<name>-<random>); starting an ID that exists is refused")
	detach := fs.Bool("detach", false, "start the plan and return at once, printing its task ID")
	vars := varFlags{}
	fs.Var(vars, "var", "override a plan var: `name=value` (repeatable)")
	fs.Usage = func() { fmt.Fprint(stderr, runUsage); fs.PrintDefaults() }
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(files) != 1 {
		fmt.Fprint(stderr, "airlock run: name one plan file, e.g. airlock run plans/examples/seed-project.yaml\n")
		return 2
	}
	f.logLevel, f.logFormat = "warn", "console"
	e, err := load(f, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "airlock run: %v\n", err)
		return 2
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		fmt.Fprintf(stderr, "airlock run: %v\n", manifests.ReadProblem(files[0], err))
		return 2
	}
	p, err := plans.Parse(files[0], data)
	if err != nil {
		fmt.Fprintf(stderr, "airlock run: %v\n", err)
		return 2
	}
	// Every problem at once, the tool names included.
	if probs := p.Validate(exposedTools(e.snap.Manifests)); len(probs) > 0 {
		fmt.Fprintf(stderr, "airlock run: %v\n", manifests.Problems(probs))
		return 2
	}
	resolved, err := p.ResolveVars(vars)
	if err != nil {
		fmt.Fprintf(stderr, "airlock run: --var: %v\n", err)
		return 2
	}
	dir := identity.New(e.snap.Config)
	who := firstNonEmpty(*as, p.Principal, e.snap.Config.LocalPrincipal)
	if who == "" {
		fmt.Fprint(stderr, "airlock run: who does the plan run as? pass --as PRINCIPAL, set principal: in the plan, or local_principal in the configuration\n")
		return 2
	}
	pr, ok := dir.Lookup(who)
	if !ok {
		fmt.Fprintf(stderr, "airlock run: principal %q is not one of the configuration's principals\n", who)
		return 2
	}
	taskID := *id
	if taskID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		taskID = "plan-" + p.Name + "-" + hex.EncodeToString(b[:])
	}
	cfg := e.snap.Config
	in := api.PlanInput{TaskID: taskID, Principal: pr.Name, Plan: p, Vars: resolved,
		Identity: &api.Identity{Name: pr.Name, Roles: pr.Roles, Permissions: pr.Permissions,
			DataLevel: string(pr.DataLevel), SlackUserID: pr.SlackUserID, AllowTools: pr.AllowTools},
		Limits:         api.Limits{MaxCalls: firstPositive(p.MaxCalls(), pr.MaxCalls, cfg.Task.MaxCalls)},
		RollbackNotify: cfg.Task.RollbackNotify,
	}
	if d := firstPositiveDur(p.Deadline(), pr.Deadline, cfg.Task.Deadline.D()); d > 0 {
		in.Limits.Deadline = time.Now().Add(d).UTC()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tf := temporalFlags{address: firstNonEmpty(e.flags.address, "127.0.0.1:7233"), namespace: e.ns, tls: f.tls}
	c, code := tf.dial(ctx, "airlock run", stderr)
	if c == nil {
		return code
	}
	defer c.Close()
	_, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: taskID, TaskQueue: e.tq,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			api.SAPrincipal.ValueSet(pr.Name), api.SAStatus.ValueSet(api.StateRunning)),
	}, api.PlanName, in)
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			fmt.Fprintf(stderr, "airlock run: task %s already exists; pick another --id\n", taskID)
			return 2
		}
		fmt.Fprintf(stderr, "airlock run: starting plan %s: %v\n", p.Name, err)
		return 1
	}
	fmt.Fprintf(stdout, "plan %s started as task %s (principal %s, %d steps)\n", p.Name, taskID, pr.Name, len(p.Steps))
	if *detach {
		fmt.Fprintf(stdout, "follow it with: airlock tasks show %s\n", taskID)
		return 0
	}
	return followPlan(ctx, c, taskID, stdout, stderr)
}

// followPlan prints each step as it changes and the plan's end.
func followPlan(ctx context.Context, c client.Client, taskID string, stdout, stderr io.Writer) int {
	done := make(chan error, 1)
	var res api.TaskResult
	go func() { done <- c.GetWorkflow(ctx, taskID, "").Get(ctx, &res) }()
	shown := map[string]string{}
	asked := map[string]bool{}
	show := func() {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, err := queryStatus(qctx, c, taskID)
		if err != nil || st.Plan == nil {
			return
		}
		for _, s := range st.Plan.Steps {
			if shown[s.ID] == s.State || s.State == api.StepPending {
				continue
			}
			shown[s.ID] = s.State
			line := fmt.Sprintf("  %-8s %-20s %s", s.State, s.ID, s.Tool)
			if s.Reason != "" && s.State != api.StepOK {
				line += ": " + s.Reason
			}
			fmt.Fprintln(stdout, line)
		}
		if v, err := c.QueryWorkflow(qctx, taskID, "", api.QueryApprovals); err == nil {
			var reqs []api.ApprovalRequest
			if v.Get(&reqs) == nil {
				for _, a := range reqs {
					if a.State == api.ApprovalPending && !asked[a.ID] {
						asked[a.ID] = true
						fmt.Fprintf(stdout, "  waiting  %s needs approval by %q: airlock approvals approve %s (or in Slack)\n", a.Tool, a.Group, a.ID)
					}
				}
			}
		}
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if ctx.Err() != nil {
				break
			}
			show()
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
			show()
			continue
		case <-ctx.Done():
		}
		fmt.Fprintf(stdout, "detached; plan %s keeps running. airlock tasks show %s follows it, airlock tasks cancel %s stops and undoes it\n", taskID, taskID, taskID)
		return 1
	}
}

// exposedTools lists every tool the manifests expose, for plan validation.
func exposedTools(ms []*manifests.Manifest) []string {
	var out []string
	for _, m := range ms {
		for name := range m.Tools {
			out = append(out, manifests.ExposedName(m.Server.Name, name))
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
