package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/identity"
)

const schedulesLong = `A schedule runs a plan again and again (a cron expression, or every DURATION)
as a normal plan task: the same policy, approvals (a step that needs one waits
for a person), compensations and audit as "airlock run". Schedules live in
Temporal (Temporal Schedules), so they keep firing while airlock restarts.

create checks everything when the schedule is made, not when it first
fires: the plan, its vars, its tools, the principal it runs as (--as, else
the plan's principal, else local_principal), and that this principal's roles
grant the permission "schedules.create". Overlapping runs are skipped unless
--overlap says otherwise; runs missed while the server was down are caught up
within --catchup-window.

Each run is a task "plan-<schedule>-<time>"; airlock tasks list shows the
schedule that started it.`

// PermScheduleCreate is the role permission a schedule's principal needs.
const PermScheduleCreate = "schedules.create"

var scheduleName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func schedulesCommand() *Command {
	sub := func(name, usage, short string, run func(*Call, *scheduleOptions) int) *Command {
		return &Command{Name: name, Usage: usage, Short: short, Long: schedulesLong, Flags: bind(scheduleFlags, run)}
	}
	return &Command{Name: "schedules", Short: "run plans on a schedule, under the same governance", Long: schedulesLong,
		Sub: []*Command{
			{Name: "create", Usage: "NAME (--cron EXPR | --every DURATION) [--var k=v] [--as PRINCIPAL] PLAN.yaml",
				Short: "schedule a plan", Long: schedulesLong, Flags: bind(scheduleCreateFlags, schedulesCreate)},
			sub("list", "", "the schedules", schedulesList),
			sub("show", "NAME", "one schedule: spec, state, recent and next runs", schedulesShow),
			sub("pause", "NAME", "stop a schedule firing (until resume)", schedulesPause),
			sub("resume", "NAME", "let a paused schedule fire again", schedulesResume),
			sub("trigger", "NAME", "run the plan now, once", schedulesTrigger),
			sub("delete", "NAME", "delete the schedule (its tasks keep running)", schedulesDelete),
		}}
}

type scheduleOptions struct {
	conn temporalFlags
	note string
}

func scheduleFlags(fs *flag.FlagSet, o *scheduleOptions) {
	o.conn.register(fs)
	fs.StringVar(&o.note, "note", "", "pause, resume: a `note` kept with the schedule's state")
}

type scheduleCreateOptions struct {
	run      runOptions
	cron     string
	every    time.Duration
	overlap  string
	catchup  time.Duration
	paused   bool
	note     string
	jitter   time.Duration
	startNow bool
}

func scheduleCreateFlags(fs *flag.FlagSet, o *scheduleCreateOptions) {
	o.run.common.register(fs)
	fs.StringVar(&o.run.as, "as", "", "`principal` the runs run as (default: the plan's principal, else local_principal); needs permission "+PermScheduleCreate)
	o.run.vars = varFlags{}
	fs.Var(o.run.vars, "var", "override a plan var: `name=value` (repeatable)")
	fs.StringVar(&o.cron, "cron", "", "when to run: a cron `expression` (\"0 3 * * *\": 03:00 UTC daily)")
	fs.DurationVar(&o.every, "every", 0, "when to run: every `duration` (at least 1s)")
	fs.StringVar(&o.overlap, "overlap", "skip", "a run due while the last still runs: skip, buffer_one, buffer_all, cancel_other, terminate_other or allow_all")
	fs.DurationVar(&o.catchup, "catchup-window", time.Minute, "runs missed while Temporal was down are run if at most this `duration` late")
	fs.DurationVar(&o.jitter, "jitter", 0, "delay each run by a random `duration` up to this")
	fs.BoolVar(&o.paused, "paused", false, "create the schedule paused")
	fs.StringVar(&o.note, "note", "", "a `note` kept with the schedule")
	fs.BoolVar(&o.startNow, "now", false, "also run the plan once right away")
}

var overlapPolicies = map[string]enumspb.ScheduleOverlapPolicy{
	"skip":            enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	"buffer_one":      enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
	"buffer_all":      enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL,
	"cancel_other":    enumspb.SCHEDULE_OVERLAP_POLICY_CANCEL_OTHER,
	"terminate_other": enumspb.SCHEDULE_OVERLAP_POLICY_TERMINATE_OTHER,
	"allow_all":       enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL,
}

