package gateway

// The server's own in-flight limit (history.maxInFlightUpdates), seen by
// the gateway. The admission queue (admission.go) keeps a task's calls in
// flight under it, but the server also counts Updates the gateway no
// longer waits for: calls answered pending (waiting for approval past the
// inline wait), other replicas' calls. A call refused for that is retried
// by the SDK with backoff until its inline wait runs out: a silent stall,
// then a "pending" answer for a call the task never admitted. So the
// gateway's Temporal client stops that retry (RefuseBusyUpdates) and the
// call is answered busy at once, like one past the queue.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/metrics"
)

// serverBusyPrefix marks the error RefuseBusyUpdates makes of the
// server's refusal.
const serverBusyPrefix = "airlock: the task's Updates in flight are at the server's limit: "

// RefuseBusyUpdates is a gRPC client interceptor for the Temporal client
// the gateway uses (client.ConnectionOptions.DialOptions, with
// grpc.WithChainUnaryInterceptor): an UpdateWorkflowExecution of a tool
// call or program that the server refuses because the workflow has
// history.maxInFlightUpdates in flight comes back as FailedPrecondition,
// which the SDK does not retry, so that the gateway answers the call busy
// (serverBusy). Other requests and other Updates (the workers' limiter
// and grant Updates) are untouched: the SDK retries them as before.
func RefuseBusyUpdates(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil {
		return nil
	}
	var name string
	switch r := req.(type) {
	case *workflowservice.UpdateWorkflowExecutionRequest:
		name = r.GetRequest().GetInput().GetName()
	case *workflowservice.ExecuteMultiOperationRequest: // Update-with-Start
		for _, op := range r.GetOperations() {
			if u := op.GetUpdateWorkflow(); u != nil {
				name = u.GetRequest().GetInput().GetName()
			}
		}
	default:
		return err
	}
	if name != api.UpdateCallTool && name != api.UpdateRunProgram {
		return err
	}
	if re := inFlightLimit(serviceerror.FromStatus(status.Convert(err))); re != nil {
		return status.Error(codes.FailedPrecondition, serverBusyPrefix+re.Message)
	}
	return err
}

// inFlightLimit is the server's in-flight refusal in err (for
// Update-with-Start, in one of its operations' errors), else nil.
func inFlightLimit(err error) *serviceerror.ResourceExhausted {
	var multi *serviceerror.MultiOperationExecution
	if errors.As(err, &multi) {
		for _, e := range multi.OperationErrors() {
			if re := inFlightLimit(e); re != nil {
				return re
			}
		}
		return nil
	}
	var re *serviceerror.ResourceExhausted
	if errors.As(err, &re) && re.Cause == enumspb.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT {
		return re
	}
	return nil
}

// serverBusy is the BusyError of a call whose Update RefuseBusyUpdates
// stopped, else nil.
func serverBusy(err error, taskID string) *BusyError {
	if err == nil {
		return nil
	}
	msg := err.Error()
	i := strings.Index(msg, serverBusyPrefix)
	if i < 0 {
		return nil
	}
	metrics.TaskBusy.WithLabelValues(metrics.BusyServer).Inc()
	return &BusyError{Task: taskID, Server: msg[i+len(serverBusyPrefix):]}
}

// serverBusyText is BusyError.Error for a refusal by the server.
func (e *BusyError) serverBusyText() string {
	return fmt.Sprintf("task %s is busy: the Temporal server holds as many of its Updates in flight as it allows (history.maxInFlightUpdates: %s), most likely calls waiting for approval; nothing ran. Call again in a moment, or once some of them are decided (airlock_status lists them).",
		e.Task, e.Server)
}
