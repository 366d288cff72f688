package gateway

// Who may touch a task: its owner, the principal that started it, and no
// one else. authorizeTask is the one place that decides it; every path
// that names a task (the Airlock-Task header, a session bound here or
// signed elsewhere, tasks/get, the built-in and state tools, rollback,
// airlock_await and MRTR resumption) asks it before it reads or answers
// anything of the task. The workflow's validators refuse another
// principal too, but they do not run for an Update ID the task already
// answered, nor for queries.
//
// A task's owner never changes (the reuse policy rejects a second run
// with the same ID, until retention deletes the ended task), so each
// replica remembers the owners it learned from DescribeWorkflowExecution
// (the AirlockPrincipal search attribute, set at the start) for ownerTTL
// and checks a known task with a map lookup. A task that does
// not exist yet is the caller's to create; readers answer that there is
// nothing yet without reading (it may appear a moment later, someone
// else's), and a call creates a task named by its client before sending
// its Update (claimTask), so that an Update ID of another principal's
// task that appeared meanwhile is never answered.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/airlock-run/airlock/api"
)

// errNotYourTask is the refusal of a task of another principal. It says
// no more than that: not who owns it, not its state, not its calls.
type errNotYourTask struct{ task string }

func (e errNotYourTask) Error() string {
	return fmt.Sprintf("task %s belongs to another principal: you may not attach to it, call in it or read it; "+
		"connect without the %s header for a task of your own, or name a task ID nobody uses", e.task, HeaderTask)
}

// maxKnownOwners bounds the owners a replica remembers; past it the
// memory starts over (a refetch costs one DescribeWorkflowExecution).
const maxKnownOwners = 100_000

// ownerTTL is how long a replica trusts an owner it learned: far less
// than any namespace retention (at least a day), after which an ended
// task's ID could be started again by someone else.
const ownerTTL = 10 * time.Minute

// owners remembers the owner of each task this replica has described.
type owners struct {
	mu sync.Mutex
	m  map[string]knownOwner
}

type knownOwner struct {
	principal string
	until     time.Time
}

func (o *owners) get(task string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k, ok := o.m[task]
	if !ok || time.Now().After(k.until) {
		return "", false
	}
	return k.principal, true
}

func (o *owners) put(task, owner string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil || len(o.m) >= maxKnownOwners {
		o.m = map[string]knownOwner{}
	}
	o.m[task] = knownOwner{principal: owner, until: time.Now().Add(ownerTTL)}
}

// authorizeTask establishes that principal may touch task: nil when the
// task is principal's (exists true) or does not exist yet (exists false:
// the caller is about to create it, or there is nothing to read), an
// errNotYourTask when it is another principal's or no principal's (a
// workflow that is no airlock task), or an error when Temporal cannot
// say. Owners are compared as whole strings: alice@corp@ext is not
// alice@corp.
func (g *Gateway) authorizeTask(ctx context.Context, task, principal string) (exists bool, err error) {
	if owner, ok := g.owners.get(task); ok {
		if owner != principal {
			return true, errNotYourTask{task}
		}
		return true, nil
	}
	desc, err := g.opts.Temporal.DescribeWorkflowExecution(ctx, task, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("could not check who owns task %s: %w; try again", task, err)
	}
	owner := taskOwner(desc.GetWorkflowExecutionInfo().GetSearchAttributes())
	if owner != "" {
		g.owners.put(task, owner)
	}
	if owner == "" || owner != principal {
		return true, errNotYourTask{task}
	}
	return true, nil
}

// claimTask starts a task its client named (and authorizeTask found
// absent) before the call's Update is sent, and refuses another
// principal's task started meanwhile. Update-with-Start alone would join
// a task started between the check and the call, and answer an Update ID
// that task already completed (a replayed idempotency key) before any
// validator runs.
func (g *Gateway) claimTask(ctx context.Context, start client.StartWorkflowOptions, in api.TaskInput) error {
	start.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
	start.WorkflowExecutionErrorWhenAlreadyStarted = true
	run, err := g.opts.Temporal.ExecuteWorkflow(ctx, start, api.AgentTaskName, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		g.owners.put(start.ID, in.Principal)
		g.running.Store(start.ID, run.GetRunID())
		return nil
	case errors.As(err, &started):
		// Started since the check (or ended before it was described
		// here): whose is it?
		if _, err := g.authorizeTask(ctx, start.ID, in.Principal); err != nil {
			return err
		}
		return nil
	default:
		return fmt.Errorf("could not start task %s: %w", start.ID, err)
	}
}

// taskIDAllowed says whether a client may name id as principal's task:
// an ID of the usual shape, or principal's own default task (whose name
// carries the principal's, which may hold characters the shape does not
// allow, such as the @ of a token principal).
func taskIDAllowed(id, principal string) bool {
	return taskIDPattern.MatchString(id) || id == api.DefaultTaskID(principal)
}

// badTaskID is the refusal of a task ID of the wrong shape, named by what.
func badTaskID(what, id string) error {
	return fmt.Errorf("%s: %q is not a task ID: use letters, digits and . _ : - (at most 128)", what, strings.TrimSpace(id))
}

// taskOwner reads the AirlockPrincipal search attribute.
func taskOwner(sa *commonpb.SearchAttributes) string {
	p, ok := sa.GetIndexedFields()[api.SAPrincipal.GetName()]
	if !ok {
		return ""
	}
	var owner string
	_ = converter.GetDefaultDataConverter().FromPayload(p, &owner)
	return owner
}