func schedulesCreate(c *Call, o *scheduleCreateOptions) int {
	if len(c.Args) != 2 {
		return c.usage("name the schedule and one plan file: airlock schedules create NAME --every 1h PLAN.yaml")
	}
	name := c.Args[0]
	if !scheduleName.MatchString(name) {
		return c.usage("schedule name %q: use lowercase letters, digits and - (at most 63), e.g. nightly-cleanup", name)
	}
	switch {
	case (o.cron == "") == (o.every == 0):
		return c.usage("give exactly one of --cron EXPR and --every DURATION")
	case o.every != 0 && o.every < time.Second:
		return c.usage("--every %s: at least 1s", o.every)
	case o.cron != "" && len(strings.Fields(o.cron)) < 5:
		return c.usage("--cron %q: a cron expression has five fields (minute hour day-of-month month day-of-week), e.g. \"0 3 * * *\"", o.cron)
	case o.catchup < 10*time.Second:
		return c.usage("--catchup-window %s: at least 10s (Temporal's minimum)", o.catchup)
	case o.jitter < 0:
		return c.usage("--jitter must not be negative")
	}
	overlap, ok := overlapPolicies[o.overlap]
	if !ok {
		names := make([]string, 0, len(overlapPolicies))
		for k := range overlapPolicies {
			names = append(names, k)
		}
		slices.Sort(names)
		return c.usage("--overlap %q: use one of %s", o.overlap, strings.Join(names, ", "))
	}
	o.run.common.logLevel, o.run.common.logFormat = "warn", "console"
	e, err := load(o.run.common, c.Stderr)
	if err != nil {
		return c.usage("%v", err)
	}
	// planInput reads Args[0] as the plan.
	pc := *c
	pc.Args = c.Args[1:]
	in, code := planInput(&pc, e, &o.run)
	if in == nil {
		return code
	}
	pr, _ := identity.New(e.snap.Config).Lookup(in.Principal)
	if !permits(pr.Permissions, PermScheduleCreate) {
		return c.usage("principal %s may not create schedules: give one of its roles the permission %q", in.Principal, PermScheduleCreate)
	}
	// One input for every run: each run's task ID is its workflow ID, and
	// its deadline counts from its own start.
	if !in.Limits.Deadline.IsZero() {
		in.DeadlineAfter = time.Until(in.Limits.Deadline).Round(time.Second)
		in.Limits.Deadline = time.Time{}
	}
	in.TaskID, in.Schedule = "", name

	spec := client.ScheduleSpec{Jitter: o.jitter}
	if o.cron != "" {
		spec.CronExpressions = []string{o.cron}
	} else {
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: o.every}}
	}
	tf := temporalFlags{address: firstNonEmpty(e.flags.address, "127.0.0.1:7233"), namespace: e.ns, tls: o.run.common.tls}
	return tf.run(c, 30*time.Second, func(ctx context.Context, tc client.Client) int {
		_, err := tc.ScheduleClient().Create(ctx, client.ScheduleOptions{
			ID: name, Spec: spec, Overlap: overlap, CatchupWindow: o.catchup, Paused: o.paused, Note: o.note,
			TriggerImmediately: o.startNow,
			Memo:               map[string]any{"plan": in.Plan.Name, "principal": in.Principal},
			Action: &client.ScheduleWorkflowAction{
				ID: "plan-" + name, Workflow: api.PlanName, Args: []any{*in}, TaskQueue: e.tq,
				TypedSearchAttributes: temporal.NewSearchAttributes(
					api.SAPrincipal.ValueSet(in.Principal), api.SAStatus.ValueSet(api.StateRunning)),
			},
		})
		var exists *serviceerror.AlreadyExists
		switch {
		case errors.Is(err, temporal.ErrScheduleAlreadyRunning) || errors.As(err, &exists):
			return c.usage("schedule %s already exists: pick another name, or airlock schedules delete %s first", name, name)
		case err != nil:
			var inv *serviceerror.InvalidArgument
			if errors.As(err, &inv) {
				return c.usage("Temporal refused the schedule: %s", inv.Message)
			}
			return c.fail(fmt.Errorf("creating schedule %s: %w", name, err))
		}
		when := "--cron " + o.cron
		if o.every > 0 {
			when = "every " + o.every.String()
		}
		state := ""
		if o.paused {
			state = " (paused)"
		}
		fmt.Fprintf(c.Stdout, "schedule %s created%s: plan %s as %s, %s, overlap %s\n", name, state, in.Plan.Name, in.Principal, when, o.overlap)
		return 0
	})
}

// permits says whether perms grants p ("*" grants everything).
func permits(perms []string, p string) bool {
	return slices.Contains(perms, "*") || slices.Contains(perms, p)
}

// scheduleName is the one NAME argument.
func scheduleArg(c *Call) (string, int) {
	if len(c.Args) != 1 || c.Args[0] == "" {
		return "", c.usage("name one schedule (airlock schedules list shows them)")
	}
	return c.Args[0], 0
}

func withSchedule(c *Call, o *scheduleOptions, f func(ctx context.Context, h client.ScheduleHandle, name string) error, done string) int {
	name, code := scheduleArg(c)
	if code != 0 {
		return code
	}
	return o.conn.run(c, 30*time.Second, func(ctx context.Context, tc client.Client) int {
		if err := f(ctx, tc.ScheduleClient().GetHandle(ctx, name), name); err != nil {
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				return c.failOn(name, errors.New("no such schedule (airlock schedules list shows them)"))
			}
			return c.failOn(name, err)
		}
		if done != "" {
			fmt.Fprintf(c.Stdout, "schedule %s %s\n", name, done)
		}
		return 0
	})
}

