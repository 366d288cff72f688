package approver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/airlock-run/airlock/internal/auditstream"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

// fakeTemporal serves approval requests from memory and records the decide
// Updates it is sent; refuse, when set, is the validator's answer.
type fakeTemporal struct {
	client.Client // unimplemented methods panic

	mu      sync.Mutex
	reqs    []api.ApprovalRequest
	refuse  func(api.DecideRequest) error
	updates []client.UpdateWorkflowOptions
	// done holds the outcome of each Update ID, as Temporal does: a
	// repeated ID gets the first outcome and changes nothing.
	done map[string]api.DecideResult
	// ended are tasks that ran and completed: Describe finds them, an
	// Update gets NotFound.
	ended map[string]bool
}

func (f *fakeTemporal) exists(task string) bool {
	for _, r := range f.reqs {
		if r.TaskID == task {
			return true
		}
	}
	return f.ended[task]
}

func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.exists(id) {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + id)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{}, nil
}

func (f *fakeTemporal) ListWorkflow(_ context.Context, _ *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	for _, r := range f.reqs {
		if !seen[r.TaskID] {
			seen[r.TaskID] = true
			resp.Executions = append(resp.Executions, &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: r.TaskID}})
		}
	}
	return resp, nil
}

func (f *fakeTemporal) QueryWorkflow(_ context.Context, id, _ string, q string, _ ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if q != api.QueryApprovals {
		return nil, errors.New("unexpected query " + q)
	}
	var out []api.ApprovalRequest
	for _, r := range f.reqs {
		if r.TaskID == id {
			out = append(out, r)
		}
	}
	return jsonValue{out}, nil
}

func (f *fakeTemporal) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, o)
	d := o.Args[0].(api.DecideRequest)
	if f.ended[o.WorkflowID] || !f.exists(o.WorkflowID) {
		return nil, serviceerror.NewNotFound("workflow execution already completed")
	}
	if res, ok := f.done[o.UpdateID]; ok {
		return updateHandle{res: res}, nil
	}
	for _, r := range f.reqs {
		if r.ID == d.RequestID && r.State != api.ApprovalPending {
			return nil, temporal.NewApplicationError("request "+r.ID+" is already "+r.State, "")
		}
	}
	if f.refuse != nil {
		if err := f.refuse(d); err != nil {
			return nil, temporal.NewApplicationError(err.Error(), "")
		}
	}
	state := api.ApprovalApproved
	if !d.Approve {
		state = api.ApprovalDenied
	}
	for i := range f.reqs {
		if f.reqs[i].ID == d.RequestID {
			f.reqs[i].State = state
			f.reqs[i].Votes = append(f.reqs[i].Votes, api.Vote{Approver: d.Approver, Approve: d.Approve, Via: d.Via, Comment: d.Comment})
		}
	}
	res := api.DecideResult{RequestID: d.RequestID, State: state, Message: state + ": 1 of 1 approvals", Approver: d.Approver, Approve: d.Approve, Nonce: d.Nonce}
	if f.done == nil {
		f.done = map[string]api.DecideResult{}
	}
	f.done[o.UpdateID] = res
	return updateHandle{res: res}, nil
}

