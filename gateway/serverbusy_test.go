package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/airlock-run/airlock/api"
)

// The server's in-flight refusal of a call's Update becomes an error the
// SDK does not retry and the gateway answers busy; every other error, and
// the same refusal of other Updates, passes unchanged.
func TestRefuseBusyUpdates(t *testing.T) {
	inFlight := serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT, "limit on number of concurrent in-flight updates has been reached (64)")
	rps := serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, "namespace rate limit exceeded")
	update := func(name string) *workflowservice.UpdateWorkflowExecutionRequest {
		return &workflowservice.UpdateWorkflowExecutionRequest{Request: &updatepb.Request{Input: &updatepb.Input{Name: name}}}
	}
	withStart := func(name string) *workflowservice.ExecuteMultiOperationRequest {
		return &workflowservice.ExecuteMultiOperationRequest{Operations: []*workflowservice.ExecuteMultiOperationRequest_Operation{
			{Operation: &workflowservice.ExecuteMultiOperationRequest_Operation_StartWorkflow{StartWorkflow: &workflowservice.StartWorkflowExecutionRequest{}}},
			{Operation: &workflowservice.ExecuteMultiOperationRequest_Operation_UpdateWorkflow{UpdateWorkflow: update(name)}},
		}}
	}
	tests := []struct {
		name  string
		req   any
		err   error
		busy  bool
		code  codes.Code
		plain bool // the error passes unchanged
	}{
		{name: "call at the in-flight limit", req: update(api.UpdateCallTool), err: inFlight, busy: true, code: codes.FailedPrecondition},
		{name: "program at the in-flight limit", req: update(api.UpdateRunProgram), err: inFlight, busy: true, code: codes.FailedPrecondition},
		{name: "another Update at the limit (a limiter's take)", req: update(api.UpdateTake), err: inFlight, plain: true},
		{name: "a call over the namespace's rate", req: update(api.UpdateCallTool), err: rps, plain: true},
		{name: "an aborted call", req: update(api.UpdateCallTool), err: serviceerror.NewUnavailable("workflow update was aborted"), plain: true},
		{name: "another request", req: &workflowservice.SignalWorkflowExecutionRequest{}, err: inFlight, plain: true},
		{name: "no error", req: update(api.UpdateCallTool)},
		{name: "Update-with-Start of a call at the limit", req: withStart(api.UpdateCallTool), busy: true, code: codes.FailedPrecondition,
			err: serviceerror.NewMultiOperationExecution("MultiOperation could not be executed.", []error{serviceerror.NewMultiOperationAborted("aborted"), inFlight})},
		{name: "Update-with-Start of another Update at the limit", req: withStart(api.UpdateTake), plain: true,
			err: serviceerror.NewMultiOperationExecution("MultiOperation could not be executed.", []error{serviceerror.NewMultiOperationAborted("aborted"), inFlight})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sent error
			if tc.err != nil {
				sent = status.ErrorProto(serviceerror.ToStatus(tc.err).Proto())
			}
			invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return sent }
			got := RefuseBusyUpdates(context.Background(), "/temporal.api.workflowservice.v1.WorkflowService/UpdateWorkflowExecution", tc.req, nil, nil, invoker)
			switch {
			case tc.err == nil && got != nil:
				t.Fatalf("no error became %v", got)
			case tc.plain && !errors.Is(got, sent):
				t.Fatalf("%v became %v, want it unchanged", sent, got)
			case tc.busy && status.Code(got) != tc.code:
				t.Fatalf("code %s, want %s", status.Code(got), tc.code)
			}
			// The SDK hands the gateway the service error of the status.
			b := serverBusy(serviceerror.FromStatus(status.Convert(got)), "t1")
			if (b != nil) != tc.busy {
				t.Fatalf("busy %v, want %v (%v)", b, tc.busy, got)
			}
			if b == nil {
				return
			}
			res := busyResult("t1", b)
			msg := textOf(res)
			for _, want := range []string{"task t1 is busy", "history.maxInFlightUpdates", "(64)", "nothing ran", "Call again"} {
				if !strings.Contains(msg, want) {
					t.Errorf("busy answer %q lacks %q", msg, want)
				}
			}
			if res.Meta[MetaLimit] != "history.maxInFlightUpdates" || res.Meta[MetaLimitCheck] != LimitCheckBusy {
				t.Errorf("_meta %v", res.Meta)
			}
		})
	}
}
