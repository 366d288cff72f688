// Package activities holds the side-effecting half of airlock's workflows:
// one Activities struct carrying its dependencies (the upstream MCP pool,
// policy, notifiers, pins, the audit log), whose methods are registered
// with the worker and called from workflows by name.
//
// Metrics and audit lines about calls, decisions and approvals are written
// here, where each step happens once per attempt, and not in the workflows,
// whose code replays.
//
// Activities may do I/O. They classify their failures into the error types
// below so that the workflow can decide, deterministically, what to retry and
// what to report.
package activities

import (
	"context"
	"crypto/ecdh"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/blob"
	"github.com/airlock-run/airlock/internal/consent"
	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/pin"
	"github.com/airlock-run/airlock/internal/policy"
	"github.com/airlock-run/airlock/internal/relay"
	"github.com/airlock-run/airlock/internal/tick"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// ToolCaller calls a tool on an upstream. *upstream.Pool implements it, for
// native (WASM) tools too: internal/sandbox/toolserver serves those to the
// pool as in-process MCP servers. Tests give fakes.
type ToolCaller interface {
	CallTool(ctx context.Context, server, tool string, args json.RawMessage) (*mcp.CallToolResult, error)
}

var _ ToolCaller = (*upstream.Pool)(nil)

// Activities holds the dependencies of every activity.
type Activities struct {
	Tools ToolCaller
	// Policy and Catalog judge calls (Decide). Without them Decide fails
	// and the workflow denies every call: fail closed.
	Policy  *policy.Policy
	Catalog ToolCatalog
	// Groups resolves approver groups to their members (principal names).
	Groups map[string][]string
	// Current, when set, gives the Policy, Catalog and Groups in force at
	// each call instead of the three fields above: the configuration
	// reloads without a restart (reload.go).
	Current func() *Judge
	// Notifiers announce approval requests (Slack); none is fine.
	Notifiers []Notifier
	// Pins, when set, refuses tools whose upstream definition changed
	// since it was pinned.
	Pins *pin.Store
	// Blobs keeps large captures and compensations out of histories (nil:
	// they stay in the history, within its limits).
	Blobs *blob.Store
	// BlobThreshold is the size above which values go to Blobs (default
	// DefaultBlobThreshold).
	BlobThreshold int
	// MaxResultBytes bounds one call's result (default
	// DefaultMaxResultBytes); a larger one is replaced by an error result.
	MaxResultBytes int
	// HeartbeatEvery is how often a running call heartbeats when its
	// activity has no heartbeat timeout (default 2s). With one, it
	// heartbeats four times per timeout: the SDK sends at most one
	// heartbeat per 0.8 × the timeout, and this keeps one waiting to be
	// sent at each of those.
	HeartbeatEvery time.Duration
	// Audit receives a line per decision point (nil: none).
	Audit *auditstream.Log
	// Relay finds the gateway's end of a call when the gateway runs in
	// this process: upstream progress, log messages, sampling and
	// elicitation then reach the client that made the call (relay.go).
	Relay *relay.Hub
	// SubjectKey opens the user tokens the gateway sealed to this worker
	// for upstreams that act as the user (exchange.EnvKey; nil: such
	// calls fail, nothing sent).
	SubjectKey *ecdh.PrivateKey
	// Consent finds the users' own credentials for upstreams with
	// server.http.auth.user_oauth (useroauth.go; nil: such calls fail,
	// nothing sent).
	Consent *consent.Flow
	// AskTimeout bounds how long an upstream's sampling or elicitation
	// request waits for the client's answer when no gateway runs in this
	// process (default DefaultAskTimeout; mrtr.go).
	AskTimeout time.Duration
}

// CallTool runs one tool call on its upstream. It heartbeats while the call
// runs, so a worker that dies mid-call is noticed within the heartbeat
// timeout rather than the tool's whole timeout.
func (a *Activities) CallTool(ctx context.Context, in api.CallToolInput) (out api.CallToolOutput, err error) {
	start := time.Now()
	defer func() { a.observeCall(in, out, err, time.Since(start)) }()
	if a.Tools == nil {
		return api.CallToolOutput{}, temporal.NewNonRetryableApplicationError("no tool caller configured on this worker", api.ErrTypeInternal, nil)
	}
	rel, hooks := a.relayFor(in)
	rel.actx = ctx // the activity's own context, for requests that go through the task (mrtr.go)
	ctx = upstream.WithHooks(ctx, hooks)
	stop := a.heartbeat(ctx, rel.heartbeatDetails)
	defer stop()

	// Every attempt of a call carries the same key, so an upstream that
	// honours it applies the call once however often it is delivered.
	ctx = upstream.WithIdempotencyKey(ctx, api.CallKey(in.TaskID, in.CallID))
	args := in.Arguments
	if in.ArgumentsRef != "" {
		if args, err = a.blob(ctx, in.ArgumentsRef); err != nil {
			// Nothing was sent; another worker (one that shares the store)
			// may succeed.
			return api.CallToolOutput{}, temporal.NewApplicationErrorWithCause(err.Error(), api.ErrTypeNotSent, err)
		}
	}
	ctx, stopWatch := rel.watchCancel(ctx)
	defer stopWatch()
	// As the user, with a token exchanged now, not when the call was made
	// (subject.go).
	ctx, acted, err := a.actAsUser(ctx, in) // useroauth.go, else subject.go
	if err != nil {
		return api.CallToolOutput{}, err
	}
	defer func() { out.ActedAs = acted }()
	res, err := a.Tools.CallTool(ctx, in.Server, in.Tool, args)
	if err != nil {
		if errors.Is(context.Cause(ctx), errClientCancelled) {
			return api.CallToolOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrTypeCancelled, err)
		}
		return api.CallToolOutput{}, classify(in, err)
	}
	defer func() { out.Exchanges = rel.recorded() }()
	res, findings, held := a.guardResult(in, res) // guard.go: before anything records the result
	defer func() { out.Findings, out.Held = findings, held }()
	raw, err := json.Marshal(res)
	if err != nil {
		return api.CallToolOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("encoding result of %s: %v", in.ExposedName, err), api.ErrTypeInternal, err)
	}
	if limit := a.maxResultBytes(); held != nil && len(raw)+len(held.Sealed) > limit {
		// The redacted copy and the sealed one both stay in the history,
		// whose payloads are bounded: too large to hold, withheld.
		why := fmt.Sprintf("the result is too large to hold for approval (%d bytes with its sealed copy, more than the %d a call's result may take); ask for less", len(raw)+len(held.Sealed), limit)
		held, res = nil, withheld(in.ExposedName, why)
		if raw, err = json.Marshal(res); err != nil {
			return api.CallToolOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrTypeInternal, err)
		}
	}
	// A large pre-image is kept out of the history: it is needed only by
	// the worker, to compute the compensation.
	if isCapture(in.CallID) && a.Blobs != nil && len(raw) > a.blobThreshold() {
		ref, err := a.Blobs.Put(ctx, raw)
		if err != nil {
			return api.CallToolOutput{}, temporal.NewApplicationErrorWithCause(err.Error(), api.ErrTypeOutcomeUnknown, err)
		}
		return api.CallToolOutput{ResultRef: ref, IsError: res.IsError}, nil
	}
	if limit := a.maxResultBytes(); len(raw) > limit {
		return oversized(in, len(raw), limit), nil
	}
	return api.CallToolOutput{Result: raw, IsError: res.IsError}, nil
}

