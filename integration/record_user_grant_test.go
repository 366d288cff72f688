package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/exchange"
)

// TestRecordUserGrantHistory records a task whose calls act as their user
// with a held grant (changeUserGrant; issue 31 §2), through the gateway
// against the real OpenID provider: alice, signed in for 3 s, calls
// desk__update (its capture and call as alice), then desk__deploy, which
// waits for approval past her token's expiry and runs with a fresh
// exchange of the held grant; a rollback then runs update's compensation
// as alice, with the held grant too. With -record it writes
// user_grant_v1_run1.json.
func TestRecordUserGrantHistory(t *testing.T) {
	const resource = "https://airlock.test/mcp"
	p := startExchangeProvider(t)
	up := startTicketsUpstream(t, p.issuer)
	t.Setenv("TICKETS_EXCHANGE_SECRET", "exchange-secret")
	key, err := exchange.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	s := heldGrantStack(t, p, up, stackOptions{subjectKey: key})
	tok := p.signIn(t, "alice", resource, 3*time.Second)
	cs := connectURL(t, s.url, map[string]string{"Authorization": "Bearer " + tok})
	res := call(t, cs, "desk__update", map[string]any{"n": 1}, "")
	if res.IsError || text(res) != "update #1 as alice" {
		t.Fatalf("update: %s", text(res))
	}
	taskID, _ := res.Meta[gateway.MetaTask].(string)
	pending := callAsync(cs, "desk__deploy", map[string]any{"n": 3001})
	local := approver.Local{Temporal: s.client, Namespace: s.srv.Namespace()}
	r := waitPending(t, local, "3001", nil)
	waitFor(t, "the token to expire", 10*time.Second, func() bool { return expired(tok) })
	if _, err := local.Decide(context.Background(), approver.Decision{RequestID: r.ID, Approver: "carol", Approve: true, Via: "cli", Digest: r.Digest[:12]}); err != nil {
		t.Fatal(err)
	}
	if got := <-pending; got.err != nil || got.res.IsError || text(got.res) != "deploy #3001 as alice" {
		t.Fatalf("deploy: %v %s", got.err, resText(got.res))
	}
	ctx := context.Background()
	h, err := s.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: taskID, UpdateID: "rb-" + uuid.NewString(),
		UpdateName: api.UpdateRollback, Args: []any{api.RollbackRequest{By: "recorder"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	var rb api.RollbackResult
	if err == nil {
		err = h.Get(ctx, &rb)
	}
	if err != nil || rb.State != api.StateRolledBack {
		t.Fatalf("rollback: %v %+v", err, rb)
	}
	if got := up.runs("whoami"); strings.Join(got, ",") != "alice,alice" {
		t.Fatalf("capture and compensation ran as %v", got)
	}
	desc, err := s.client.DescribeWorkflowExecution(ctx, taskID, "")
	if err != nil {
		t.Fatal(err)
	}
	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "user_grant_v1")
}

func resText(r *mcp.CallToolResult) string {
	if r == nil {
		return "<nil>"
	}
	return text(r)
}
