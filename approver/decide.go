package approver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/airlock-run/airlock/api"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// TaskOf returns the task ID of an approval request ID ("<task>~<call>").
func TaskOf(requestID string) (string, error) {
	task, _, ok := api.SplitRequestID(requestID)
	if !ok {
		return "", fmt.Errorf("%q is not an approval request ID (they look like task-1a2b~call-3c4d)", requestID)
	}
	return task, nil
}

// Deliver sends one decision to the task that owns the request, as the
// Update "decide". updateID makes it idempotent: a redelivered click with
// the same ID gets the first answer and changes nothing. The workflow's
// validator decides whether the decision counts; its refusal comes back as
// the error, worded for the person who decided.
//
// A repeat of an Update ID already answered (a replayed webhook, the same
// CLI command run twice, a Slack click redelivered to another replica)
// comes back as a *RepeatedError: the first delivery recorded the vote,
// this one nothing. Every channel tells it apart this way, so each real
// decision is reported (and audited) as recorded exactly once.
func Deliver(ctx context.Context, c client.Client, updateID string, d api.DecideRequest) (api.DecideResult, error) {
	task, err := TaskOf(d.RequestID)
	if err != nil {
		return api.DecideResult{}, err
	}
	d.Nonce = newNonce()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: task, UpdateID: updateID, UpdateName: api.UpdateDecide,
		Args: []any{d}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res api.DecideResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) && !taskExists(ctx, c, task) {
			err = &NoTaskError{Task: task}
		}
		return res, fmt.Errorf("decision on %s not recorded: %w", d.RequestID, err)
	}
	if res.Nonce != "" && res.Nonce != d.Nonce {
		return res, &RepeatedError{Result: res}
	}
	return res, nil
}

// RepeatedError is a decision Temporal answered with an earlier
// delivery's outcome (the same Update ID): nothing new was recorded.
type RepeatedError struct{ Result api.DecideResult }

func (e *RepeatedError) Error() string {
	r := e.Result
	return fmt.Sprintf("%s already %s request %s (it is %s now); a decision is recorded once, and this repeat recorded nothing",
		r.Approver, pastVerdict(r.Approve), r.RequestID, r.State)
}

func pastVerdict(approve bool) string {
	if approve {
		return "approved"
	}
	return "denied"
}

func newNonce() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail
	return hex.EncodeToString(b)
}

// Explain words a delivery error for the person who decided: the task's
// own refusal (the decide validator's message) when there is one. Slack's
// replies and the local decider's refusals use these words.
func Explain(err error) string {
	var nf *serviceerror.NotFound
	var ae *temporal.ApplicationError
	var nt *NoTaskError
	switch {
	case errors.As(err, &ae):
		return ae.Message()
	case errors.As(err, &nt):
		return "no task " + nt.Task + " exists, so there is no such request to decide (check the request ID)"
	case errors.As(err, &nf):
		return "its task has ended, so the request can no longer be decided"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "airlock did not answer in time (is a worker running?); try again, or use `airlock approvals`"
	}
	return "airlock could not deliver it (" + err.Error() + "); try again, or use `airlock approvals`"
}

// NoTaskError is a decision on a request whose task never existed (a
// mistyped or forged request ID), as opposed to one whose task has ended:
// Temporal answers both Updates with NotFound.
type NoTaskError struct{ Task string }

func (e *NoTaskError) Error() string { return "no task " + e.Task + " exists" }

// taskExists tells a task that has ended (Describe still finds it, until
// the namespace's retention removes it) from one that never existed. Any
// other answer counts as existing, so the refusal stays "ended".
func taskExists(ctx context.Context, c client.Client, task string) bool {
	_, err := c.DescribeWorkflowExecution(ctx, task, "")
	var nf *serviceerror.NotFound
	return !errors.As(err, &nf)
}

// Lookup returns one request, as its task holds it now.
func Lookup(ctx context.Context, c client.Client, requestID string) (api.ApprovalRequest, error) {
	task, err := TaskOf(requestID)
	if err != nil {
		return api.ApprovalRequest{}, err
	}
	reqs, err := requestsOf(ctx, c, task)
	if err != nil {
		return api.ApprovalRequest{}, err
	}
	for _, r := range reqs {
		if r.ID == requestID {
			return r, nil
		}
	}
	return api.ApprovalRequest{}, fmt.Errorf("task %s has no approval request %s", task, requestID)
}

// PendingQuery is the visibility query for running tasks waiting for an
// approval.
var PendingQuery = fmt.Sprintf("%s = '%s' AND ExecutionStatus = 'Running'", api.SAApproval.GetName(), api.ApprovalPending)

// CountPending counts the running tasks waiting for at least one approval
// (one visibility count, no query per task), for the
// airlock_approvals_pending gauge.
func CountPending(ctx context.Context, c client.Client, namespace string) (int64, error) {
	resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: PendingQuery})
	if err != nil {
		return 0, fmt.Errorf("counting tasks waiting for approval: %w", err)
	}
	return resp.GetCount(), nil
}

// Pending lists the requests waiting for a decision, across every task
// whose AirlockApproval attribute says it waits, oldest first.
func Pending(ctx context.Context, c client.Client, namespace string) ([]api.ApprovalRequest, error) {
	q := PendingQuery
	var out []api.ApprovalRequest
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: q, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("listing tasks waiting for approval: %w", err)
		}
		for _, ex := range resp.GetExecutions() {
			reqs, err := requestsOf(ctx, c, ex.GetExecution().GetWorkflowId())
			if err != nil {
				continue // ended meanwhile
			}
			for _, r := range reqs {
				if r.State == api.ApprovalPending {
					out = append(out, r)
				}
			}
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RequestedAt.Before(out[j].RequestedAt) })
	return out, nil
}

func requestsOf(ctx context.Context, c client.Client, task string) ([]api.ApprovalRequest, error) {
	v, err := c.QueryWorkflow(ctx, task, "", api.QueryApprovals)
	if err != nil {
		return nil, fmt.Errorf("reading approval requests of task %s: %w", task, err)
	}
	var reqs []api.ApprovalRequest
	if err := v.Get(&reqs); err != nil {
		return nil, errors.New("decoding approval requests of task " + task + ": " + err.Error())
	}
	return reqs, nil
}
