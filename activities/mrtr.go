package activities

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/seal"
)

// Sampling and elicitation when the client's gateway is in another
// process (api.SignalCallInput): the activity puts the upstream's request
// in its heartbeats with a one-time public key, the gateway that waits on
// the call asks its client and signals the answer, sealed to that key, to
// the task, and the activity reads it back with api.QueryCallInput. See
// RATIONALE.md, "How does an upstream's sampling or elicitation cross
// processes?".

// DefaultAskTimeout is how long an upstream's request waits for the
// client's answer through the task before the upstream gets an error.
const DefaultAskTimeout = 5 * time.Minute

// askPoll is how often a waiting activity asks its task for the answer
// (one query; the answer is in the workflow's memory).
const askPoll = 500 * time.Millisecond

// askMargin is kept between an ask's end and the activity's deadline, so
// that the upstream can still answer the call after an unanswered ask.
const askMargin = 5 * time.Second

func (a *Activities) askTimeout() time.Duration {
	if a.AskTimeout > 0 {
		return a.AskTimeout
	}
	return DefaultAskTimeout
}

// askThroughTask forwards one upstream request to the client through the
// task and returns the client's answer (JSON), or why none came.
func (r *callRelay) askThroughTask(kind string, request json.RawMessage) (json.RawMessage, error) {
	ctx := r.actx
	if ctx == nil || !activity.IsActivity(ctx) || activity.GetInfo(ctx).IsLocalActivity {
		return nil, fmt.Errorf("airlock cannot forward %s during %s: the call runs on the fast path, which has no heartbeats to carry it", kind, r.in.ExposedName)
	}
	key, err := seal.NewKey()
	if err != nil {
		return nil, err
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	ask := api.CallAsk{ID: "ask-" + hex.EncodeToString(b[:]), Kind: kind, Request: request, Key: key.PublicKey().Bytes()}
	r.mu.Lock()
	r.last.CallID = r.in.CallID
	r.last.Asks = append(r.last.Asks, ask)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.last.Asks = slices.DeleteFunc(r.last.Asks, func(x api.CallAsk) bool { return x.ID == ask.ID })
		r.mu.Unlock()
	}()
	activity.RecordHeartbeat(ctx, r.heartbeatDetails()...) // the SDK sends it at once, or at the end of its throttle interval

	timeout := r.askTimeout
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl) - askMargin; left < timeout {
			timeout = max(left, 0)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := activity.GetClient(ctx)
	tick := time.NewTicker(askPoll)
	defer tick.Stop()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("the client did not answer the %s request within %s", kind, timeout.Round(time.Second))
		case <-tick.C:
		}
		v, err := c.QueryWorkflow(wctx, r.in.TaskID, "", api.QueryCallInput, r.in.CallID, ask.ID)
		if err != nil {
			continue // a run that does not keep answers yet, or a busy server: try again
		}
		var in api.CallInput
		if v.Get(&in) != nil || in.AskID != ask.ID {
			continue
		}
		if in.Refused != "" {
			return nil, fmt.Errorf("%s", in.Refused)
		}
		ans, err := seal.Open(key, in.Peer, in.Sealed)
		if err != nil {
			return nil, fmt.Errorf("the client's answer to the %s request: %w", kind, err)
		}
		return ans, nil
	}
}
