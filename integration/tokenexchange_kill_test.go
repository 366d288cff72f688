package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/internal/identity"
)

// TestHeldGrantSurvivesKill (issue 31 §2): `airlock dev` with an upstream
// that acts as the user with a held grant (offline: true, actor: true),
// against the real OpenID provider in the test. alice and dave, signed in
// for 6 s, each call deploy, which waits for approval; dev is killed with
// SIGKILL and restarted on the same data directory; their tokens expire;
// dave is disabled at the provider; bob approves both. alice's call runs
// once, as alice, with airlock named as actor (a fresh exchange of the
// grant sealed in the task's history, made by the restarted worker, which
// holds the same subject key); dave's does not run (UserGrant). A
// rollback of alice's task then undoes her update, made before the kill,
// as alice too.
func TestHeldGrantSurvivesKill(t *testing.T) {
	t.Parallel()
	p := startExchangeProvider(t)
	up := startTicketsUpstream(t, p.issuer)
	d := counterDev{bin: buildBinary(t, "./cmd/airlock"), dir: t.TempDir()}
	args, base, temporal := d.devArgs(t, "--no-ui")
	resource := base + "/mcp"
	writeFile(t, filepath.Join(d.dir, "desk.yaml"), fmt.Sprintf(`server:
  name: desk
  http:
    url: %s
    auth:
      token_exchange:
        token_url: %s/oauth/token
        client_id: airlock
        client_secret_env: TICKETS_EXCHANGE_SECRET
        audience: tickets
        scopes: [tickets.write]
        actor: true
        offline: true
tools:
  whoami: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}
  deploy:
    side_effects: [write]
    data_access_level: public
    risk: high
    idempotent: true
    approval: {group: ops, timeout: 30m}
  update:
    side_effects: [write]
    data_access_level: public
    risk: low
    idempotent: true
    capture: {tool: whoami, args: {n: "args.n + 100"}}
    compensation: {tool: whoami, args: {n: "args.n + 200"}}
`, up.url, p.issuer))
	writeFile(t, filepath.Join(d.dir, "airlock.yaml"), fmt.Sprintf(`manifests: [desk.yaml]
approvals: {inline_wait: 2s}
principals:
  - {name: bob, roles: [all], api_key_sha256: [%s]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
approver_groups:
  ops: {members: [bob]}
principals_from_tokens:
  resource: %s
  issuers:
    - {issuer: %s, name: corp}
  roles:
    - {roles: [all], when: 'claims.sub != ""'}
`, identity.HashKey("bob-key"), resource, p.issuer))
	key, err := exchange.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{exchange.EnvKey + "=" + exchange.EncodeKey(key.Bytes()), "TICKETS_EXCHANGE_SECRET=exchange-secret"}
	p1 := startDevEnv(t, env, d.bin, args...)
	p1.waitHealthy(t, base)

	toks := map[string]string{}
	for _, who := range []string{"alice", "dave"} {
		toks[who] = p.signIn(t, who, resource, 6*time.Second) // time to call twice before it expires, on a loaded machine
		cs := connectURL(t, resource, map[string]string{"Authorization": "Bearer " + toks[who]})
		n := map[string]int{"alice": 4001, "dave": 4002}[who]
		if who == "alice" { // a compensable call of her task, undone after the restart
			if res := call(t, cs, "desk__update", map[string]any{"n": 5}, ""); res.IsError || text(res) != "update #5 as alice" {
				t.Fatalf("alice's update: %s", text(res))
			}
		}
		// inline_wait 2s: the call answers that it waits for approval.
		if res := call(t, cs, "desk__deploy", map[string]any{"n": n}, ""); !strings.Contains(strings.ToLower(text(res)), "approval") {
			t.Fatalf("%s's deploy: %s; want it waiting for approval", who, text(res))
		}
	}
	c := dialTest(t, temporal, "default")
	local := approver.Local{Temporal: c, Namespace: "default"}
	alice := waitPending(t, local, "4001", nil)
	dave := waitPending(t, local, "4002", nil)
	if !alice.ActsHeld || alice.ActsAs != "alice@corp" {
		t.Fatalf("alice's request: acts as %q, held %v", alice.ActsAs, alice.ActsHeld)
	}

	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.exited
	p2 := startDevEnv(t, env, d.bin, args...)
	p2.waitHealthy(t, base)
	waitFor(t, "the tokens to expire", 15*time.Second, func() bool { return expired(toks["alice"]) && expired(toks["dave"]) })
	p.revoke("dave")

	for _, r := range []api.ApprovalRequest{dave, alice} {
		ar, err := local.Show(context.Background(), r.ID)
		if err != nil || ar.State != api.ApprovalPending {
			t.Fatalf("request %s after the restart: %+v %v", r.ID, ar, err)
		}
		if _, err := local.Decide(context.Background(), approver.Decision{RequestID: r.ID, Approver: "bob", Approve: true, Via: "cli", Digest: ar.Digest}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "alice's deploy to run", time.Minute, func() bool { return len(up.runs("deploy")) > 0 })
	waitFor(t, "dave's call to end, not run", time.Minute, func() bool {
		return strings.Contains(historyOf(t, c, dave.TaskID), "did not run: cannot act as dave@corp")
	})
	if got, act := up.runs("deploy"), up.actorsOf("deploy"); len(got) != 1 || got[0] != "alice" || act[0] != "airlock" {
		t.Fatalf("deploy ran as %v (actors %v); want alice once, act airlock", got, act)
	}
	// The rollback of alice's task, after the restart and her token's
	// expiry, undoes her update as alice, with the held grant sealed in
	// the compensation entry.
	ctx := context.Background()
	rh, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: alice.TaskID, UpdateID: "rb-after-kill",
		UpdateName: api.UpdateRollback, Args: []any{api.RollbackRequest{By: "operator"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	var rb api.RollbackResult
	if err == nil {
		err = rh.Get(ctx, &rb)
	}
	if err != nil || rb.State != api.StateRolledBack || len(rb.Compensated) != 1 {
		t.Fatalf("rollback of alice's task after the restart: %v %+v", err, rb)
	}
	if got, act := up.runs("whoami"), up.actorsOf("whoami"); strings.Join(got, ",") != "alice,alice" || strings.Join(act, ",") != "airlock,airlock" {
		t.Fatalf("capture and compensation ran as %v (actors %v); want alice twice, act airlock", got, act)
	}
	if ah := historyOf(t, c, alice.TaskID); !strings.Contains(ah, `"ActedAs":{"Subject":"alice"`) || !strings.Contains(ah, `"Held":true,"KeyID"`) || !strings.Contains(ah, `"Scopes":["tickets.write"],"Held":true}`) {
		t.Fatalf("alice's task does not record that she acted with the held grant")
	}
	h := historyOf(t, c, dave.TaskID)
	if !strings.Contains(h, "dave@corp") || !strings.Contains(h, "disabled") {
		t.Fatalf("dave's task does not say why it did not run")
	}
	for _, tok := range toks {
		for _, part := range strings.Split(tok, ".") {
			if len(part) >= 16 && (strings.Contains(h, part) || strings.Contains(historyOf(t, c, alice.TaskID), part) || strings.Contains(p2.output(), part) || strings.Contains(p1.output(), part)) {
				t.Fatal("a sign-in token is in a history or dev's output")
			}
		}
	}
}

// historyOf is historyText through the client c.
func historyOf(t *testing.T, c client.Client, task string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, task, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var b strings.Builder
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", task, err)
		}
		payloads(ev.ProtoReflect(), &b)
	}
	return b.String()
}