func (f *fakeTemporal) sent() []client.UpdateWorkflowOptions {
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

// testRequest is a pending request by alice for group ops (bob, carol).
func testRequest(task string, now time.Time) api.ApprovalRequest {
	return api.ApprovalRequest{
		ID: task + "~call-1", TaskID: task, CallID: "call-1", Tool: "counter__append", Server: "counter",
		Principal: "alice", Arguments: json.RawMessage(`{"key":"k1","auth":{"token":"s3cret"}}`), Redact: []string{"auth.token"},
		Digest: "0123456789abcdef0123456789abcdef", SideEffects: []string{"write"}, DataLevel: "internal", Risk: "high",
		Group: "ops", Quorum: 1, Approvers: []string{"bob", "carol"}, ExpiresAt: now.Add(time.Hour), OnTimeout: "deny",
		RequestedAt: now.Add(-time.Minute), State: api.ApprovalPending,
	}
}

func TestMayDecide(t *testing.T) {
	now := time.Now()
	r := testRequest("task-1", now)
	if err := MayDecide(r, "bob", now); err != nil {
		t.Errorf("bob: %v", err)
	}
	for name, want := range map[string]string{"alice": "asked for this call", "mallory": "not in approver group"} {
		if err := MayDecide(r, name, now); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	if err := MayDecide(r, "bob", now.Add(2*time.Hour)); err == nil {
		t.Error("expired request offered")
	}
	r.Votes = []api.Vote{{Approver: "bob", Approve: true}}
	if err := MayDecide(r, "bob", now); err == nil || !strings.Contains(err.Error(), "already decided") {
		t.Errorf("second vote: %v", err)
	}
}

func TestLocalDecide(t *testing.T) {
	now := time.Now()
	ft := &fakeTemporal{reqs: []api.ApprovalRequest{testRequest("task-1", now), testRequest("task-2", now)}}
	l := Local{Temporal: ft, Namespace: "default"}
	ctx := context.Background()

	// Bound to what bob saw: a wrong prefix is refused before anything is sent.
	_, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: true, Via: "cli", Digest: "ffffffff"})
	var ref *Refusal
	if !errors.As(err, &ref) || !strings.Contains(ref.Reason, "not the ffffffff you decided on") {
		t.Fatalf("wrong digest: %v", err)
	}
	if _, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: true, Via: "cli", Digest: "0123"}); err == nil ||
		!strings.Contains(err.Error(), "at least 8 hex digits") {
		t.Fatalf("short digest: %v", err)
	}
	if n := len(ft.sent()); n != 0 {
		t.Fatalf("%d updates sent for refused decisions", n)
	}

	res, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: true, Via: "cli", Digest: "0123456789AB", Comment: "fine"})
	if err != nil || res.State != api.ApprovalApproved {
		t.Fatalf("approve: %+v %v", res, err)
	}
	u := ft.sent()[0]
	d := u.Args[0].(api.DecideRequest)
	if u.UpdateID != "cli:task-1~call-1:bob:approve" || u.WorkflowID != "task-1" || u.UpdateName != api.UpdateDecide ||
		d.Digest != "0123456789abcdef0123456789abcdef" || d.Approver != "bob" || d.Via != "cli" || !d.Approve || d.Comment != "fine" {
		t.Fatalf("update sent: %+v %+v", u, d)
	}

	// The validator's refusal comes back as a Refusal with its words.
	ft.refuse = func(d api.DecideRequest) error {
		return errors.New(d.Approver + " asked for this call and may not approve it")
	}
	_, err = l.Decide(ctx, Decision{RequestID: "task-2~call-1", Approver: "alice", Approve: true, Via: "cli"})
	if !errors.As(err, &ref) || ref.Reason != "alice asked for this call and may not approve it" || err.Error() != "refused: "+ref.Reason {
		t.Fatalf("refusal: %v", err)
	}

	if _, err := l.Decide(ctx, Decision{RequestID: "task-9~call-1", Approver: "bob", Via: "cli"}); err == nil || !strings.Contains(err.Error(), "no approval request") {
		t.Fatalf("unknown request: %v", err)
	}
	if _, err := l.Decide(ctx, Decision{RequestID: "nonsense", Approver: "bob", Via: "cli"}); err == nil || !strings.Contains(err.Error(), "not an approval request ID") {
		t.Fatalf("malformed ID: %v", err)
	}
}

// TestSecondDecisionRefused: the page open in two tabs, Approve in one and
// then Deny in the other (or approvals deny after approvals approve). The
// deny must be refused and audited as refused, not reported as recorded;
// repeating the approve stays idempotent.
func TestSecondDecisionRefused(t *testing.T) {
	for _, via := range []string{"web", "cli"} {
		t.Run(via, func(t *testing.T) {
			ft := &fakeTemporal{reqs: []api.ApprovalRequest{testRequest("task-1", time.Now())}}
			var audit bytes.Buffer
			l := Local{Temporal: ft, Namespace: "default", Audit: auditstream.New(&audit)}
			ctx := context.Background()
			if _, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: true, Via: via}); err != nil {
				t.Fatalf("approve: %v", err)
			}
			res, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: false, Via: via})
			var ref *Refusal
			if !errors.As(err, &ref) || !strings.Contains(ref.Reason, "already approved") {
				t.Fatalf("deny after approve: %+v %v, want a refusal saying it is already approved", res, err)
			}
			if _, err := l.Decide(ctx, Decision{RequestID: "task-1~call-1", Approver: "bob", Approve: true, Via: via}); !errors.As(err, &ref) || !ref.Repeat ||
				!strings.Contains(ref.Reason, "bob already approved") {
				t.Fatalf("approve again: %v, want a repeat saying bob already approved", err)
			}
			if v := ft.reqs[0].Votes; len(v) != 1 || !v[0].Approve {
				t.Fatalf("votes: %+v", v)
			}
			lines := strings.Split(strings.TrimSpace(audit.String()), "\n")
			if len(lines) != 2 || !strings.Contains(lines[1], "refused") || strings.Contains(lines[1], `"state"`) {
				t.Fatalf("audit: %s", audit.String())
			}
		})
	}
}

// TestDeliverNoSuchTask: Temporal answers an Update to an ended task and to
// one that never existed alike (NotFound); the person is told which.
func TestDeliverNoSuchTask(t *testing.T) {
	ft := &fakeTemporal{ended: map[string]bool{"task-8": true}}
	ctx := context.Background()
	d := api.DecideRequest{RequestID: "task-9~call-1", Approver: "bob", Approve: true, Via: "slack"}
	_, err := Deliver(ctx, ft, "slack:1:U", d)
	if why := Explain(err); !strings.Contains(why, "no task task-9 exists") || !refusal(err) {
		t.Errorf("never existed: %q", why)
	}
	d.RequestID = "task-8~call-1"
	_, err = Deliver(ctx, ft, "slack:2:U", d)
	if why := Explain(err); !strings.Contains(why, "its task has ended") || !refusal(err) {
		t.Errorf("ended: %q", why)
	}
}
