package workflows

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
)

// TestHeartbeatTimeoutFollowsTheTool checks the heartbeat timeout each
// call's activity gets: the tool's own, else the default for its timeout,
// and none when the call's start-to-close timeout is as short.
func TestHeartbeatTimeoutFollowsTheTool(t *testing.T) {
	tests := []struct {
		name             string
		timeout, declare time.Duration
		want             time.Duration
	}{
		{"declared", time.Hour, 30 * time.Second, 30 * time.Second},
		{"default of a long tool", time.Minute, 0, 10 * time.Second},
		{"default of a short tool", 6 * time.Second, 0, 5 * time.Second},
		{"none when the call is as short", time.Second, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			var got []time.Duration
			h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
				if info.ActivityType.Name == api.CallToolName {
					got = append(got, info.HeartbeatTimeout)
				}
			})
			r := req("c1", false)
			r.Spec.Timeout, r.Spec.HeartbeatTimeout = tc.timeout, tc.declare
			var res api.CallResult
			h.callAt(time.Second, r, &res, nil)
			h.finishAt(time.Minute)
			h.run(baseInput())
			if res.Outcome != api.OutcomeOK || len(got) != 1 || got[0] != tc.want {
				t.Fatalf("outcome %q, heartbeat timeouts %v; want ok with [%s]", res.Outcome, got, tc.want)
			}
		})
	}
}

// TestWorkerLostIsAnsweredLikeAHeartbeatTimeout: the failure with which a
// restarted airlock dev ends the calls its previous process left running
// (worker.ResolveOrphans) takes the heartbeat timeout's path: unknown for a
// tool that is not idempotent, re-run for one that is.
func TestWorkerLostIsAnsweredLikeAHeartbeatTimeout(t *testing.T) {
	lost := func(api.CallToolInput) (api.CallToolOutput, error) {
		return api.CallToolOutput{}, temporal.NewApplicationError("the airlock process running this call stopped", api.ErrTypeOutcomeUnknown)
	}
	for _, tc := range []struct {
		idempotent   bool
		want         api.Outcome
		wantAttempts int
	}{
		{false, api.OutcomeUnknown, 1},
		{true, api.OutcomeOK, 2},
	} {
		h := newHarness(t, lost)
		var res api.CallResult
		h.callAt(time.Second, req("c1", tc.idempotent), &res, nil)
		h.finishAt(time.Minute)
		h.run(baseInput())
		if res.Outcome != tc.want || res.Attempts != tc.wantAttempts || h.tools.calls() != tc.wantAttempts {
			t.Errorf("idempotent=%v: outcome %q after %d attempts (%d runs; reason %q), want %q after %d",
				tc.idempotent, res.Outcome, res.Attempts, h.tools.calls(), res.Reason, tc.want, tc.wantAttempts)
		}
	}
}
