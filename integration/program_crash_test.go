package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/identity"
)

// TestProgramApprovalSurvivesCrash: a program's second call waits for
// approval in Slack when `airlock dev` is killed with SIGKILL; after a
// restart on the same data dir the approver's click on the message posted
// before the crash is accepted, the program continues where it was, and
// the agent collects its result by the program's key. The upstream's
// effect log shows each of the program's three calls once.
func TestProgramApprovalSurvivesCrash(t *testing.T) {
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
  put: {side_effects: [write], data_access_level: internal, risk: medium, idempotent: true}
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
	args := []string{"--config", filepath.Join(dir, "airlock.yaml"), "--data-dir", filepath.Join(dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(freePort(t)), "--log-format", "json"}
	base := "http://" + listen
	const src = `counter.put(key="p-before")
r = counter.append(key="p-approved")
counter.put(key="p-after")
result = {"appended": r}
`

	p1 := startDevEnv(t, env, bin, args...)
	p1.waitHealthy(t, base)
	cs := connectURL(t, base+"/mcp", bearer("alice-key"))
	waitTools(t, cs, "counter__append", gateway.ToolRunProgram)
	res, sc := runProgram(t, cs, src, false, "crash-prog")
	task, _ := res.Meta[gateway.MetaTask].(string)
	program, _ := sc["call"].(string)
	if res.IsError || sc["status"] != "pending" || sc["approval_request"] == nil || program == "" {
		t.Fatalf("program before approval: isError=%v %s %v; want it pending on the approval", res.IsError, text(res), sc)
	}
	post := slackAPI.waitPost(t, 1)
	b := buttonsOf(t, post)
	if b.request != sc["approval_request"] {
		t.Fatalf("posted request %+v, want %v", b, sc["approval_request"])
	}
	if !strings.Contains(mustJSON(t, post), program) {
		t.Errorf("the Slack message does not say which program asks: %s", mustJSON(t, post))
	}
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.exited

	p2 := startDevEnv(t, env, bin, args...)
	p2.waitHealthy(t, base)
	clickAt(t, base, "U_BOB", "approve", b)

	cs2 := connectURL(t, base+"/mcp", map[string]string{"Authorization": "Bearer alice-key", gateway.HeaderTask: task})
	waitTools(t, cs2, gateway.ToolRunProgram)
	var out *mcp.CallToolResult
	waitUntil(t, "the program's result after approval", 90*time.Second, func() error {
		var osc map[string]any
		// The agent's retry of the same program with the same key.
		out, osc = runProgram(t, cs2, src, false, "crash-prog")
		if osc["outcome"] != "ok" {
			return fmt.Errorf("retry answered %q", text(out))
		}
		return nil
	})
	if got := mustJSON(t, out.StructuredContent); !strings.Contains(got, `"appended"`) {
		t.Fatalf("program result: %s", got)
	}
	for tool, key := range map[string]string{"put": "p-before", "append": "p-approved"} {
		if n := sideEffects(t, effects, tool, key); n != 1 {
			t.Errorf("%s %s ran %d times, want 1", tool, key, n)
		}
	}
	if n := sideEffects(t, effects, "put", "p-after"); n != 1 {
		t.Errorf("put p-after ran %d times, want 1", n)
	}
}
