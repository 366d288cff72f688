// Package tick runs a function at a fixed interval in the background until
// it is stopped: the activity heartbeat of a running tool call and the MCP
// progress notifications of a waiting one.
//
// tick is a leaf package: it imports only the standard library.
package tick

import (
	"context"
	"time"
)

// Every calls f(1), f(2), … every d, from one goroutine, until ctx is done
// or stop is called. The first call comes after d, not at once. stop
// returns once f is no longer running and will not run again; call it
// once.
func Every(ctx context.Context, d time.Duration, f func(n int)) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(d)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// A tick that came while stop was called does not run f.
			select {
			case <-done:
				return
			default:
			}
			f(n)
		}
	}()
	return func() { close(done); <-finished }
}
