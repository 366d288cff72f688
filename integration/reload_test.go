package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/identity"
)

// TestHotReload changes a manifest and a rule of a running `airlock dev`
// while a task runs and one of its calls waits for approval:
//   - the new manifest's upstream connects and its tool appears, with
//     notifications/tools/list_changed at the connected client, and is
//     callable;
//   - the new rule decides the task's next call, recorded with a new policy
//     version;
//   - the pending call keeps the digest and policy version it was asked
//     under and runs once approved;
//   - an invalid edit keeps the running version, logs the problem at its
//     file:line and counts airlock_config_reload_total{result="error"};
//   - SIGHUP reloads; removing the manifest removes its tool.
func TestHotReload(t *testing.T) {
	t.Parallel()
	d := newCounterDev(t, appendNeedsOpsTools+`  put: {side_effects: [write], data_access_level: internal, risk: low}
`)
	// The manifests live under m/, named by a glob: a new file there is a
	// new manifest.
	mdir := filepath.Join(d.dir, "m")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(d.dir, "counter.yaml"), filepath.Join(mdir, "counter.yaml")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(d.dir, "airlock.yaml")
	base := `manifests: ["m/*.yaml"]
approvals: {inline_wait: 1s}
principals:
  - {name: alice, roles: [all], api_key_sha256: [` + identity.HashKey("alice-key") + `]}
  - {name: bob, roles: [all], api_key_sha256: [` + identity.HashKey("bob-key") + `]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
approver_groups:
  ops: {members: [bob]}
`
	replaceFile(t, cfg, base)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tport := freePort(t)
	p := startDev(t, d.bin, "--config", cfg, "--data-dir", filepath.Join(d.dir, "data"),
		"--listen", listen, "--temporal-port", fmt.Sprint(tport), "--log-format", "json", "--no-ui")
	url := "http://" + listen
	p.waitHealthy(t, url)
	tc, err := client.Dial(client.Options{HostPort: fmt.Sprintf("127.0.0.1:%d", tport), Logger: quietSDKLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	listChanged := make(chan struct{}, 64)
	alice := connectWithHandler(t, url+"/mcp", bearer("alice-key"), &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { listChanged <- struct{}{} },
	})
	waitTools(t, alice, "counter__put", "counter__append")

	res := call(t, alice, "counter__put", map[string]any{"key": "before"}, "")
	task, _ := res.Meta[gateway.MetaTask].(string)
	if res.IsError || task == "" {
		t.Fatalf("first call: %q", text(res))
	}
	v1 := lastDecision(t, tc, task).PolicyVersion

	// A call waiting for approval, asked under the first version.
	pending := call(t, alice, "counter__append", map[string]any{"key": "held"}, "held")
	sc, _ := pending.StructuredContent.(map[string]any)
	reqID, _ := sc["approval_request"].(string)
	if pending.IsError || reqID == "" {
		t.Fatalf("pending result: %q", text(pending))
	}
	asked := approvalRequest(t, tc, task, reqID)
	if asked.PolicyVersion != v1 || asked.Digest == "" {
		t.Fatalf("request asked under %q (digest %q), want %q", asked.PolicyVersion, asked.Digest, v1)
	}
	okBefore, errBefore := reloadCount(t, url, "ok"), reloadCount(t, url, "error")

	// The edit: a new manifest (a second upstream) and a new rule.
	drain(listChanged)
	replaceFile(t, filepath.Join(mdir, "notes.yaml"), fmt.Sprintf(`server:
  name: notes
  stdio:
    command: %s
    env: {SIDE_EFFECT_LOG: %s}
%stools:
  put: {side_effects: [write], data_access_level: internal, risk: low}
`, d.upstream, d.effects, effectsSandbox(d.effects)))
	ruled := base + `policy:
  rules:
    - name: no-blocked-keys
      when: 'args.?key.orValue("") == "blocked"'
      effect: deny
      reason: "blocked keys are not written"
`
	replaceFile(t, cfg, ruled)
	select {
	case <-listChanged:
	case <-time.After(60 * time.Second):
		t.Fatalf("no notifications/tools/list_changed within 60s of the edit\n%s", p.output())
	}
	waitTools(t, alice, "notes__put")
	waitFor(t, "the reload of both files", 30*time.Second, func() bool { return reloadCount(t, url, "ok") > okBefore })

	if res := call(t, alice, "notes__put", map[string]any{"key": "n1"}, ""); res.IsError {
		t.Fatalf("the new upstream's tool: %q", text(res))
	}
	if n := sideEffects(t, d.effects, "put", "n1"); n != 1 {
		t.Fatalf("notes__put ran %d times, want 1", n)
	}
	// The rule may have come in a second reload (the files were written one
	// after the other): wait until it decides.
	var denied *mcp.CallToolResult
	waitFor(t, "the new rule to decide", 30*time.Second, func() bool {
		denied = call(t, alice, "counter__put", map[string]any{"key": "blocked"}, "")
		return denied.IsError
	})
	dec := lastDecision(t, tc, task)
	if dec.Rule != "no-blocked-keys" || dec.Effect != "deny" || dec.PolicyVersion == v1 || dec.PolicyVersion == "" {
		t.Fatalf("the next call's decision %+v: want deny by no-blocked-keys under a version other than %s", dec, v1)
	}
	v2 := dec.PolicyVersion

	// The pending call is still bound to what it was asked under.
	still := approvalRequest(t, tc, task, reqID)
	if still.PolicyVersion != v1 || still.Digest != asked.Digest || still.State != api.ApprovalPending {
		t.Fatalf("the pending request after the reload: version %s digest %s state %s; want %s %s pending", still.PolicyVersion, still.Digest, still.State, v1, asked.Digest)
	}
	bob := connectURL(t, url+"/mcp", bearer("bob-key"))
	out := call(t, bob, gateway.ToolApprovalsDecide, map[string]any{"request_id": reqID, "decision": "approve", "digest": asked.Digest}, "")
	if out.IsError {
		t.Fatalf("approving the pending call with its original digest: %q", text(out))
	}
	waitFor(t, "the approved call's result", time.Minute, func() bool {
		r := call(t, alice, gateway.ToolAwait, map[string]any{"call": "k-held"}, "")
		return !r.IsError && strings.Contains(mustJSON(t, r.StructuredContent), `"count":1`)
	})
	if n := sideEffects(t, d.effects, "append", "held"); n != 1 {
		t.Fatalf("the approved call ran %d times, want 1", n)
	}

	// An invalid edit: the rule's CEL does not compile.
	bad := strings.Replace(ruled, `== "blocked"'`, `== "blocked" &&'`, 1)
	badLine := 1 + slices.IndexFunc(strings.Split(bad, "\n"), func(l string) bool { return strings.Contains(l, "when:") })
	replaceFile(t, cfg, bad)
	waitFor(t, "the failed reload to be counted", 30*time.Second, func() bool { return reloadCount(t, url, "error") == errBefore+1 })
	// The counter and the log line are written one after the other: wait for the line.
	want := fmt.Sprintf("airlock.yaml:%d: policy.rules[0].when", badLine)
	waitFor(t, "the log to name the problem at "+want, 30*time.Second, func() bool { return strings.Contains(p.output(), want) })
	if r := call(t, alice, "counter__put", map[string]any{"key": "blocked"}, ""); !r.IsError || lastDecision(t, tc, task).PolicyVersion != v2 {
		t.Fatalf("after the invalid edit: %q under %s; want the running version %s to deny", text(r), lastDecision(t, tc, task).PolicyVersion, v2)
	}
	if r := call(t, alice, "notes__put", map[string]any{"key": "n2"}, ""); r.IsError {
		t.Fatalf("after the invalid edit the running version's tools still work: %q", text(r))
	}

	// Fix the file; then SIGHUP reloads with no file changed.
	okBefore = reloadCount(t, url, "ok")
	replaceFile(t, cfg, ruled)
	waitFor(t, "the fixed file to reload", 30*time.Second, func() bool { return reloadCount(t, url, "ok") > okBefore })
	okBefore = reloadCount(t, url, "ok")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload by SIGHUP", 30*time.Second, func() bool { return reloadCount(t, url, "ok") > okBefore })
	waitFor(t, "the reload by signal in the log", 30*time.Second, func() bool { return strings.Contains(p.output(), `"trigger":"signal hangup"`) })
	drain(listChanged)
	if err := os.Remove(filepath.Join(mdir, "notes.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "notes__put to disappear", 30*time.Second, func() bool { return !slices.Contains(toolNames(t, alice), "notes__put") })
	select {
	case <-listChanged:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed when the manifest was removed")
	}
	if r := call(t, alice, "counter__put", map[string]any{"key": "after"}, ""); r.IsError {
		t.Fatalf("counter__put after the removal: %q", text(r))
	}
}

// replaceFile writes path as editors do: a new file renamed over the old
// one, so that no reload reads it half-written.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func drain(c chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

func connectWithHandler(t *testing.T, url string, headers map[string]string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	h := map[string]string{}
	for k, v := range headers {
		h[k] = v
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: headerRT{headers: h}}}, sessionProtocol)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// lastDecision is the policy decision of the task's latest call.
func lastDecision(t *testing.T, tc client.Client, task string) api.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := tc.QueryWorkflow(ctx, task, "", api.QueryStatus)
	if err != nil {
		t.Fatal(err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	if len(st.Recent) == 0 || st.Recent[len(st.Recent)-1].Decision == nil {
		t.Fatalf("task %s has no decided call: %+v", task, st.Recent)
	}
	return *st.Recent[len(st.Recent)-1].Decision
}

func approvalRequest(t *testing.T, tc client.Client, task, id string) api.ApprovalRequest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := tc.QueryWorkflow(ctx, task, "", api.QueryApprovals)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []api.ApprovalRequest
	if err := v.Get(&reqs); err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("task %s has no approval request %s", task, id)
	return api.ApprovalRequest{}
}

var reloadMetric = regexp.MustCompile(`(?m)^airlock_config_reload_total\{result="(\w+)"\} (\d+)`)

// reloadCount reads airlock_config_reload_total{result} from /metrics.
func reloadCount(t *testing.T, base, result string) int {
	t.Helper()
	_, _, body := uiGet(t, base+"/metrics")
	for _, m := range reloadMetric.FindAllStringSubmatch(body, -1) {
		if m[1] == result {
			n, _ := strconv.Atoi(m[2])
			return n
		}
	}
	t.Fatalf("no airlock_config_reload_total{result=%q} in /metrics", result)
	return 0
}
