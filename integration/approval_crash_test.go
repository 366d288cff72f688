package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/identity"
)

// TestApprovalSurvivesCrash: `airlock dev` posts an approval request to
// (a fake) Slack and is killed with SIGKILL while the call waits; after a
// restart on the same data dir the request is still pending, the approver's
// signed Slack click on the message posted before the crash is accepted by
// the restarted process, the call runs exactly once, and the reattached
// agent collects the result.
func TestApprovalSurvivesCrash(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess crash test; skipped with -short")
	}
	bin := buildBinary(t, "./cmd/airlock")
	upstreamBin := buildBinary(t, "./integration/testupstream")
	dir := t.TempDir()
	effects := newEffectsLog(t)
	slackAPI := newFakeSlackAPI(t)
	env := []string{"SLACK_BOT_TOKEN=xoxb-crash-test", "SLACK_SIGNING_SECRET=" + slackSecret}
	writeFile(t, filepath.Join(dir, "counter.yaml"), fmt.Sprintf(`server:
  name: counter
  stdio:
    command: %s
    env: {SIDE_EFFECT_LOG: %s}
%stools:
  append:
    side_effects: [write]
    data_access_level: internal
    risk: high
    approval: {group: ops, timeout: 30m}
`, upstreamBin, effects, effectsSandbox(effects)))
	writeFile(t, filepath.Join(dir, "airlock.yaml"), `manifests: [counter.yaml]
approvals: {inline_wait: 2s}
principals:
  - {name: alice, roles: [all], api_key_sha256: [`+identity.HashKey("alice-key")+`]}
  - {name: bob, roles: [all], api_key_sha256: [`+identity.HashKey("bob-key")+`], slack_user_id: U_BOB}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
approver_groups:
  ops: {members: [bob], slack_channel: C_OPS}
slack:
  api_url: `+slackAPI.srv.URL+`/
`)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tport := freePort(t)
	args := []string{"--config", filepath.Join(dir, "airlock.yaml"), "--data-dir", filepath.Join(dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(tport), "--log-format", "json"}
	base := "http://" + listen

	p1 := startDevEnv(t, env, bin, args...)
	p1.waitHealthy(t, base)
	cs := connectURL(t, base+"/mcp", bearer("alice-key"))
	waitTools(t, cs, "counter__append")
	res := call(t, cs, "counter__append", map[string]any{"key": "crash"}, "approve-me")
	sc, _ := res.StructuredContent.(map[string]any)
	reqID, _ := sc["approval_request"].(string)
	task, _ := res.Meta[gateway.MetaTask].(string)
	if res.IsError || reqID == "" {
		t.Fatalf("pending result: isError=%v %q", res.IsError, text(res))
	}

	post := slackAPI.waitPost(t, 1)
	b := buttonsOf(t, post)
	if b.request != reqID || b.channel != "C_OPS" {
		t.Fatalf("posted request %+v, want %s in C_OPS", b, reqID)
	}
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.exited

	p2 := startDevEnv(t, env, bin, args...)
	p2.waitHealthy(t, base)
	c := dialTest(t, fmt.Sprintf("127.0.0.1:%d", tport), "default")
	ctx := context.Background()
	ar, err := approver.Lookup(ctx, c, reqID)
	if err != nil || ar.State != api.ApprovalPending {
		t.Fatalf("request after restart: %+v %v", ar, err)
	}
	clickAt(t, base, "U_BOB", "approve", b)
	waitFor(t, "the click to be recorded", 30*time.Second, func() bool {
		ar, err := approver.Lookup(ctx, c, reqID)
		return err == nil && ar.State == api.ApprovalApproved && len(ar.Votes) == 1 && ar.Votes[0].Via == "slack"
	})

	cs2 := connectURL(t, base+"/mcp", map[string]string{"Authorization": "Bearer alice-key", gateway.HeaderTask: task})
	waitTools(t, cs2, "counter__append")
	var out *mcp.CallToolResult
	waitUntil(t, "the result after approval", 60*time.Second, func() error {
		out = call(t, cs2, gateway.ToolAwait, map[string]any{"call": "k-approve-me"}, "")
		if out.IsError || strings.Contains(text(out), "still running") || strings.Contains(text(out), "waiting") {
			return fmt.Errorf("await answered %q", text(out))
		}
		return nil
	})
	if !strings.Contains(mustJSON(t, out.StructuredContent), `"count":1`) {
		t.Fatalf("result after approval: %q %v", text(out), out.StructuredContent)
	}
	if n := sideEffects(t, effects, "append", "crash"); n != 1 {
		t.Fatalf("the approved call ran %d times, want 1", n)
	}
}
