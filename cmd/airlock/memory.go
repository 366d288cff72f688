package main

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/airlock-run/airlock/internal/upstream"
)

// Returning the start's scratch memory. Starting takes far more heap than
// running: compiling (or, from the cache, decoding) the program
// interpreter and the native tools' modules, and the Temporal server's own
// start, peak at 250 MiB of heap on a first start, 120 MiB on a warm one,
// of which a serving process keeps 50-80 MiB. Go's background scavenger
// returns the rest only while it is above the next GC's goal plus 10%, and
// slowly (a first start still held 190 MiB it did not use a minute later),
// so an idle `airlock dev` looked 30-150 MiB bigger than it is. Once the
// upstreams have connected (the native tools the cache has not seen compile as they connect) the
// process frees it in one forced GC: a few milliseconds of one core, once.
const (
	// startSettleBound bounds the wait for the upstreams to connect: one
	// that keeps failing must not keep the memory held.
	startSettleBound = 2 * time.Minute
	startSettlePoll  = 250 * time.Millisecond
)

// releaseStartupMemory frees the start's scratch heap once the pool's
// upstreams are no longer connecting (or after startSettleBound), in the
// background. The program interpreter is ready by then: start waits for it
// before the worker polls.
func (s *stack) releaseStartupMemory(ctx context.Context) {
	var statuses func() []upstream.Status
	if s.pool != nil {
		statuses = s.pool.Statuses
	}
	go func() {
		if !waitSettled(ctx, statuses, startSettleBound, startSettlePoll) {
			return
		}
		t0 := time.Now()
		debug.FreeOSMemory()
		s.env.log.Debug().Dur("took", time.Since(t0)).Msg("returned the start's scratch memory to the OS")
	}()
}

// waitSettled waits until no upstream is connecting (statuses nil: none)
// or bound has passed; false if ctx ended first.
func waitSettled(ctx context.Context, statuses func() []upstream.Status, bound, poll time.Duration) bool {
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if statuses == nil || !anyConnecting(statuses()) {
			return ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return true
		case <-tick.C:
		}
	}
}

func anyConnecting(ss []upstream.Status) bool {
	for _, st := range ss {
		if st.State == upstream.StateConnecting {
			return true
		}
	}
	return false
}