// isCapture reports whether callID is a capture's (api.CaptureID).
func isCapture(callID string) bool { _, ok := api.CallOfCaptureID(callID); return ok }

// DefaultBlobThreshold is the size above which the worker keeps captures
// and compensations in its blob store instead of the history.
const DefaultBlobThreshold = 64 << 10

func (a *Activities) blobThreshold() int {
	if a.BlobThreshold > 0 {
		return a.BlobThreshold
	}
	return DefaultBlobThreshold
}

// blob reads a value from the blob store.
func (a *Activities) blob(ctx context.Context, ref string) ([]byte, error) {
	if a.Blobs == nil {
		return nil, fmt.Errorf("blob %s: this worker has no blob store; configure the same one on every worker", ref)
	}
	return a.Blobs.Get(ctx, ref)
}

// DefaultMaxResultBytes bounds the result of one call: results are kept in
// the task's history, where one payload may not exceed 2 MB (and a history
// must stay small enough to replay).
const DefaultMaxResultBytes = 1 << 20

func (a *Activities) maxResultBytes() int {
	if a.MaxResultBytes > 0 {
		return a.MaxResultBytes
	}
	return DefaultMaxResultBytes
}

// oversized replaces a result too large to keep with an error result that
// says so. The call did run: only its result is dropped, and the model is
// told to ask for less.
func oversized(in api.CallToolInput, size, limit int) api.CallToolOutput {
	name := in.ExposedName
	if name == "" {
		name = in.Tool
	}
	text := fmt.Sprintf("%s ran, but its result is %d bytes, more than the %d airlock keeps in a task's record, so it was dropped. Ask for less (a narrower query, a smaller file, a page of results).", name, size, limit)
	raw, _ := json.Marshal(&mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}})
	return api.CallToolOutput{Result: raw, IsError: true}
}

