package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/upstream"
)

// TestWaitSettled: the start's memory is freed once no upstream is
// connecting (one unavailable or stopped does not hold it), after the
// bound when one keeps connecting, at once without a pool, and never once
// the process is stopping.
func TestWaitSettled(t *testing.T) {
	var polls atomic.Int32
	seq := func(states ...string) func() []upstream.Status {
		return func() []upstream.Status {
			i := min(int(polls.Add(1))-1, len(states)-1)
			return []upstream.Status{{Server: "a", State: upstream.StateConnected}, {Server: "b", State: states[i]}}
		}
	}
	ctx := context.Background()
	if !waitSettled(ctx, seq(upstream.StateConnecting, upstream.StateConnecting, upstream.StateUnavailable), time.Hour, time.Millisecond) || polls.Load() != 3 {
		t.Errorf("settled after %d polls, want true after 3", polls.Load())
	}
	polls.Store(0)
	if !waitSettled(ctx, seq(upstream.StateConnecting), 20*time.Millisecond, time.Millisecond) || polls.Load() < 2 {
		t.Errorf("an upstream that keeps connecting: want true at the bound, after %d polls", polls.Load())
	}
	if !waitSettled(ctx, nil, time.Hour, time.Hour) {
		t.Error("no pool: want true at once")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	polls.Store(0)
	if waitSettled(cctx, seq(upstream.StateConnecting), time.Hour, time.Millisecond) {
		t.Error("stopping while connecting: want false")
	}
	if waitSettled(cctx, nil, time.Hour, time.Hour) {
		t.Error("stopping with nothing to wait for: want false")
	}
}