func schedulesPause(c *Call, o *scheduleOptions) int {
	return withSchedule(c, o, func(ctx context.Context, h client.ScheduleHandle, _ string) error {
		return h.Pause(ctx, client.SchedulePauseOptions{Note: firstNonEmpty(o.note, "paused with airlock schedules pause")})
	}, "paused")
}

func schedulesResume(c *Call, o *scheduleOptions) int {
	return withSchedule(c, o, func(ctx context.Context, h client.ScheduleHandle, _ string) error {
		return h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: firstNonEmpty(o.note, "resumed with airlock schedules resume")})
	}, "resumed")
}

func schedulesTrigger(c *Call, o *scheduleOptions) int {
	return withSchedule(c, o, func(ctx context.Context, h client.ScheduleHandle, _ string) error {
		return h.Trigger(ctx, client.ScheduleTriggerOptions{Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL})
	}, "triggered: its run appears in airlock tasks list")
}

func schedulesDelete(c *Call, o *scheduleOptions) int {
	return withSchedule(c, o, func(ctx context.Context, h client.ScheduleHandle, _ string) error {
		return h.Delete(ctx)
	}, "deleted (tasks it started keep running)")
}

func schedulesShow(c *Call, o *scheduleOptions) int {
	return withSchedule(c, o, func(ctx context.Context, h client.ScheduleHandle, name string) error {
		d, err := h.Describe(ctx)
		if err != nil {
			return err
		}
		w := c.Stdout
		fmt.Fprintf(w, "schedule:  %s\nspec:      %s\n", name, specString(d.Schedule.Spec))
		if a, ok := d.Schedule.Action.(*client.ScheduleWorkflowAction); ok {
			fmt.Fprintf(w, "runs:      %s tasks plan-%s-<time>\n", a.Workflow, name)
		}
		if d.Memo != nil {
			for _, k := range []string{"plan", "principal"} {
				if p, ok := d.Memo.GetFields()[k]; ok {
					fmt.Fprintf(w, "%-10s %s\n", k+":", strings.Trim(string(p.GetData()), `"`))
				}
			}
		}
		st := d.Schedule.State
		state := "active"
		if st != nil && st.Paused {
			state = "paused"
		}
		if st != nil && st.Note != "" {
			state += " (" + st.Note + ")"
		}
		fmt.Fprintf(w, "state:     %s\noverlap:   %s\nactions:   %d run, %d skipped (overlap), %d missed (catch-up window)\n",
			state, overlapName(d.Schedule.Policy), d.Info.NumActions, d.Info.NumActionsSkippedOverlap, d.Info.NumActionsMissedCatchupWindow)
		for _, r := range d.Info.RecentActions {
			id := ""
			if r.StartWorkflowResult != nil {
				id = r.StartWorkflowResult.WorkflowID
			}
			fmt.Fprintf(w, "  ran      %s  %s\n", r.ActualTime.Local().Format(time.DateTime), id)
		}
		for _, t := range d.Info.NextActionTimes {
			fmt.Fprintf(w, "  next     %s\n", t.Local().Format(time.DateTime))
		}
		return nil
	}, "")
}

func overlapName(p *client.SchedulePolicies) string {
	if p == nil {
		return "skip"
	}
	for k, v := range overlapPolicies {
		if v == p.Overlap {
			return k
		}
	}
	return "skip"
}

func specString(s *client.ScheduleSpec) string {
	if s == nil {
		return "-"
	}
	var parts []string
	parts = append(parts, s.CronExpressions...)
	for _, iv := range s.Intervals {
		parts = append(parts, "every "+iv.Every.String())
	}
	if len(s.Calendars) > 0 {
		parts = append(parts, fmt.Sprintf("%d calendar spec(s)", len(s.Calendars)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

func schedulesList(c *Call, o *scheduleOptions) int {
	if len(c.Args) != 0 {
		return c.usage("takes no arguments (to see one: airlock schedules show NAME)")
	}
	return o.conn.run(c, 30*time.Second, func(ctx context.Context, tc client.Client) int {
		it, err := tc.ScheduleClient().List(ctx, client.ScheduleListOptions{PageSize: 100})
		if err != nil {
			return c.fail(err)
		}
		tw := tabwriter.NewWriter(c.Stdout, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "SCHEDULE\tSPEC\tSTATE\tLAST RUN\tNEXT RUN")
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				return c.fail(err)
			}
			if e.WorkflowType.Name != api.PlanName {
				continue
			}
			state, last, next := "active", "-", "-"
			if e.Paused {
				state = "paused"
			}
			if n := len(e.RecentActions); n > 0 {
				last = e.RecentActions[n-1].ActualTime.Local().Format(time.DateTime)
			}
			if len(e.NextActionTimes) > 0 {
				next = e.NextActionTimes[0].Local().Format(time.DateTime)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.ID, specString(e.Spec), state, last, next)
		}
		_ = tw.Flush()
		return 0
	})
}