// observeCall counts and audits one attempt where it ends: the workflow
// cannot (a replay would count it again).
func (a *Activities) observeCall(in api.CallToolInput, out api.CallToolOutput, err error, took time.Duration) {
	tool := in.ExposedName
	if tool == "" {
		var names *manifests.Names // nil: the default prefix
		if c, ok := a.judge().Catalog.(*Catalog); ok && c != nil {
			names = c.names
		}
		tool = names.Expose(in.Server, in.Tool)
	}
	result, errType := "ok", ""
	switch {
	case err != nil:
		errType = api.ErrTypeInternal
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) {
			errType = appErr.Type()
		}
		result = errType
	case out.IsError:
		result = "tool_error"
	}
	_, undo := api.CallOfCompensationID(in.CallID)
	metrics.Attempts.WithLabelValues(tool, result).Inc()
	metrics.CallDuration.WithLabelValues(tool).Observe(took.Seconds())
	if undo {
		metrics.Compensations.WithLabelValues(tool, result).Inc()
	}
	auditResult := result
	if err != nil {
		auditResult = "error"
	}
	a.Audit.Call(auditstream.Call{Task: in.TaskID, Call: in.CallID, Tool: tool, Attempt: in.Attempt, Result: auditResult,
		ErrorType: errType, Duration: took, Args: in.Arguments, Findings: findingLines(out.Findings)}, undo)
}

// classify turns a pool error into an application error whose type the
// workflow understands. Retries are decided by the workflow, not here.
func classify(in api.CallToolInput, err error) error {
	var ge *exchange.GrantError
	switch {
	case errors.As(err, &ge):
		return temporal.NewNonRetryableApplicationError(err.Error(), api.ErrTypeUserGrant, err)
	case errors.Is(err, upstream.ErrNotSent):
		return temporal.NewApplicationErrorWithCause(err.Error(), api.ErrTypeNotSent, err)
	case errors.Is(err, upstream.ErrRejected):
		return temporal.NewNonRetryableApplicationError(err.Error(), api.ErrTypeRejected, err)
	default:
		// Anything else happened after the request may have been written.
		return temporal.NewApplicationErrorWithCause(err.Error(), api.ErrTypeOutcomeUnknown, err)
	}
}

// heartbeat records one heartbeat every heartbeatEvery until the returned
// stop function is called. Not one at once: the SDK sends a first
// heartbeat synchronously, a round trip and a write of the task's state on
// the server for every call, most of which finish long before the
// heartbeat timeout could matter; that timeout counts from the activity's
// start either way.
func (a *Activities) heartbeat(ctx context.Context, details func() []any) (stop func()) {
	// A local activity (the fast path) has no heartbeat: it ends within
	// its workflow task.
	if !activity.IsActivity(ctx) || activity.GetInfo(ctx).IsLocalActivity {
		return func() {}
	}
	every := heartbeatEvery(activity.GetInfo(ctx).HeartbeatTimeout, a.HeartbeatEvery)
	return tick.Every(ctx, every, func(int) { activity.RecordHeartbeat(ctx, details()...) })
}

// heartbeatEvery is how often a call whose activity has heartbeat timeout
// hb records a heartbeat (see Activities.HeartbeatEvery).
func heartbeatEvery(hb, configured time.Duration) time.Duration {
	if hb > 0 {
		return hb / 4
	}
	if configured > 0 {
		return configured
	}
	return 2 * time.Second
}
