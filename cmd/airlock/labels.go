package main

// airlock tasks reset-labels (issue 30 §2): an operator clears a task's
// information-flow labels, with a reason, recorded in the task's history
// (the reset_labels Update, with who and why) and in the audit stream.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
)

const tasksResetLabelsLong = `Resets the task's information-flow labels (read_level, untrusted, egress:
what policy rules see as task.read_level, task.untrusted and task.egress) to
none. --reason is required. The reset is recorded in the task's history (who,
why and what it cleared: airlock audit show) and in the audit stream (a
labels_reset line): --audit-log, else the stream of the airlock dev serving
this Temporal; pass --audit-log off to reset without one.

Only an operator can lower labels: no call, argument or _meta of an agent does.
Reset them when what the task read or ingested no longer matters (a person has
reviewed it), not to let a call through that a rule holds for approval.

` + talksToDev

// operator is who runs this command, as the history and the audit stream
// record it.
func operator() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if n := os.Getenv("USER"); n != "" {
		return n
	}
	return "operator"
}

func tasksResetLabels(c *Call, o *tasksOptions) int {
	id, code := taskID(c)
	if code != 0 {
		return code
	}
	req := api.ResetLabelsRequest{By: operator(), Reason: strings.TrimSpace(o.reason)}
	if req.Reason == "" {
		return c.usage("--reason is required: say why the labels may be reset")
	}
	if err := req.Check(); err != nil {
		return c.usage("%v", err)
	}
	return o.withTemporal(c, func(ctx context.Context, tc client.Client) int {
		audit, closeAudit, err := o.labelsAudit(ctx, c, tc)
		if err != nil {
			return c.failOn(id, err)
		}
		defer closeAudit.Close()
		res, err := resetLabels(ctx, tc, id, req)
		line := auditstream.LabelsReset{Task: id, By: req.By, Reason: req.Reason}
		if err != nil {
			line.Refused = err.Error()
			audit.LabelsReset(line)
			return c.failOn(id, err)
		}
		line.Before = res.Before.String()
		audit.LabelsReset(line)
		if o.asJSON {
			printJSON(c.Stdout, res)
			return 0
		}
		fmt.Fprintf(c.Stdout, "%s: labels reset by %s; they were: %s\n", id, req.By, res.Before.String())
		return 0
	})
}

// resetLabels sends the reset_labels Update and waits for its result.
func resetLabels(ctx context.Context, tc client.Client, id string, req api.ResetLabelsRequest) (api.ResetLabelsResult, error) {
	var res api.ResetLabelsResult
	// Asked first, rather than read from the Update's refusal (the SDK's
	// "unknown update" has no error type of its own).
	st, err := queryStatus(ctx, tc, id)
	if err != nil {
		return res, err
	}
	if st.Labels == nil {
		return res, fmt.Errorf("task %s keeps no labels (it was started before airlock kept them, or it is a plan): nothing to reset", id)
	}
	h, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: api.UpdateResetLabels,
		Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(ctx, &res)
	}
	return res, err
}

// labelsAudit opens the audit stream for the reset: --audit-log, else
// the one the airlock dev serving tc's Temporal writes.
func (o *tasksOptions) labelsAudit(ctx context.Context, c *Call, tc client.Client) (*auditstream.Log, io.Closer, error) {
	dest := o.auditLog
	if dest == "" {
		_, dest = runningDev(ctx, tc, o.conn.namespace)
	}
	if dest == "" {
		return nil, nil, errors.New("no audit stream found for this Temporal (no airlock dev serves it); pass --audit-log FILE, or --audit-log off to reset without one")
	}
	l, closer, err := auditstream.Open(dest, c.Stdout, c.Stderr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (pass --audit-log off to reset without auditing)", err)
	}
	return l, closer, nil
}
