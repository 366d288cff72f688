package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
)

// exactArgs are arguments at 2^53-1, 2^53, 2^53+1 and with 19-digit IDs
// that share their nearest double, as a client writes them, and their
// canonical form: what the task's Update carries and the upstream is sent.
const (
	exactArgs      = `{"id": 9007199254740993, "ids": [9007199254740991, 9007199254740992], "snowflake": 1234567890123456789, "other": 1234567890123456700, "f": 1.50}`
	exactArgsCanon = `{"f":1.50,"id":9007199254740993,"ids":[9007199254740991,9007199254740992],"other":1234567890123456700,"snowflake":1234567890123456789}`
)

// TestCallToolForwardsNumbersExactly (issue 25 item 4): airlock_call_tool
// forwards the inner arguments' numbers as written, as a direct call does;
// it used to decode them into float64 and send 9007199254740993 as
// 9007199254740992.
func TestCallToolForwardsNumbersExactly(t *testing.T) {
	ft := &fakeTemporal{}
	g := newTestGateway(t, ft, Options{Principal: "alice", Catalog: CatalogSearch})
	cs := connectMemory(t, g)

	res := callTool(t, cs, ToolCallTool, json.RawMessage(`{"name":"counter__echo","arguments":`+exactArgs+`}`), "meta-1")
	if res.IsError {
		t.Fatalf("airlock_call_tool: %s", textOf(res))
	}
	if got := string(ft.last(t).req.Arguments); got != exactArgsCanon {
		t.Errorf("airlock_call_tool sent the upstream %s; want %s", got, exactArgsCanon)
	}
	if res := callTool(t, cs, "counter__echo", json.RawMessage(exactArgs), "direct-1"); res.IsError {
		t.Fatalf("direct call: %s", textOf(res))
	}
	if got := string(ft.last(t).req.Arguments); got != exactArgsCanon {
		t.Errorf("the direct call sent the upstream %s; want %s", got, exactArgsCanon)
	}
	// The inner arguments go through the direct call's canonicalisation,
	// which refuses a repeated key (they were decoded last-wins).
	if res := callTool(t, cs, ToolCallTool, json.RawMessage(`{"name":"counter__echo","arguments":{"id":1,"id":2}}`), ""); !res.IsError ||
		!strings.Contains(textOf(res), "more than once") {
		t.Errorf("inner arguments with a repeated key: isError=%v %q; want refused", res.IsError, textOf(res))
	}
	for _, bad := range []string{`[1]`, `"x"`} {
		res := callTool(t, cs, ToolCallTool, json.RawMessage(`{"name":"counter__echo","arguments":`+bad+`}`), "")
		if !res.IsError || !strings.Contains(textOf(res), "must be a JSON object") {
			t.Errorf("arguments %s: isError=%v %q; want refused", bad, res.IsError, textOf(res))
		}
	}
}

// fakeApprovals is one pending request that bob may decide; it keeps the
// decisions it is given.
type fakeApprovals struct {
	req       api.ApprovalRequest
	decisions []MCPDecision
}

func (f *fakeApprovals) Groups(name string) []string {
	if name == "bob" {
		return []string{"ops"}
	}
	return nil
}

func (f *fakeApprovals) Decidable(context.Context, string) ([]api.ApprovalRequest, error) {
	return []api.ApprovalRequest{f.req}, nil
}

func (f *fakeApprovals) Decide(_ context.Context, d MCPDecision) (api.DecideResult, error) {
	f.decisions = append(f.decisions, d)
	return api.DecideResult{RequestID: d.RequestID, State: api.ApprovalApproved, Message: "approved with edited arguments", EditDigest: "e1"}, nil
}

// TestApprovalsOverMCPKeepNumbersExactly (issue 25 item 4): an approver
// who lists a request sees its numbers as they are, and edited arguments
// sent with airlock_approvals_decide reach the task as written (the SDK's
// typed handler had decoded them into float64, so an edit to
// 9007199254740993 ran as 9007199254740992).
func TestApprovalsOverMCPKeepNumbersExactly(t *testing.T) {
	fa := &fakeApprovals{req: api.ApprovalRequest{ID: "t1~c1", TaskID: "t1", CallID: "c1", Tool: "counter__echo", Principal: "alice",
		Arguments: json.RawMessage(`{"account":9007199254740993,"key":"s3cret"}`), Redact: []string{"key"}, Digest: strings.Repeat("ab", 32),
		Group: "ops", Quorum: 1, State: api.ApprovalPending}}
	g := newTestGateway(t, &fakeTemporal{}, Options{Principal: "bob", Approvals: fa})
	cs := connectMemory(t, g)

	if l := callTool(t, cs, ToolApprovalsList, map[string]any{}, ""); l.IsError || l.StructuredContent == nil {
		t.Fatalf("airlock_approvals_list over MCP: %s", textOf(l))
	}
	// The handler's own answer: a client decoding structured content into
	// any rounds it again, on its side.
	list, err := g.approvalsListTool(context.Background(), &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: ToolApprovalsList}})
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := list.StructuredContent.(json.RawMessage)
	if list.IsError || !strings.Contains(string(sc), `"arguments":{"account":9007199254740993,"key":"[redacted]"}`) ||
		!strings.Contains(textOf(list), "9007199254740993") {
		t.Errorf("airlock_approvals_list: %s\nstructured %s; want the account as it is, the key masked", textOf(list), sc)
	}

	for _, edited := range []string{`{"account": 9007199254740993, "key": "[redacted]"}`, `{"account":1234567890123456700}`, `{"account":9007199254740991.0}`} {
		res := callTool(t, cs, ToolApprovalsDecide, json.RawMessage(`{"request_id":"t1~c1","decision":"approve","digest":"abababab","arguments":`+edited+`}`), "")
		if res.IsError {
			t.Fatalf("airlock_approvals_decide: %s", textOf(res))
		}
		d := fa.decisions[len(fa.decisions)-1]
		var want bytes.Buffer
		_ = json.Compact(&want, []byte(edited)) // as the client sends it
		if string(d.Arguments) != want.String() || d.Approver != "bob" || !d.Approve {
			t.Errorf("the decision delivered arguments %s (%+v); want %s as sent", d.Arguments, d, edited)
		}
	}
}
