package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/manifests"
)

// TestNumbersBeyond2To53 (issue 25 item 4) runs the real worker, policy and
// upstream (rawargs, which logs the bytes it receives) and records the
// history numbers_v1 (changeExactNumbers, with -record):
//
//   - through the gateway, airlock_call_tool and a direct call send the
//     upstream 9007199254740993 and 1234567890123456789 as written, and a
//     deny rule on account 9007199254740993 denies exactly that account;
//   - in a task whose approvals grant by account: a grant bound to
//     9007199254740992 covers that account and not 9007199254740993, whose
//     request has its own digest; an approver edits that call to
//     1234567890123456789, which runs as written.
func TestNumbersBeyond2To53(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t, "./integration/testupstream")
	dir := t.TempDir()
	manifest := func(name, tool string) *manifests.Manifest {
		m, err := manifests.Parse(filepath.Join(dir, name+".yaml"), []byte(`server:
  name: `+name+`
  stdio:
    command: `+bin+`
    env:
      RAW_ARGS_LOG: `+filepath.Join(dir, name+".log")+`
tools:
  rawargs: `+tool+`
`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	free := manifest("free", `{side_effects: [read], data_access_level: public, risk: low, idempotent: true}`)
	bank := manifest("counter", `{side_effects: [write], data_access_level: internal, risk: high, idempotent: true,
    approval: {group: ops, timeout: 1h, max_grant: {calls: 5, duration: 1h}, grant_args: [account]}}`)
	s := newStack(t, stackOptions{manifests: []*manifests.Manifest{free, bank}, catalog: gateway.CatalogSearch,
		groups: map[string][]string{"ops": {"bob"}},
		policy: &policy.Config{Rules: []policy.Rule{{Name: "frozen-account", When: `tool.server == "free" && args.?account.orValue(0) == 9007199254740993`,
			Effect: api.Deny, Reason: "account 9007199254740993 is frozen"}}}})
	cs := s.connect(t, nil)
	waitTools(t, cs, gateway.ToolCallTool)
	rawLog := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
		return string(b)
	}

	// Through the gateway.
	const sent = `{"account": 9007199254740992, "id": 9007199254740993, "ids": [9007199254740991, 1234567890123456789, 1234567890123456700]}`
	const canon = `{"account":9007199254740992,"id":9007199254740993,"ids":[9007199254740991,1234567890123456789,1234567890123456700]}`
	var res *mcp.CallToolResult
	waitFor(t, "the upstream to start", 60*time.Second, func() bool {
		res = call(t, cs, gateway.ToolCallTool, json.RawMessage(`{"name":"free__rawargs","arguments":`+sent+`}`), "")
		return !res.IsError || !strings.Contains(text(res), "unavailable")
	})
	if res.IsError || text(res) != canon {
		t.Fatalf("airlock_call_tool: isError=%v, the upstream got %q; want %s", res.IsError, text(res), canon)
	}
	if res := call(t, cs, "free__rawargs", json.RawMessage(sent), ""); res.IsError || text(res) != canon {
		t.Fatalf("direct call: isError=%v, the upstream got %q; want %s", res.IsError, text(res), canon)
	}
	for _, frozen := range []string{`{"account":9007199254740993}`, `{"account":9007199254740993.0}`} {
		if res := call(t, cs, gateway.ToolCallTool, json.RawMessage(`{"name":"free__rawargs","arguments":`+frozen+`}`), ""); !res.IsError ||
			!strings.Contains(text(res), "frozen-account") {
			t.Errorf("%s: isError=%v %q; want the rule's denial", frozen, res.IsError, text(res))
		}
	}
	if got, want := rawLog("free"), canon+"\n"+canon+"\n"; got != want {
		t.Errorf("the upstream received:\n%s\nwant:\n%s", got, want)
	}

	// In a recorded task: grants, digests and an edit.
	ctx := context.Background()
	taskID := "record-numbers"
	run := startRecorderTask(t, s, taskID, api.Limits{MaxCalls: 10, IdleTimeout: time.Hour})
	decide := func(id string, approve bool, args string, grant *api.GrantAsk) api.ApprovalRequest {
		var ar api.ApprovalRequest
		waitFor(t, "the request of "+id, 30*time.Second, func() bool {
			var err error
			ar, err = approver.Lookup(ctx, s.client, api.RequestID(taskID, id))
			return err == nil && ar.State == api.ApprovalPending
		})
		d := api.DecideRequest{RequestID: ar.ID, Digest: ar.Digest, Approver: "bob", Approve: approve, Via: "cli", Arguments: args, Grant: grant}
		if _, err := approver.Deliver(ctx, s.client, "record:"+ar.ID, d); err != nil {
			t.Errorf("deliver %s: %v", ar.ID, err)
		}
		return ar
	}
	send := func(id, args string, act func()) api.CallResult {
		t.Helper()
		done := make(chan struct{})
		go func() {
			defer close(done)
			if act != nil {
				act()
			}
		}()
		req := api.CallRequest{CallID: id, Tool: "counter__rawargs", Server: "counter", UpstreamTool: "rawargs",
			Arguments: json.RawMessage(args), Spec: api.SpecFor(bank.Tools["rawargs"])}
		res, err := sendCall(ctx, s, taskID, req)
		if err != nil {
			t.Fatalf("call %s: %v", id, err)
		}
		<-done
		return res
	}
	var a1, a2 api.ApprovalRequest
	if res := send("a1", `{"account":9007199254740992}`, func() { a1 = decide("a1", true, "", &api.GrantAsk{Calls: 3}) }); res.Outcome != api.OutcomeOK {
		t.Fatalf("a1: %+v", res)
	}
	res2 := send("a2", `{"account":9007199254740993}`, func() { a2 = decide("a2", true, `{"account": 1234567890123456789}`, nil) })
	if res2.Outcome != api.OutcomeOK || res2.Edit == nil || string(res2.Edit.Arguments) != `{"account":1234567890123456789}` {
		t.Fatalf("a2, edited: %+v", res2)
	}
	if a2.Digest != api.RequestDigest(taskID, "a2", "counter__rawargs", json.RawMessage(`{"account":9007199254740993}`), a2.PolicyVersion) ||
		a2.Digest == api.RequestDigest(taskID, "a2", "counter__rawargs", json.RawMessage(`{"account":9007199254740992}`), a2.PolicyVersion) {
		t.Errorf("a2's digest %s is not of its own arguments", a2.Digest)
	}
	if res := send("a3", `{"account":9007199254740992}`, nil); res.Outcome != api.OutcomeOK || res.Decision == nil || res.Decision.Check != api.CheckGrant {
		t.Fatalf("a3, covered by a1's grant: %+v", res)
	}
	if a1.Digest == "" {
		t.Error("a1 had no request")
	}
	if got, want := rawLog("counter"), "{\"account\":9007199254740992}\n{\"account\":1234567890123456789}\n{\"account\":9007199254740992}\n"; got != want {
		t.Errorf("the upstream received:\n%s\nwant:\n%s", got, want)
	}

	finishTask(t, s, taskID)
	replayRuns(t, s, taskID, run.GetRunID(), "numbers_v1")
}
