package approvertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
)

// FakeTemporal serves approval requests from memory and records the decide
// Updates it is sent; Refuse, when set, is the validator's answer.
type FakeTemporal struct {
	client.Client // unimplemented methods panic

	mu      sync.Mutex
	Reqs    []api.ApprovalRequest
	Refuse  func(api.DecideRequest) error
	updates []client.UpdateWorkflowOptions
	// done holds the outcome of each Update ID, as Temporal does: a
	// repeated ID gets the first outcome and changes nothing.
	done map[string]api.DecideResult
	// Ended are tasks that ran and completed: Describe finds them, an
	// Update gets NotFound.
	Ended map[string]bool
}

func (f *FakeTemporal) exists(task string) bool {
	for _, r := range f.Reqs {
		if r.TaskID == task {
			return true
		}
	}
	return f.Ended[task]
}

func (f *FakeTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.exists(id) {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + id)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{}, nil
}

func (f *FakeTemporal) ListWorkflow(_ context.Context, _ *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	for _, r := range f.Reqs {
		if !seen[r.TaskID] {
			seen[r.TaskID] = true
			resp.Executions = append(resp.Executions, &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: r.TaskID}})
		}
	}
	return resp, nil
}

func (f *FakeTemporal) QueryWorkflow(_ context.Context, id, _ string, q string, _ ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if q != api.QueryApprovals {
		return nil, errors.New("unexpected query " + q)
	}
	var out []api.ApprovalRequest
	for _, r := range f.Reqs {
		if r.TaskID == id {
			out = append(out, r)
		}
	}
	return jsonValue{out}, nil
}

func (f *FakeTemporal) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, o)
	d := o.Args[0].(api.DecideRequest)
	if f.Ended[o.WorkflowID] || !f.exists(o.WorkflowID) {
		return nil, serviceerror.NewNotFound("workflow execution already completed")
	}
	if res, ok := f.done[o.UpdateID]; ok {
		return updateHandle{res: res}, nil
	}
	for _, r := range f.Reqs {
		if r.ID == d.RequestID && r.State != api.ApprovalPending {
			return nil, temporal.NewApplicationError("request "+r.ID+" is already "+r.State, "")
		}
	}
	if f.Refuse != nil {
		if err := f.Refuse(d); err != nil {
			return nil, temporal.NewApplicationError(err.Error(), "")
		}
	}
	state := api.ApprovalApproved
	if !d.Approve {
		state = api.ApprovalDenied
	}
	for i := range f.Reqs {
		if f.Reqs[i].ID == d.RequestID {
			f.Reqs[i].State = state
			f.Reqs[i].Votes = append(f.Reqs[i].Votes, api.Vote{Approver: d.Approver, Approve: d.Approve, Via: d.Via, Comment: d.Comment})
		}
	}
	res := api.DecideResult{RequestID: d.RequestID, State: state, Message: state + ": 1 of 1 approvals", Approver: d.Approver, Approve: d.Approve, Nonce: d.Nonce}
	if f.done == nil {
		f.done = map[string]api.DecideResult{}
	}
	f.done[o.UpdateID] = res
	return updateHandle{res: res}, nil
}

// Sent is the decide Updates sent so far.
func (f *FakeTemporal) Sent() []client.UpdateWorkflowOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]client.UpdateWorkflowOptions(nil), f.updates...)
}

type jsonValue struct{ v any }

func (j jsonValue) HasValue() bool { return true }
func (j jsonValue) Get(ptr any) error {
	b, err := json.Marshal(j.v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, ptr)
}

type updateHandle struct{ res api.DecideResult }

func (updateHandle) WorkflowID() string { return "" }
func (updateHandle) RunID() string      { return "" }
func (updateHandle) UpdateID() string   { return "" }
func (u updateHandle) Get(_ context.Context, ptr any) error {
	*ptr.(*api.DecideResult) = u.res
	return nil
}

// Request is a pending request by alice for group ops (bob, carol).
func Request(task string, now time.Time) api.ApprovalRequest {
	return api.ApprovalRequest{
		ID: task + "~call-1", TaskID: task, CallID: "call-1", Tool: "counter__append", Server: "counter",
		Principal: "alice", Arguments: json.RawMessage(`{"key":"k1","auth":{"token":"s3cret"}}`), Redact: []string{"auth.token"},
		Digest: "0123456789abcdef0123456789abcdef", SideEffects: []string{"write"}, DataLevel: "internal", Risk: "high",
		Group: "ops", Quorum: 1, Approvers: []string{"bob", "carol"}, ExpiresAt: now.Add(time.Hour), OnTimeout: "deny",
		RequestedAt: now.Add(-time.Minute), State: api.ApprovalPending,
	}
}

// Directory has principals alice, bob and mallory, whose API keys are
// alice-key, bob-key and mallory-key.
func Directory() *identity.Directory {
	return identity.New(&config.Config{Principals: []config.Principal{
		{Name: "alice", APIKeySHA256: []string{identity.HashKey("alice-key")}},
		{Name: "bob", APIKeySHA256: []string{identity.HashKey("bob-key")}},
		{Name: "mallory", APIKeySHA256: []string{identity.HashKey("mallory-key")}},
	}})
}

// AuditLines decodes an audit stream, one JSON object a line.
func AuditLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// HostileProgram is a program ID a channel must show escaped and
// bounded: markup for HTML and Slack mrkdwn, a code span's backtick, a
// newline that would forge a line, and 10,000 more bytes than any
// channel may show. Its tail ("TAIL") must never be shown.
var HostileProgram = "<script>alert(1)</script>&amp;<!channel>*bold*_it_`code`\nstate: approved" +
	strings.Repeat("x", 10000) + "TAIL"

// ProgramRequest is Request as a program's call: call 3 of program
// "prog-7", made at line 12.
func ProgramRequest(task string, now time.Time) api.ApprovalRequest {
	r := Request(task, now)
	r.CallID = api.ProgramCallID("prog-7", 3)
	r.ID = api.RequestID(task, r.CallID)
	r.Program, r.Line = "prog-7", 12
	return r
}
