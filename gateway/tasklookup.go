package gateway

// Which task a request acts on: the task bound to its session, the one
// its signed session ID or Airlock-Task header names, or the principal's
// default task (taskFor), each once authorizeTask (owner.go) has let the
// caller touch it.

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
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

// taskHint is what a request's tool arguments say about its task: the
// task argument of airlock_await, airlock_status and airlock_rollback,
// and the idempotency key of the call or program (or of the call awaited).
type taskHint struct {
	task, key string
}

// taskFor returns the task of the session making req, once the caller is
// known to own it (authorizeTask):
//   - the task bound to the session (at initialize, or at its first call);
//   - for stateless HTTP requests (no session of their own), the task the
//     signed session ID names, the Airlock-Task header, the request's
//     _meta "airlock.dev/task" or the tool's task argument (not one
//     reserved for another principal, see api.ClaimTaskID); else, naming
//     none, a task of its own (unnamedTask), or the principal's default
//     task api.DefaultTaskID ("<principal>-default") when
//     gateway.unnamed_calls is principal_task;
//   - for a connection without HTTP headers (stdio, in-memory) that skipped
//     initialize (protocol 2026-07-28), a task bound to the connection now.
func (g *Gateway) taskFor(ctx context.Context, req *mcp.CallToolRequest, principal string, hint taskHint) (taskRef, error) {
	t, err := g.resolveTask(req, principal, hint)
	if err != nil {
		return taskRef{}, err
	}
	if t.exists, err = g.authorizeTask(ctx, t.id, principal); err != nil {
		return taskRef{}, err
	}
	return t, nil
}

// resolveTask names the task of req (see taskFor), not yet authorized.
func (g *Gateway) resolveTask(req *mcp.CallToolRequest, principal string, hint taskHint) (taskRef, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.sessions[req.Session]; ok {
		if s.principal != "" {
			if err := ownSession(s.principal, principal); err != nil {
				return taskRef{}, err
			}
		}
		if t := strings.TrimSpace(hint.task); t != "" && t != s.taskID {
			return taskRef{}, fmt.Errorf("argument task: this session's task is %s, not %s; a session acts on its own task (open another session with the %s header to act on another)", s.taskID, t, HeaderTask)
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
		for _, n := range []struct{ where, id string }{
			{"header " + HeaderTask, strings.TrimSpace(req.Extra.Header.Get(HeaderTask))},
			{"_meta " + MetaTask, metaTask(req)},
			{"argument task", strings.TrimSpace(hint.task)},
		} {
			if n.id == "" {
				continue
			}
			if !taskIDAllowed(n.id, principal) {
				return taskRef{}, badTaskID(n.where, n.id)
			}
			if err := api.ClaimTaskID(n.id, principal); err != nil {
				return taskRef{}, fmt.Errorf("%s: %w", n.where, err)
			}
			return taskRef{id: n.id, named: n.id != api.DefaultTaskID(principal)}, nil
		}
		// A retry that answers an input-required result carries the
		// requestState this gateway signed: it resumes that call, in
		// the task that state names (resumeState checks the rest).
		if t, ok := g.askStateTask(req, principal); ok {
			return t, nil
		}
		return g.unnamedTask(principal, hint.key), nil
	}
	s := g.bindLocked(req.Session, g.newSessionTaskLocked(nil), principal)
	s.named = g.stdioTask != "" && s.taskID == g.stdioTask
	return taskRef{id: s.taskID, client: s.client, named: s.named}, nil
}

// askStateTask is the task of the call whose input-required result a
// stateless request answers, when its requestState is this gateway's and
// was issued to the same principal.
func (g *Gateway) askStateTask(req *mcp.CallToolRequest, principal string) (taskRef, bool) {
	if req.Params == nil || req.Params.RequestState == "" {
		return taskRef{}, false
	}
	st, err := g.decodeAskState(req.Params.RequestState)
	if err != nil || st.Principal != principal || !taskIDAllowed(st.Task, principal) {
		return taskRef{}, false
	}
	return taskRef{id: st.Task, named: true}, true
}

// metaTask is the task a request's _meta names ("airlock.dev/task", the
// key its results carry), or "".
func metaTask(req *mcp.CallToolRequest) string {
	if req.Params == nil || req.Params.Meta == nil {
		return ""
	}
	s, _ := req.Params.Meta[MetaTask].(string)
	return strings.TrimSpace(s)
}

// unnamedTask is the task of a stateless request that names none. With
// gateway.unnamed_calls principal_task, every such request of a principal
// shares <principal>-default. Else (default) each gets a task of its own,
// so that separate agents of one principal never share a task's state,
// budget, locks and history by accident: a fresh one, or, for a request
// with an idempotency key (a call's, a program's, the key of the call
// airlock_await waits for), the one that key and principal name, so a
// retry with the key lands in the task that ran it and does not run again.
// That ID is an HMAC under the gateway's session key (every replica has the
// same), so no one can name another's keyed task ahead of it.
func (g *Gateway) unnamedTask(principal, key string) taskRef {
	if g.opts.SharedUnnamedTask {
		return taskRef{id: api.DefaultTaskID(principal)}
	}
	if key == "" {
		return taskRef{id: newTaskID()}
	}
	mac := hmac.New(sha256.New, g.sessionKey)
	mac.Write([]byte("unnamed-task\x00"))
	// The principal's length first: no two (principal, key) pairs
	// write the same bytes.
	mac.Write(binary.BigEndian.AppendUint32(nil, uint32(len(principal))))
	mac.Write([]byte(principal))
	mac.Write([]byte(key))
	// named: two retries of the key may arrive at once; the first call
	// creates the task (claimTask), as for a task a client names.
	return taskRef{id: "task-k" + hex.EncodeToString(mac.Sum(nil)[:12]), named: true}
}

// keyOfCall is the idempotency key a call or program ID was made from
// (api.CallIDForKey, ProgramIDForKey), or "".
func keyOfCall(id string) string {
	if k, ok := api.KeyOfCallID(strings.TrimPrefix(id, programPrefix)); ok {
		return k
	}
	return ""
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
