package gateway

// Which task a request acts on: the task bound to its session, the one
// its signed session ID or Airlock-Task header names, or the principal's
// default task (taskFor), each once authorizeTask (owner.go) has let the
// caller touch it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/airlock-run/airlock/api"
)

// checkReattach refuses to attach to a task of another principal
// (authorizeTask), or to one of the caller's that has ended.
func (g *Gateway) checkReattach(ctx context.Context, taskID, principal string) error {
	exists, err := g.authorizeTask(ctx, taskID, principal)
	if err != nil || !exists {
		return err // not exists: a new task with the client's chosen ID
	}
	desc, err := g.opts.Temporal.DescribeWorkflowExecution(ctx, taskID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return nil // known here as the caller's, yet not found: nothing has ended
	case err != nil:
		return fmt.Errorf("looking up task %s: %w", taskID, err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING &&
		st != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
		return fmt.Errorf("task %s has ended (%s); connect without the %s header to start a new task", taskID, strings.ToLower(st.String()), HeaderTask)
	}
	return nil
}

// taskRef is the task a request acts on, once authorizeTask has let it.
type taskRef struct {
	id, client string
	// exists: the task exists (and is the caller's); else it does not
	// exist yet, and there is nothing of it to read.
	exists bool
	// named: its client chose the ID (Airlock-Task), so that another
	// client may name it too; a call creates such a task first
	// (claimTask).
	named bool
}

// taskFor returns the task of the session making req, once the caller is
// known to own it (authorizeTask):
//   - the task bound to the session (at initialize, or at its first call);
//   - for stateless HTTP requests (no session of their own), the task the
//     signed session ID names, or the Airlock-Task header (not one
//     reserved for another principal, see api.ClaimTaskID), else the
//     principal's default task api.DefaultTaskID ("<principal>-default");
//   - for a connection without HTTP headers (stdio, in-memory) that skipped
//     initialize (protocol 2026-07-28), a task bound to the connection now.
func (g *Gateway) taskFor(ctx context.Context, req *mcp.CallToolRequest, principal string) (taskRef, error) {
	t, err := g.resolveTask(req, principal)
	if err != nil {
		return taskRef{}, err
	}
	if t.exists, err = g.authorizeTask(ctx, t.id, principal); err != nil {
		return taskRef{}, err
	}
	return t, nil
}

// resolveTask names the task of req (see taskFor), not yet authorized.
func (g *Gateway) resolveTask(req *mcp.CallToolRequest, principal string) (taskRef, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.sessions[req.Session]; ok {
		if s.principal != "" {
			if err := ownSession(s.principal, principal); err != nil {
				return taskRef{}, err
			}
		}
		return taskRef{id: s.taskID, client: s.client, named: s.named}, nil
	}
	if req.Extra != nil && req.Extra.Header != nil {
		// A session made on another replica (or before a restart, or
		// closed since): its signed ID names its task and principal.
		if sid := req.Extra.Header.Get(headerSessionID); sid != "" {
			t, err := g.ownedSession(sid, principal)
			if err != nil {
				return taskRef{}, err
			}
			if !taskIDAllowed(t.task, principal) {
				return taskRef{}, badTaskID("header "+HeaderTask, t.task)
			}
			if err := api.ClaimTaskID(t.task, principal); err != nil {
				return taskRef{}, fmt.Errorf("header %s: %w", HeaderTask, err)
			}
			return taskRef{id: t.task, named: t.task != sessionTaskID(t.raw)}, nil
		}
		if h := strings.TrimSpace(req.Extra.Header.Get(HeaderTask)); h != "" {
			if !taskIDAllowed(h, principal) {
				return taskRef{}, badTaskID("header "+HeaderTask, h)
			}
			if err := api.ClaimTaskID(h, principal); err != nil {
				return taskRef{}, fmt.Errorf("header %s: %w", HeaderTask, err)
			}
			return taskRef{id: h, named: h != api.DefaultTaskID(principal)}, nil
		}
		return taskRef{id: api.DefaultTaskID(principal)}, nil
	}
	s := g.bindLocked(req.Session, g.newSessionTaskLocked(nil), principal)
	s.named = g.stdioTask != "" && s.taskID == g.stdioTask
	return taskRef{id: s.taskID, client: s.client, named: s.named}, nil
}

// newSessionTaskLocked picks the task of a new connection-bound session.
func (g *Gateway) newSessionTaskLocked(extra *mcp.RequestExtra) string {
	if (extra == nil || extra.Header == nil) && g.stdioTask != "" {
		return g.stdioTask
	}
	return newTaskID()
}

func newTaskID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "task-" + hex.EncodeToString(b[:])
}
