package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/expr"
	"github.com/airlock-run/airlock/internal/policy"
)

// maxLockKey bounds a lock's name: it travels in signals and histories.
const maxLockKey = 1024

// lockKeys evaluates the keys of the locks a call of tool takes (issue 16
// §4), sorted by key, each key once (exclusive wins over shared), so that
// every task acquires them in the same order and two tasks cannot
// deadlock. Nil when the tool declares none.
func (c *Catalog) lockKeys(taskID, callID string, principal api.Principal, tool policy.Tool, args json.RawMessage) ([]api.LockKey, error) {
	decl := tool.Decl
	if decl == nil || len(decl.Locks) == 0 {
		return nil, nil
	}
	a, err := expr.JSONValue(args)
	if err != nil {
		return nil, fmt.Errorf("the arguments are not JSON: %w", err)
	}
	vars := map[string]any{"args": a, "call": callVars(taskID, callID, tool.Name), "roots": rootVars(tool.PathRoots),
		"principal": expr.Principal{Name: principal.Name, Roles: principal.Roles}}
	byKey := map[string]string{}
	for i, l := range decl.Locks {
		p, err := expr.CompileString(expr.Lock, l.Key)
		if err == nil {
			var k string
			if k, err = p.EvalString(vars); err == nil && k == "" {
				err = fmt.Errorf("the key is empty")
			} else if err == nil && len(k) > maxLockKey {
				err = fmt.Errorf("the key is %d bytes, more than %d; lock a shorter name (a path, an ID)", len(k), maxLockKey)
			}
			if err == nil {
				mode := string(l.EffectiveMode())
				if byKey[k] != api.LockExclusive {
					byKey[k] = mode
				}
				continue
			}
		}
		return nil, fmt.Errorf("%s: tools.%s.locks[%d] (%s): %w", tool.Server, tool.Upstream, i, l.Key, err)
	}
	out := make([]api.LockKey, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		out = append(out, api.LockKey{Key: k, Mode: byKey[k]})
	}
	return out, nil
}

// decideLocks adds the call's locks to an allowing decision; a key that
// cannot be computed denies the call (check lock), as a capture that
// cannot be computed stops it: the call would run unprotected.
func (a *Activities) decideLocks(cat ToolCatalog, in api.DecideInput, tool policy.Tool, d *api.Verdict) ([]api.LockKey, time.Duration) {
	c, ok := cat.(*Catalog)
	if !ok || d.Effect == api.Deny || tool.Decl == nil || len(tool.Decl.Locks) == 0 {
		return nil, 0
	}
	keys, err := c.lockKeys(in.TaskID, in.CallID, in.Principal, tool, in.Arguments)
	if err != nil {
		*d = api.Verdict{Effect: api.Deny, Check: api.CheckLock, Version: d.Version,
			Reason: fmt.Sprintf("denied: the locks of %s could not be computed (%v); nothing ran. Fix the arguments or the manifest's locks", in.Tool, err)}
		return nil, 0
	}
	return keys, tool.Decl.EffectiveLockTimeout()
}

// Locks are the activities of resource locks that need a Temporal client.
type Locks struct {
	Client client.Client
}

// RequestLock delivers a request to its key's lock workflow, starting the
// workflow if it is not running (SignalWithStart: atomic, so two tasks
// asking at once meet one lock workflow).
func (l *Locks) RequestLock(ctx context.Context, req api.LockRequest) error {
	if l.Client == nil {
		return temporal.NewNonRetryableApplicationError("this worker has no Temporal client for locks", api.ErrTypeInternal, nil)
	}
	_, err := l.Client.SignalWithStartWorkflow(ctx, api.LockWorkflowID(req.Key), api.SignalLockRequest, req,
		client.StartWorkflowOptions{ID: api.LockWorkflowID(req.Key), TaskQueue: activity.GetInfo(ctx).TaskQueue,
			StaticSummary: "lock " + req.Key},
		api.LockWorkflowName, api.LockInput{Key: req.Key})
	return err
}

// LockOwnersClosed reports which owners' task runs are no longer running
// (completed, failed, terminated, timed out, continued as new): their locks
// will never be released by them.
func (l *Locks) LockOwnersClosed(ctx context.Context, in api.LockOwnersInput) (api.LockOwnersOutput, error) {
	var out api.LockOwnersOutput
	if l.Client == nil {
		return out, temporal.NewNonRetryableApplicationError("this worker has no Temporal client for locks", api.ErrTypeInternal, nil)
	}
	for _, o := range in.Owners {
		d, err := l.Client.DescribeWorkflowExecution(ctx, o.WorkflowID, o.RunID)
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			out.Closed = append(out.Closed, o.ID())
		case err != nil:
			return out, err
		case d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			out.Closed = append(out.Closed, o.ID())
		}
	}
	return out, nil
}
