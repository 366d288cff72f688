package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/auditstream"
)

const grantsLong = `

approve --grant-calls N and/or --grant-for DURATION also approve the next
N calls (for DURATION) of the same tool in the same task, with the same
values of the tool's approval.grant_args, within its approval.max_grant
(without max_grant a tool is approved once only). The task's decision on
each such call is recorded with check "grant"; airlock tasks show lists the
grants and airlock approvals revoke ends one.`

func grantFlags(fs *flag.FlagSet, o *approvalsOptions) {
	fs.StringVar(&o.grantCalls, "grant-calls", "", "approve: also approve the next `N` calls of the tool in the task")
	fs.StringVar(&o.grantFor, "grant-for", "", "approve: also approve the tool's calls in the task for this `duration` (e.g. 30m)")
	fs.BoolVar(&o.grantPrincipal, "grant-principal", false, "approve: the grant covers the principal's other tasks too (if the tool's max_grant allows)")
	fs.StringVar(&o.reason, "reason", "", "revoke: why, recorded with the revocation")
}

// grant is the grant approve asks for (nil: none).
func (o *approvalsOptions) grant() (*api.GrantAsk, error) {
	return api.ParseGrant(o.grantCalls, o.grantFor, o.grantPrincipal)
}

// checkGrant reports misused grant flags (exit status 2), or returns 0.
func (o *approvalsOptions) checkGrant(c *Call, sub string) int {
	granting := o.grantCalls != "" || o.grantFor != "" || o.grantPrincipal
	switch {
	case granting && sub != "approve":
		return c.usage("--grant-calls, --grant-for and --grant-principal apply to approve only")
	case o.reason != "" && sub != "revoke":
		return c.usage("--reason applies to revoke only")
	case len(o.reason) > 1000:
		return c.usage("--reason is %d bytes; keep it under 1000", len(o.reason))
	}
	if _, err := o.grant(); err != nil {
		return c.usage("%v", err)
	}
	if sub == "revoke" && len(c.Args) == 1 && !api.IsGrantID(c.Args[0]) {
		return c.usage("%q is not a grant ID (they look like task-1a2b~grant-call-3c4d; airlock tasks show TASK lists them)", c.Args[0])
	}
	return 0
}

// approvalsRevoke revokes a grant as the principal of the API key.
func approvalsRevoke(c *Call, o *approvalsOptions) int {
	cfg, who, code := o.decider(c, "revoke")
	if who == "" {
		return code
	}
	return o.withLocal(c, func(ctx context.Context, local *approver.Local) int {
		audit, closeAudit, code := o.openAudit(ctx, c, local.Temporal, cfg, "revoke")
		if code != 0 {
			return code
		}
		defer closeAudit.Close()
		g, err := approver.Revoke(ctx, local.Temporal, c.Args[0], who, strings.TrimSpace(o.reason))
		var ref *approver.Refusal
		rv := auditstream.GrantRevocation{Grant: c.Args[0], By: who, Via: "cli"}
		if errors.As(err, &ref) {
			rv.Refused = ref.Reason
		}
		if err == nil || ref != nil {
			audit.GrantRevoked(rv)
		}
		if err != nil {
			return failDecision(c, c.Args[0], err)
		}
		fmt.Fprintf(c.Stdout, "%s (as %s): revoked; it had allowed %d call(s) of %s\n", g.ID, who, g.Used, g.Tool)
		return 0
	})
}

// writePrincipalGrants lists the grants across the principal's tasks, when
// its grants workflow runs.
func writePrincipalGrants(ctx context.Context, w io.Writer, tc client.Client, principal string) {
	v, err := tc.QueryWorkflow(ctx, api.PrincipalGrantsID(principal), "", api.QueryGrants)
	var gs []api.Grant
	if err != nil || v.Get(&gs) != nil || len(gs) == 0 {
		return // none: no grants workflow runs for the principal
	}
	writeGrantList(w, "grants across "+principal+"'s tasks:", gs, time.Now())
}

// writeGrants lists a task's grants for airlock tasks show.
func writeGrants(w io.Writer, gs []api.Grant, now time.Time) {
	writeGrantList(w, "grants (airlock approvals revoke GRANT-ID ends one):", gs, now)
}

func writeGrantList(w io.Writer, title string, gs []api.Grant, now time.Time) {
	if len(gs) == 0 {
		return
	}
	fmt.Fprintln(w, title)
	for _, g := range gs {
		line := fmt.Sprintf("  %-8s %s  %s by %s", g.State(now), g.ID, g.Tool, strings.Join(g.GrantedBy, ", "))
		for _, a := range g.Args {
			v := a.Value
			if v == "" {
				v = "absent"
			}
			line += fmt.Sprintf(" %s=%s", a.Path, v)
		}
		line += fmt.Sprintf("; used %d", g.Used)
		if r := g.Remaining(); r != "" {
			line += "; " + r
		}
		if !g.RevokedAt.IsZero() {
			line += fmt.Sprintf("; revoked by %s at %s", g.RevokedBy, g.RevokedAt.Local().Format(time.DateTime))
			if g.Reason != "" {
				line += ": " + g.Reason
			}
		}
		fmt.Fprintln(w, line)
	}
}
